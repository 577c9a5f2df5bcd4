"""The agent's file I/O: atomic replacement, the state folder's lock, and host-root paths.

A reader (or a crash) sees a file's old bytes or its new ones, never a mix or an empty file;
every read-modify-write runs under :func:`locked`, so two agents never interleave.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import tempfile
from collections.abc import Iterator

from gpuctrl.toolkit._errors import InvalidConfig, ToolkitError

__all__ = [
    "TMP_SUFFIX",
    "locked",
    "read_bytes",
    "remove",
    "remove_stale",
    "resolve",
    "write_atomic",
]

TMP_SUFFIX = ".gpuctrl-tmp"  # never matches an ``imports`` glob such as ``*.toml``
LOCK_NAME = "toolkit.lock"
_MAX_LINKS = 40  # as the kernel's ELOOP limit


def read_bytes(path: str) -> bytes | None:
    """The file's bytes, or None if it does not exist."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise ToolkitError(f"{path}: cannot read: {err.strerror}") from err


def write_atomic(path: str, data: bytes, mode: int | None = None) -> None:
    """Replace ``path`` with ``data``: a uniquely named temporary file in the same folder, fsync,
    rename, fsync the folder. The file keeps its owner and extended attributes (SELinux label,
    ACLs); it gets ``mode`` when given, else its current mode (0644 for a new file).

    Raises :class:`ToolkitError` naming ``path`` when the disk is full or read-only.
    """
    folder, name = os.path.split(os.path.abspath(path))
    try:
        st: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        st = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=TMP_SUFFIX, dir=folder)
    except OSError as err:
        raise ToolkitError(f"{path}: cannot write: {err.strerror}") from err
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if st is not None:
                os.fchown(f.fileno(), st.st_uid, st.st_gid)
                _copy_xattrs(path, f.fileno())
            keep = st.st_mode & 0o7777 if st is not None else 0o644
            os.fchmod(f.fileno(), keep if mode is None else mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except Exception as err:  # a crash leaves the temporary file: remove_stale takes it
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(err, OSError):
            raise ToolkitError(f"{path}: cannot write: {err.strerror}") from err
        raise
    _fsync_folder(folder)


def _copy_xattrs(path: str, fd: int) -> None:
    """Give ``fd`` the extended attributes of ``path`` (none where the file system has none)."""
    try:
        names = os.listxattr(path)
    except OSError as err:
        if err.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            return
        raise
    for attr in names:
        os.setxattr(fd, attr, os.getxattr(path, attr))


def remove(path: str) -> None:
    """Delete ``path`` (if it exists) and make the deletion durable."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
        _fsync_folder(os.path.dirname(os.path.abspath(path)))


def remove_stale(path: str) -> None:
    """Delete the temporary files that writes of ``path`` killed mid-way left behind.

    Only safe under :func:`locked`: every writer of ``path`` holds that lock.
    """
    folder, name = os.path.split(os.path.abspath(path))
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for entry in os.listdir(folder):
            if entry.startswith(f".{name}.") and entry.endswith(TMP_SUFFIX):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(folder, entry))


@contextlib.contextmanager
def locked(state_dir: str) -> Iterator[None]:
    """Hold the exclusive lock of ``state_dir`` (created, 0700, if needed) while in the block.

    On the way out a state folder that holds nothing but the lock file is removed (no journal:
    nothing to keep); a waiting agent notices that its lock file was unlinked and locks anew.
    """
    path = os.path.join(state_dir, LOCK_NAME)
    while True:
        try:
            os.makedirs(state_dir, mode=0o700, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:
            continue  # the agent that held the lock removed the folder in between
        except FileExistsError as err:
            if os.path.lexists(state_dir) and not os.path.isdir(state_dir):
                raise ToolkitError(
                    f"{state_dir}: cannot take the agent's lock: not a folder"
                ) from err
            continue  # makedirs saw it, then the agent that held the lock removed it
        except OSError as err:
            raise ToolkitError(
                f"{state_dir}: cannot take the agent's lock: {err.strerror}"
            ) from err
        fcntl.flock(fd, fcntl.LOCK_EX)
        if _same_file(fd, path):
            break
        os.close(fd)  # unlinked by the agent that held it: lock the new one
    try:
        yield
    finally:
        try:
            with contextlib.suppress(OSError):
                if os.listdir(state_dir) == [LOCK_NAME]:
                    os.unlink(path)
                    os.rmdir(state_dir)
        finally:
            os.close(fd)


def _same_file(fd: int, path: str) -> bool:
    try:
        st, now = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino)


def resolve(root: str, path: str) -> str:
    """``path`` (under ``root``, where this process sees the host's root) with every symbolic
    link in it followed as the host follows it: an absolute target is a host path, so it is
    taken under ``root``. A missing tail is kept as it is; a final link is followed too, so
    writing to the result edits the link's target and keeps the link.

    Raises :class:`InvalidConfig` for a link that leads outside ``root`` (or a loop of links).
    """
    root = os.path.abspath(root)
    rel = os.path.relpath(os.path.abspath(path), root)
    if rel == ".." or rel.startswith("../"):
        raise InvalidConfig(f"{path} is not under the host root {root}")
    pending = [] if rel == "." else rel.split("/")
    pending.reverse()
    done: list[str] = []
    links = 0
    while pending:
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if not done and root != "/":
                raise InvalidConfig(f"{path}: a symbolic link in it leads outside {root}")
            if done:
                done.pop()
            continue
        here = os.path.join(root, *done, part)
        try:
            target = os.readlink(here)
        except OSError:
            done.append(part)  # not a link (or missing): taken as it is
            continue
        links += 1
        if links > _MAX_LINKS:
            raise InvalidConfig(f"{path}: too many levels of symbolic links")
        if target.startswith("/"):
            done = []
        pending.extend(reversed(target.split("/")))
    return os.path.join(root, *done)


def _fsync_folder(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
