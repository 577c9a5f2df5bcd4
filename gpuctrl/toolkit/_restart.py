"""Restarting the container runtime after its configuration changed."""

from __future__ import annotations

import os
import posixpath
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Iterable
from typing import Literal

from gpuctrl.toolkit._errors import InvalidConfig, ToolkitError

__all__ = [
    "UNIT_DIRS",
    "RestartMode",
    "choose_unit",
    "installed_units",
    "peer_pid",
    "restart",
    "systemd_command",
    "unit_candidates",
]

RestartMode = Literal["none", "signal", "systemd"]

# The systemd unit that runs the runtime, per distribution, in order of preference (the first
# installed one is restarted). k3s and RKE2 run containerd as a child of their server or agent
# unit; microk8s runs it as its own snap service (kubelite runs only the Kubernetes parts).
_UNITS: dict[str, tuple[str, ...]] = {
    "containerd": ("containerd",),
    "crio": ("crio",),
    "k3s": ("k3s", "k3s-agent"),
    "rke2": ("rke2-server", "rke2-agent"),
    "microk8s": ("snap.microk8s.daemon-containerd",),
}
# Where unit files are installed (k3s's installer: /etc; RKE2's tarball: /usr/local/lib; the
# distribution packages: /usr/lib or /lib), as systemd searches them.
UNIT_DIRS = (
    "/etc/systemd/system",
    "/run/systemd/system",
    "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
)


def peer_pid(path: str) -> int:
    """The PID of the process serving the unix socket ``path`` (from its peer credentials)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, _uid, _gid = struct.unpack("3i", creds)
    return int(pid)


def unit_candidates(distribution: str) -> tuple[str, ...]:
    """The units that may run the runtime of ``distribution`` (or ``crio``), preferred first."""
    return _UNITS[distribution]


def choose_unit(candidates: Iterable[str], installed: Iterable[str]) -> str:
    """The first of ``candidates`` among the ``installed`` units.

    Raises :class:`InvalidConfig` naming the candidates when none is installed.
    """
    found = set(installed)
    wanted = tuple(candidates)
    for unit in wanted:
        if unit in found:
            return unit
    raise InvalidConfig(
        f"no systemd unit {' or '.join(wanted)} is installed on the host (looked in"
        f" {', '.join(UNIT_DIRS)}): name the unit with --restart-unit, or choose another"
        " --restart-mode"
    )


def installed_units(host_root: str, candidates: Iterable[str]) -> list[str]:
    """Those of ``candidates`` whose unit file exists under ``host_root`` (in `UNIT_DIRS`)."""
    return [
        unit
        for unit in candidates
        if any(
            os.path.exists(posixpath.join(host_root, folder.lstrip("/"), f"{unit}.service"))
            for folder in UNIT_DIRS
        )
    ]


def systemd_command(unit: str, host_root: str) -> list[str]:
    """The command that restarts systemd ``unit``, run in ``host_root``."""
    command = ["systemctl", "restart", unit]
    return command if os.path.abspath(host_root) == "/" else ["chroot", host_root, *command]


def restart(
    mode: RestartMode,
    runtime: str,
    sock: str,
    host_root: str = "/",
    unit: str | None = None,
    timeout: float = 60.0,
) -> str:
    """Restart the runtime as ``mode`` says and return a sentence saying what was done.

    ``systemd`` restarts ``unit`` (required then) in ``host_root``. ``signal`` sends SIGHUP to
    the socket's owner: containerd exits on it and its supervisor starts it again, which this
    waits for (up to ``timeout`` seconds); CRI-O reloads in place.
    """
    if mode == "none":
        return f"{runtime} not restarted (--restart-mode none)"
    if mode == "systemd":
        if unit is None:
            raise ToolkitError("--restart-mode systemd needs the unit to restart")
        command = systemd_command(unit, host_root)
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
