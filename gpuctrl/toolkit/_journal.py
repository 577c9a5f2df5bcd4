"""The journal: what install found and did, kept in the state folder until cleanup succeeds.

It is written (atomically) before install changes anything, so that after a crash or SIGKILL
a second install re-uses the recorded original instead of taking its own output for the
user's file, and cleanup can always restore the original bytes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any, Literal

from gpuctrl.toolkit._errors import ToolkitError
from gpuctrl.toolkit._fs import read_bytes, remove, write_atomic
from gpuctrl.toolkit._settings import Change

__all__ = [
    "FileRecord",
    "Journal",
    "Role",
    "digest",
    "drop_journal",
    "journal_path",
    "load_journal",
    "save_journal",
]

JOURNAL_NAME = "toolkit-journal.json"
_FORMAT = 1

Role = Literal["config", "drop-in"]  # a drop-in is gpuctrl's own file, removed whole


def digest(data: bytes | None) -> str | None:
    """The SHA-256 of ``data`` in hex (None for a file that does not exist)."""
    return None if data is None else hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class FileRecord:
    """One file install manages: its bytes before install and a checksum of what it wrote."""

    path: str
    role: Role
    original: bytes | None  # None: the file did not exist
    written_sha256: str | None  # None: install's result is "no file"
    changes: tuple[Change, ...]
    # What install edited instead of a missing file (k3s/RKE2: the config k3s generated).
    base: bytes | None = None
    # The folders install created for the file, outermost first; cleanup removes them if empty.
    folders: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """This record as JSON-ready data."""
        return {
            "base": _encode(self.base),
            "folders": list(self.folders),
            "path": self.path,
            "role": self.role,
            "original": _encode(self.original),
            "original_sha256": digest(self.original),
            "written_sha256": self.written_sha256,
            "changes": [
                {"kind": c.kind, "path": list(c.path), "previous": c.previous, "value": c.value}
                for c in self.changes
            ],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FileRecord:
        """Read a record back; raises ``KeyError``/``ValueError`` for a damaged one."""
        original = _decode(data["original"])
        if digest(original) != data["original_sha256"]:
            raise ValueError(f"the original of {data['path']} does not match its checksum")
        changes = tuple(
            Change(c["kind"], tuple(c["path"]), c["previous"], c["value"]) for c in data["changes"]
        )
        base = _decode(data.get("base"))
        folders = tuple(str(f) for f in data.get("folders", ()))
        return cls(
            data["path"], data["role"], original, data["written_sha256"], changes, base, folders
        )


def _encode(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _decode(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


@dataclass(frozen=True)
class Journal:
    """The files of one install, in the order install writes them."""

    runtime: str
    files: tuple[FileRecord, ...]

    def record(self, path: str) -> FileRecord | None:
        """The record of ``path``, if the journal has one."""
        return next((f for f in self.files if f.path == path), None)


def load_journal(state_dir: str) -> Journal | None:
    """The journal in ``state_dir``, or None. Raises :class:`ToolkitError` if it is damaged."""
    path = os.path.join(state_dir, JOURNAL_NAME)
    raw = read_bytes(path)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        if data["format"] != _FORMAT:
            raise ValueError(f"unknown journal format {data['format']!r}")
        return Journal(data["runtime"], tuple(FileRecord.from_json(f) for f in data["files"]))
    except (ValueError, KeyError, TypeError) as err:
        raise ToolkitError(f"{path}: damaged journal ({err}); fix or remove it by hand") from err


def save_journal(state_dir: str, journal: Journal) -> None:
    """Write the journal atomically into ``state_dir`` (which :func:`~_fs.locked` created)."""
    data = {
        "format": _FORMAT,
        "runtime": journal.runtime,
        "files": [f.to_json() for f in journal.files],
    }
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    write_atomic(os.path.join(state_dir, JOURNAL_NAME), text.encode(), mode=0o600)


def drop_journal(state_dir: str) -> None:
    """Remove the journal (after a successful cleanup)."""
    remove(os.path.join(state_dir, JOURNAL_NAME))


def journal_path(state_dir: str) -> str:
    """Where the journal of ``state_dir`` is kept."""
    return os.path.join(state_dir, JOURNAL_NAME)
