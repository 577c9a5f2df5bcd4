"""`gpuctrl manager`'s user errors: exit 2 with one line naming the problem, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _manager(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")
    }
    return subprocess.run(
        [sys.executable, "-m", "gpuctrl", "manager", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={**clean, **(env or {})},
    )


def _kubeconfig(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{server}", insecure-skip-tls-verify: true}}}}]
users: [{{name: u, user: {{token: secret-token-never-printed}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
"""
    )
    return path


@pytest.mark.parametrize("text", ["8080", "host:", "host:http", ":70000"])
def test_bad_address_is_a_usage_error(text: str) -> None:
    result = _manager("--metrics-bind-address", text)
    assert result.returncode == 2
    assert "--metrics-bind-address" in result.stderr
    assert "Traceback" not in result.stderr


def test_unreachable_apiserver_exits_2_with_one_line(tmp_path: Path) -> None:
    result = _manager("--kubeconfig", str(_kubeconfig(tmp_path, "https://127.0.0.1:1")))
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if "gpuctrl manager:" in line]
    assert len(lines) == 1
    assert "cannot reach the apiserver at https://127.0.0.1:1" in lines[0]
    assert "Traceback" not in result.stderr
    assert "secret-token-never-printed" not in result.stderr + result.stdout


def test_unreadable_kubeconfig_exits_2(tmp_path: Path) -> None:
    result = _manager("--kubeconfig", str(tmp_path / "missing"))
    assert result.returncode == 2
    assert "cannot load the kubeconfig" in result.stderr
    assert "Traceback" not in result.stderr


def test_no_configuration_at_all_exits_2() -> None:
    result = _manager(env={"HOME": "/nonexistent"})
    assert result.returncode == 2
    assert "no --kubeconfig, no $KUBECONFIG and not running in a cluster" in result.stderr
