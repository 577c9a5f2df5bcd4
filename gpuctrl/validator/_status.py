"""Status files: ``<output-dir>/<check>-ready`` exists only while a check's last run passed.

Other operands wait for these files, so a reader must never see a half-written one: the file
is written under a temporary name and renamed into place. The folder is NVIDIA's
(``/run/nvidia/validations``), where NVIDIA's images and scripts look for them.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = [
    "DEFAULT_OUTPUT_DIR",
    "DRIVER_CONTAINER_MARK",
    "clear_status",
    "status_path",
    "write_status",
]

DEFAULT_OUTPUT_DIR = Path("/run/nvidia/validations")
# The driver container's ready mark in the folder, as NVIDIA names it: its startup probe writes
# it, its preStop hook removes it.
DRIVER_CONTAINER_MARK = ".driver-ctr-ready"


def status_path(output_dir: Path, check: str) -> Path:
    """The status file of ``check`` in ``output_dir``."""
    return output_dir / f"{check}-ready"


def clear_status(output_dir: Path, check: str) -> None:
    """Remove ``check``'s status file if there is one (call before running the check)."""
    status_path(output_dir, check).unlink(missing_ok=True)


def write_status(output_dir: Path, check: str, content: str) -> Path:
    """Atomically create ``check``'s status file holding ``content``; creates ``output_dir``."""
    output_dir.mkdir(parents=True, exist_ok=True)
    target = status_path(output_dir, check)
    descriptor, temporary = tempfile.mkstemp(dir=output_dir, prefix=f".{check}-ready.")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(content)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target
