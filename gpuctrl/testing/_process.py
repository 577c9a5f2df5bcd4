"""Child processes of a control plane that cannot outlive it.

Each binary runs in its own process group (so a kill reaches anything it forks) with its output in
a log file. On Linux the child also asks the kernel to SIGKILL it when the thread that started it
dies, which covers even a SIGKILLed test run; `Resources` covers everything else: it is called on
normal exit, on errors, and (through `weakref.finalize`) at interpreter exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["Process", "Resources"]

_PR_SET_PDEATHSIG = 1
_LOG_TAIL_BYTES = 4000


def _load_prctl() -> object | None:
    if not sys.platform.startswith("linux"):
        return None
    with contextlib.suppress(OSError, AttributeError):
        return ctypes.CDLL(None, use_errno=True).prctl
    return None


# Resolved once here: the pre-exec hook runs between fork and exec and must do next to nothing.
_prctl = _load_prctl()


def _die_with_parent() -> None:
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # type: ignore[operator]


class Process:
    """One running binary; its output goes to `log_file`."""

    def __init__(self, name: str, argv: Sequence[str], log_file: Path) -> None:
        self.name = name
        self.log_file = log_file
        with log_file.open("ab") as log:
            self._popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    @property
    def pid(self) -> int:
        """The process id, also its process group id."""
        return self._popen.pid

    @property
    def exit_code(self) -> int | None:
        """The exit status, or None while the process runs."""
        return self._popen.poll()

    def log_tail(self) -> str:
        """The last few thousand characters the process wrote."""
        try:
            data = self.log_file.read_bytes()[-_LOG_TAIL_BYTES:]
        except OSError:
            return ""
        return data.decode(errors="replace")

    def kill(self) -> None:
        """SIGKILL the whole process group and reap the process; idempotent."""
        if self._popen.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._popen.pid, signal.SIGKILL)
        self._popen.wait()

    async def stop(self, grace_seconds: float) -> None:
        """SIGTERM the process group, wait up to `grace_seconds`, then SIGKILL it."""
        if self._popen.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._popen.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(self._popen.wait, grace_seconds)
        self.kill()


class Resources:
    """What a control plane must release: its processes and its folder.

    `close()` is synchronous so that it can run from a finalizer at interpreter exit.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.processes: list[Process] = []

    def close(self) -> None:
        """Kill every process, then remove the folder; safe to call more than once."""
        for process in reversed(self.processes):
            process.kill()
        self.processes.clear()
        shutil.rmtree(self.directory, ignore_errors=True)
