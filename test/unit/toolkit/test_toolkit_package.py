"""The package's public surface, and that the agent never loads a Kubernetes client."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gpuctrl.toolkit._restart import peer_pid, restart


@pytest.mark.parametrize(
    "code",
    [
        "import gpuctrl.toolkit.cli",
        "from gpuctrl.cli import main\ntry:\n    main(['toolkit', 'install', '--help'])\n"
        "except SystemExit:\n    pass",
    ],
    ids=["import", "help"],
)
def test_toolkit_does_not_load_kubernetes(code: str) -> None:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    modules = json.loads(done.stdout.splitlines()[-1])
    assert "gpuctrl.toolkit.cli" in modules
    assert not [m for m in modules if m.startswith(("kubernetes_asyncio", "aiohttp"))]


def test_peer_pid_names_the_socket_owner(tmp_path: Path) -> None:
    path = str(tmp_path / "s.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(path)
        server.listen(1)
        assert peer_pid(path) == os.getpid()


def test_restart_none_does_nothing() -> None:
    assert "not restarted" in restart("none", "containerd", "/nonexistent.sock")
