"""``write_secret_volume``: files laid out and swapped the way the kubelet mounts a Secret."""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from pathlib import Path

__all__ = ["write_secret_volume"]


def write_secret_volume(folder: Path, files: Mapping[str, bytes]) -> None:
    """Make ``folder`` hold ``files`` as a Secret volume does: each name a symlink into
    ``..data``, itself a symlink to a fresh timestamped folder, swapped by one atomic rename
    (so a reader sees the old set or the new one, never a mix)."""
    folder.mkdir(parents=True, exist_ok=True)
    payload = folder / f"..{secrets.token_hex(4)}"
    payload.mkdir()
    for name, content in files.items():
        (payload / name).write_bytes(content)
    link = folder / "..data_tmp"
    link.symlink_to(payload.name)
    os.replace(link, folder / "..data")
    for name in files:
        if not (folder / name).is_symlink():
            (folder / name).symlink_to(f"..data/{name}")
