"""The driver and toolkit checks: run ``nvidia-smi`` and report what was run and what it said.

The driver check runs it inside the driver's root, as NVIDIA's validator does: the driver
container's root when a driver container has installed one there, else the host's root
(``chroot ROOT nvidia-smi``; a root of ``/`` runs it directly). Where a driver container
installs the driver and the host has none of its own, the container's ready mark (written by
its startup probe once the module is loaded and nvidia-smi answers) comes first, as NVIDIA's
validator waits for ``.driver-ctr-ready``: a root still being installed is never trusted. The
toolkit check runs it in its own container, where the NVIDIA runtime put it.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SmiResult", "driver_command", "driver_ready_env", "run_smi", "toolkit_command"]

_SMI = "nvidia-smi"
# Where a driver root keeps nvidia-smi; the first one present marks the root as installed.
_SMI_PATHS = ("usr/bin/nvidia-smi", "bin/nvidia-smi", "usr/local/bin/nvidia-smi")
# A run gets at least this long, even when the deadline has (nearly) passed.
_MIN_RUN_SECONDS = 1.0


@dataclass(frozen=True)
class SmiResult:
    """One run of the check: the command line, whether it passed, and its combined output."""

    argv: tuple[str, ...]
    passed: bool
    output: str

    def describe(self) -> str:
        """A human report: what was run, the outcome and the output."""
        outcome = "passed" if self.passed else "failed"
        return f"ran: {' '.join(self.argv)}\n{outcome}\n{self.output.rstrip()}".rstrip()


def _has_driver(root: Path) -> bool:
    return any((root / path).is_file() for path in _SMI_PATHS)


def _installed_root(host_root: Path, driver_root: Path) -> Path:
    """``driver_root`` if a driver container installed a driver there, else ``host_root``."""
    return driver_root if _has_driver(driver_root) else host_root


def driver_command(
    host_root: Path, driver_root: Path, container_mark: Path | None = None
) -> tuple[str, ...]:
    """The command of the driver check: nvidia-smi in ``driver_root`` if a driver container
    installed it there, else in ``host_root``. With ``container_mark`` (a driver container
    installs the driver) and no driver on the host, a check of the mark until it exists.
    Decided afresh on each call (a driver may appear)."""
    if container_mark is not None and not _has_driver(host_root) and not container_mark.exists():
        return ("stat", str(container_mark))
    root = _installed_root(host_root, driver_root)
    if root.resolve() == Path("/"):
        return (_SMI,)
    return ("chroot", str(root), _SMI)


def driver_ready_env(host_root: Path, driver_root: Path) -> str:
    """The ``driver-ready`` file as NVIDIA's validator writes it and NVIDIA's images source it
    (``KEY=value`` lines): whether the driver is the host's, and where its root and its device
    nodes are, on the host (``NVIDIA_DRIVER_ROOT``, ``NVIDIA_DEV_ROOT``) and in a container
    that mounts the host's root at ``host_root`` and a driver container's root at its host
    path ``driver_root`` (``DRIVER_ROOT_CTR_PATH``, ``DEV_ROOT_CTR_PATH``)."""
    host = _installed_root(host_root, driver_root) == host_root
    if host:
        root = dev = ("/", str(host_root))
    else:
        root = (str(driver_root), str(driver_root))
        dev = root if (driver_root / "dev").is_dir() else ("/", str(host_root))
    values = {
        "IS_HOST_DRIVER": "true" if host else "false",
        "NVIDIA_DRIVER_ROOT": root[0],
        "DRIVER_ROOT_CTR_PATH": root[1],
        "NVIDIA_DEV_ROOT": dev[0],
        "DEV_ROOT_CTR_PATH": dev[1],
    }
    return "".join(f"{key}={value}\n" for key, value in values.items())


def toolkit_command() -> tuple[str, ...]:
    """The command of the toolkit check: the nvidia-smi that the NVIDIA runtime put on PATH."""
    return (_SMI,)


def run_smi(
    command: Callable[[], Sequence[str]], *, wait: bool, timeout: float, interval: float
) -> SmiResult:
    """Run ``command()`` once, or with ``wait`` every ``interval`` seconds until it passes or
    ``timeout`` seconds have gone; no run outlives the timeout. Returns the last run's result."""
    deadline = time.monotonic() + timeout
    while True:
        result = _run_once(tuple(command()), max(deadline - time.monotonic(), _MIN_RUN_SECONDS))
        if result.passed or not wait or deadline - time.monotonic() <= interval:
            return result
        time.sleep(interval)


def _run_once(argv: tuple[str, ...], timeout: float) -> SmiResult:
    try:
        completed = subprocess.run(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as error:
        return SmiResult(argv, False, f"{argv[0]}: not found ({error.strerror})")
    except subprocess.TimeoutExpired as error:
        output = _decode(error.output)
        return SmiResult(argv, False, f"{output}\nno answer after {timeout:.0f} s".lstrip())
    except OSError as error:
        return SmiResult(argv, False, f"{argv[0]}: cannot run: {error}")
    output = _decode(completed.stdout)
    if completed.returncode != 0:
        output = f"{output.rstrip()}\nexit code {completed.returncode}".lstrip()
    return SmiResult(argv, completed.returncode == 0, output)


def _decode(output: bytes | None) -> str:
    return (output or b"").decode("utf-8", errors="replace")
