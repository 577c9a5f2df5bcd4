"""Build (once) the client-go peer of bench_sync.py: ``test/bench/clientgo/``, a shared informer
and a work queue of client-go v0.34.4 (the release of the control plane's Kubernetes 1.34.4).

`ensure_clientgo` returns the path of the binary, building it first when missing: with the Go
toolchain the control plane is built with (`gpuctrl.testing.envtest.find_go`), modules from the
Go module proxy (already in ``~/go/pkg/mod`` once the control plane was built), into
``~/.cache/gpuctrl/bench/clientgo-<hash of the sources>/``: a changed source builds anew. As for
the control plane, the build works in a scratch folder renamed into place under a lock, and says
what it does.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from gpuctrl.testing.envtest import find_go

__all__ = ["SOURCES", "ensure_clientgo"]

SOURCES = Path(__file__).with_name("clientgo")
_FILES = ("go.mod", "go.sum", "main.go")


def ensure_clientgo() -> Path:
    """The built client-go bench program (see the module docstring)."""
    digest = hashlib.sha256()
    for name in _FILES:
        digest.update((SOURCES / name).read_bytes())
    folder = Path.home() / ".cache" / "gpuctrl" / "bench" / f"clientgo-{digest.hexdigest()[:12]}"
    binary = folder / "clientgo"
    if os.access(binary, os.X_OK):
        return binary
    folder.parent.mkdir(parents=True, exist_ok=True)
    with _locked(folder.parent / f".{folder.name}.lock"):
        if not os.access(binary, os.X_OK):
            _build(folder)
    return binary


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _build(folder: Path) -> None:
    go = find_go()
    print(
        f"bench: building the client-go peer ({SOURCES}) with {go} into {folder}; the first "
        "build takes a minute or two (modules from the Go module proxy, or ~/go/pkg/mod)",
        file=sys.stderr,
        flush=True,
    )
    started = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        env = {**os.environ, "GOFLAGS": "-mod=mod -buildvcs=false", "GOWORK": "off"}
        done = subprocess.run(
            [go, "build", "-trimpath", "-o", str(scratch / "clientgo"), "."],
            cwd=SOURCES,
            env={**env, "CGO_ENABLED": "0"},
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"bench: building the client-go peer failed:\n{done.stderr}")
        if folder.exists():
            shutil.rmtree(folder)
        os.rename(scratch, folder)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(
        f"bench: client-go peer built in {time.monotonic() - started:.0f} s",
        file=sys.stderr,
        flush=True,
    )
