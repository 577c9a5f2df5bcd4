"""``gpuctrl webhook``: flags checked up front; no apiserver means exit 2 with one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpuctrl.cli import main


def gpuctrl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuctrl", "webhook", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--bind-address", "9443"], "is not HOST:PORT", id="port-without-colon"),
        pytest.param(["--bind-address", ":99999"], "is not HOST:PORT", id="port-out-of-range"),
        pytest.param(["--webhook-url", "http://x/mutate"], "is not an https:// URL", id="http-url"),
        pytest.param(
            ["--webhook-url", "https://x/m", "--service-name", "s"],
            "not allowed with argument",
            id="url-and-service",
        ),
        pytest.param(["--frobnicate"], "unrecognized arguments", id="unknown-flag"),
    ],
)
def test_a_bad_flag_exits_2_naming_it(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["webhook", *args])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_an_unreachable_apiserver_exits_2_with_one_line(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    result = gpuctrl("--kubeconfig", str(kubeconfig), "--cert-dir", str(tmp_path))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "the apiserver at https://127.0.0.1:1 is unreachable" in lines[0]


def test_a_missing_kubeconfig_exits_2_with_one_line(tmp_path: Path) -> None:
    result = gpuctrl("--kubeconfig", str(tmp_path / "absent"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "cannot load the kubeconfig" in lines[0]
