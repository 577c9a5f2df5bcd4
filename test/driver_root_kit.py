"""Driver roots for the validator's tests: an nvidia-smi stand-in installed whole, and a root
a chroot can run it in (the driver check chroots into a driver container's root)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

__all__ = ["install_smi", "minimal_root"]


def install_smi(directory: Path, script: str) -> Path:
    """``script`` as ``directory/nvidia-smi``, executable, appearing whole (renamed into place)
    as a driver install would write it."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "nvidia-smi"
    temporary = directory / ".nvidia-smi.tmp"
    temporary.write_text(script)
    temporary.chmod(0o755)
    temporary.rename(path)
    return path


def minimal_root(root: Path, smi: str) -> None:
    """A root holding /bin/sh, the libraries it needs and ``smi`` as /usr/bin/nvidia-smi."""
    shell = Path(shutil.which("dash") or "/bin/sh").resolve()
    libraries = subprocess.run(["ldd", str(shell)], capture_output=True, text=True, check=True)
    for word in libraries.stdout.split():
        if word.startswith("/"):
            target = root / word.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(Path(word).resolve(), target)
    (root / "bin").mkdir(parents=True, exist_ok=True)
    shutil.copy2(shell, root / "bin" / "sh")
    install_smi(root / "usr" / "bin", smi)
