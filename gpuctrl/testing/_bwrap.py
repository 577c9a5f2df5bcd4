"""The bubblewrap (``bwrap``) command line that runs one container's process (pure).

The sandbox's root is an empty tmpfs: nothing of the host is visible unless bound in, and a
mount point is only ever created inside the sandbox, never on the real disk (binding ``/``
writable would create them there; see ../shared/reference/local-control-plane.md). Bound in,
read-only: ``/usr`` and the host's top-level links into it (``/bin``, ``/lib``, ...), a few
files of ``/etc`` a process needs (users, name resolution, the loader cache, CA
certificates), and the Python installation and project that run ``gpuctrl``; then the
container's own mounts at their paths. Where a container mount lies inside a read-only system
folder (``/usr/local/nvidia``), that folder is rebuilt from its entries, so the mount point
is made on the tmpfs. The process is PID 1 of its own PID namespace (a signal without a
handler does not stop it, as in a container; when it dies, everything it started dies) and
dies with the kubelet (``--die-with-parent``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

__all__ = [
    "ETC_FILES",
    "Entry",
    "Listing",
    "Mount",
    "bwrap_argv",
    "host_entry",
    "host_listing",
    "system_binds",
]

# The files of /etc bound in when present: users, name resolution, the loader's cache,
# alternatives (Debian's /usr/bin/awk -> /etc/alternatives/awk), time zone, certificates.
ETC_FILES = (
    "/etc/passwd",
    "/etc/group",
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/nsswitch.conf",
    "/etc/ld.so.cache",
    "/etc/alternatives",
    "/etc/localtime",
    "/etc/ssl",
    "/etc/ca-certificates",
)


@dataclass(frozen=True)
class Mount:
    """A host path bound at `target` inside the sandbox."""

    source: str
    target: str
    read_only: bool


@dataclass(frozen=True)
class Entry:
    """One entry of a host folder: its path and, for a symbolic link, where it points."""

    path: str
    link: str | None = None


Listing = Callable[[str], Iterable[Entry]]
"""The entries of a host folder."""


def system_binds(roots: Sequence[Entry], targets: Iterable[str], listing: Listing) -> list[str]:
    """``bwrap`` arguments that show `roots` (host paths, or links) read-only at their own
    paths, leaving room for mounts at `targets`.

    A root with a target strictly inside it becomes a folder of the tmpfs holding its entries
    (recursively, along the target's path); a root that is itself a target is left out. A
    target under a root that is a link (``/bin/sh`` with ``/bin -> usr/bin``) is where bwrap
    puts it, through the link (``/usr/bin/sh``).
    """
    wanted = [_through_links(PurePosixPath(t), roots) for t in targets]
    arguments: list[str] = []
    for root in _outermost(roots):
        arguments += _bind(root, wanted, listing)
    return arguments


def bwrap_argv(
    command: Sequence[str],
    *,
    system: Sequence[str],
    mounts: Sequence[Mount],
    working_dir: str,
    hostname: str,
    info_fd: int,
) -> list[str]:
    """The full command line: `system` (from `system_binds`), the basic file systems, the
    `mounts` (outer ones first) and `command`, run in `working_dir`."""
    arguments = [
        "bwrap",
        "--die-with-parent",
        "--unshare-pid",
        "--as-pid-1",
        "--unshare-uts",
        "--unshare-ipc",
        "--hostname",
        hostname,
        "--info-fd",
        str(info_fd),
        "--tmpfs",
        "/",
        *system,
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
    ]
    for mount in sorted(mounts, key=lambda m: len(PurePosixPath(m.target).parts)):
        kind = "--ro-bind" if mount.read_only else "--bind"
        arguments += [kind, mount.source, mount.target]
    return [*arguments, "--chdir", working_dir, "--", *command]


def _through_links(target: PurePosixPath, roots: Sequence[Entry]) -> PurePosixPath:
    for root in roots:
        path = PurePosixPath(root.path)
        if root.link is not None and target != path and target.is_relative_to(path):
            destination = os.path.normpath(path.parent / root.link / target.relative_to(path))
            return PurePosixPath(destination)
    return target


def _outermost(roots: Sequence[Entry]) -> list[Entry]:
    """`roots` without those inside another root, without duplicates, in order."""
    paths = [PurePosixPath(r.path) for r in roots]
    kept: list[Entry] = []
    for root, path in zip(roots, paths, strict=True):
        inside = any(other != path and path.is_relative_to(other) for other in paths)
        if not inside and root.path not in {k.path for k in kept}:
            kept.append(root)
    return kept


def _bind(entry: Entry, targets: list[PurePosixPath], listing: Listing) -> list[str]:
    path = PurePosixPath(entry.path)
    if path in targets:
        return []
    if entry.link is not None:
        return ["--symlink", entry.link, entry.path]
    if not any(t != path and t.is_relative_to(path) for t in targets):
        return ["--ro-bind", entry.path, entry.path]
    arguments = ["--dir", entry.path]
    for child in sorted(listing(entry.path), key=lambda e: e.path):
        arguments += _bind(child, targets, listing)
    return arguments


def host_listing(folder: str) -> list[Entry]:
    """The entries of the host folder `folder` (the I/O behind `Listing`)."""
    with os.scandir(folder) as entries:
        return [Entry(e.path, os.readlink(e.path) if e.is_symlink() else None) for e in entries]


def host_entry(path: str) -> Entry | None:
    """`path` as an `Entry` (None when it does not exist)."""
    if os.path.islink(path):
        return Entry(path, os.readlink(path))
    return Entry(path) if os.path.exists(path) else None
