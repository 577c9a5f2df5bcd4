"""`gpuctrl manager` against the real apiserver: an address it cannot bind exits 2 with one
line naming it, no traceback."""

from __future__ import annotations

import asyncio
import socket
import sys

from gpuctrl.testing import ControlPlane


def _free_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


async def test_a_busy_metrics_address_exits_2_with_one_line(control_plane: ControlPlane) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gpuctrl", "manager",
            "--kubeconfig", str(control_plane.kubeconfig), "--namespace", "busy-address",
            "--no-leader-elect", "--metrics-bind-address", f"127.0.0.1:{port}",
            "--health-probe-bind-address", _free_address(),
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        async with asyncio.timeout(60):
            _, stderr = await process.communicate()
    text = stderr.decode()
    assert process.returncode == 2, text
    assert f"gpuctrl manager: cannot listen on 127.0.0.1:{port}: Address already in use" in text
    assert "Traceback" not in text
