"""One container run for real: a process in a bubblewrap sandbox (the I/O of `_bwrap`).

`SandboxedProcess.start` launches ``bwrap`` in a session of its own with the container's
environment, its output appended to a log file, and learns the container process's PID from
``--info-fd``. `stop` is a kubelet's termination (SIGTERM to the container's PID 1, the grace
period, then SIGKILL); `kill` is a power cut (SIGKILL to everything at once, no handler runs);
`probe` runs an exec probe inside the container's namespaces with ``nsenter``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path

from ._bwrap import Mount, bwrap_argv

__all__ = ["SandboxStartError", "SandboxedProcess"]

_LOG_TAIL_BYTES = 2000


class SandboxStartError(Exception):
    """bwrap could not set the sandbox up (a mount, the command); the message says why."""


class SandboxedProcess:
    """A running container process; `wait` gives its exit code as a container's."""

    def __init__(self, process: asyncio.subprocess.Process, pid: int, env: dict[str, str]) -> None:
        self._process = process
        self.pid = pid  # of the container's PID 1, in the kubelet's PID namespace
        self._env = env

    @classmethod
    async def start(
        cls,
        command: Sequence[str],
        *,
        env: Mapping[str, str],
        system: Sequence[str],
        mounts: Sequence[Mount],
        working_dir: str,
        hostname: str,
        log_file: Path,
    ) -> SandboxedProcess:
        """Start `command` in a new sandbox; raises `SandboxStartError` if bwrap fails."""
        read_end, write_end = os.pipe()
        argv = bwrap_argv(
            command,
            system=system,
            mounts=mounts,
            working_dir=working_dir,
            hostname=hostname,
            info_fd=write_end,
        )
        log_file.parent.mkdir(parents=True, exist_ok=True)
        try:
            with log_file.open("ab") as log:
                process = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    env=dict(env),
                    pass_fds=(write_end,),
                    start_new_session=True,
                )
        finally:
            os.close(write_end)
        try:
            info = await asyncio.to_thread(_read_all, read_end)
        finally:
            os.close(read_end)
        if not info:  # bwrap gave up before starting the command
            await process.wait()
            tail = _tail(log_file)
            raise SandboxStartError(tail or f"bwrap exited with {process.returncode}")
        return cls(process, int(json.loads(info)["child-pid"]), dict(env))

    @property
    def running(self) -> bool:
        """Whether the process has not exited yet."""
        return self._process.returncode is None

    async def wait(self) -> int:
        """The exit code, once it exits (128 + N when killed by signal N)."""
        code = await self._process.wait()
        return 128 - code if code < 0 else code

    async def stop(self, grace_seconds: float) -> int:
        """SIGTERM the container's PID 1, wait up to `grace_seconds`, then SIGKILL it all."""
        if self.running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace_seconds):
                    return await self.wait()
        return await self.kill()

    async def kill(self) -> int:
        """SIGKILL bwrap and everything in the sandbox at once, and return the exit code."""
        if self.running:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, signal.SIGKILL)
        return await self.wait()

    async def probe(self, command: Sequence[str], timeout_seconds: float) -> bool:
        """Run an exec probe in the container's mount, PID and UTS namespaces: exit 0 passes."""
        argv = ["nsenter", f"--target={self.pid}", "--mount", "--pid", "--uts", "--wd", "--"]
        probe = await asyncio.create_subprocess_exec(
            *argv,
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            env=self._env,
            start_new_session=True,
        )
        try:
            async with asyncio.timeout(timeout_seconds):
                return await probe.wait() == 0
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(probe.pid, signal.SIGKILL)
            await probe.wait()
            return False


def _read_all(fd: int) -> bytes:
    data = b""
    while chunk := os.read(fd, 4096):
        data += chunk
    return data


def _tail(log_file: Path) -> str:
    return log_file.read_bytes()[-_LOG_TAIL_BYTES:].decode(errors="replace").strip()
