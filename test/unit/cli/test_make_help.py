"""`make help` (and `make` alone) lists every target of the Makefile with its one line."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[3]


@pytest.mark.parametrize("args", [["help"], []], ids=["help", "default"])
def test_make_help_lists_every_phony_target(args: list[str]) -> None:
    shown = subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    listed = dict(re.findall(r"^  (\S+) +(.+)$", shown, re.MULTILINE))
    phony = re.search(r"^\.PHONY: (.+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert phony is not None
    assert set(listed) == set(phony.group(1).split()) - {"help"}
    assert all(listed.values())
