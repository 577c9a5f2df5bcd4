"""test/conftest.py: a pytest run where every test was skipped fails, one with a pass succeeds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TEST_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("body", "exit_code"),
    [
        ("import pytest\n\n@pytest.mark.skip\ndef test_skipped():\n    pass\n", 5),
        ("def test_passes():\n    pass\n", 0),
    ],
    ids=["all-skipped-fails", "a-pass-succeeds"],
)
def test_exit_code(tmp_path: Path, body: str, exit_code: int) -> None:
    (tmp_path / "test_sample.py").write_text(body)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "conftest",
            "-p",
            "no:cacheprovider",
            "-c",
            "/dev/null",
            "--rootdir",
            str(tmp_path),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(TEST_ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == exit_code, result.stdout + result.stderr
