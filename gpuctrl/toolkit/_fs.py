"""Atomic file replacement: a reader (or a crash) sees the old bytes or the new, never a mix."""

from __future__ import annotations

import contextlib
import os

__all__ = ["read_bytes", "remove", "write_atomic"]


def read_bytes(path: str) -> bytes | None:
    """The file's bytes, or None if it does not exist."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def write_atomic(path: str, data: bytes, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data``: temporary file in the same folder, fsync, rename, fsync
    the folder. An existing file's mode and owner are kept; a new file gets ``mode``.

    The temporary file's name is fixed (``.NAME.gpuctrl-tmp``) so that one left by a crash is
    reused, and it never matches an ``imports`` glob such as ``*.toml``.
    """
    folder, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(folder, f".{name}.gpuctrl-tmp")
    try:
        st: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        st = None
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if st is not None:
                os.fchown(f.fileno(), st.st_uid, st.st_gid)
            os.fchmod(f.fileno(), st.st_mode & 0o7777 if st is not None else mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except Exception:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_folder(folder)


def remove(path: str) -> None:
    """Delete ``path`` (if it exists) and make the deletion durable."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
        _fsync_folder(os.path.dirname(os.path.abspath(path)))


def _fsync_folder(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
