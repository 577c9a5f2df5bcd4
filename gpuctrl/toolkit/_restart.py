"""Restarting the container runtime after its configuration changed."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import time
from typing import Literal

from gpuctrl.toolkit._errors import ToolkitError

__all__ = ["RestartMode", "peer_pid", "restart", "systemd_command"]

RestartMode = Literal["none", "signal", "systemd"]

_UNITS = {"containerd": "containerd", "crio": "crio"}


def peer_pid(path: str) -> int:
    """The PID of the process serving the unix socket ``path`` (from its peer credentials)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, _uid, _gid = struct.unpack("3i", creds)
    return int(pid)


def systemd_command(runtime: str, host_root: str) -> list[str]:
    """The command that restarts ``runtime``'s systemd unit, run in ``host_root``."""
    command = ["systemctl", "restart", _UNITS[runtime]]
    return command if os.path.abspath(host_root) == "/" else ["chroot", host_root, *command]


def restart(
    mode: RestartMode, runtime: str, sock: str, host_root: str = "/", timeout: float = 60.0
) -> str:
    """Restart the runtime as ``mode`` says and return a sentence saying what was done.

    ``signal`` sends SIGHUP to the socket's owner: containerd exits on it and its supervisor
    starts it again, which this waits for (up to ``timeout`` seconds); CRI-O reloads in place.
    """
    if mode == "none":
        return f"{runtime} not restarted (--restart-mode none)"
    if mode == "systemd":
        command = systemd_command(runtime, host_root)
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise ToolkitError(f"{' '.join(command)} failed: {done.stderr.strip()}")
        return f"restarted {runtime} with {' '.join(command)}"
    try:
        pid = peer_pid(sock)
        os.kill(pid, signal.SIGHUP)
    except OSError as err:
        raise ToolkitError(f"cannot signal {runtime} through {sock}: {err}") from err
    if runtime != "containerd":
        return f"sent SIGHUP to {runtime} (pid {pid})"
    _wait_for_new_server(sock, pid, timeout)
    return f"sent SIGHUP to containerd (pid {pid}); its supervisor started it again"


def _wait_for_new_server(sock: str, old: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if peer_pid(sock) != old:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise ToolkitError(f"containerd did not come back on {sock} within {timeout:.0f}s")
