"""install, cleanup and plan: the I/O shell around the pure edits.

Order of install: compute every new file (refusing bad input before anything is written),
write the journal, write the drop-in, write the main config, restart the runtime. Cleanup walks
the journal backwards and removes the journal last, so a crash at any step leaves each file
either as it was or completely rewritten, and running the same command again finishes the job.
A missing k3s/RKE2 template is created from the config k3s generated (see ``_template``), and
cleanup removes it again.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from dataclasses import dataclass

from gpuctrl.toolkit._containerd import add_runtimes
from gpuctrl.toolkit._dropin import containerd_drop_in, crio_drop_in
from gpuctrl.toolkit._errors import InvalidConfig
from gpuctrl.toolkit._fs import read_bytes, remove, write_atomic
from gpuctrl.toolkit._journal import (
    FileRecord,
    Journal,
    Role,
    digest,
    drop_journal,
    load_journal,
    save_journal,
)
from gpuctrl.toolkit._revert import revert_changes
from gpuctrl.toolkit._settings import Edit, RuntimeKind, Settings
from gpuctrl.toolkit._template import generated_config, template_from_generated
from gpuctrl.toolkit._toml import dotted

__all__ = ["FilePlan", "Report", "Target", "cleanup", "diff", "install", "plan"]

Editor = Callable[[str], Edit]


@dataclass(frozen=True)
class Target:
    """Which runtime's files install manages, and where its journal lives."""

    runtime: RuntimeKind
    config: str
    state_dir: str
    drop_in: str | None = None  # containerd: None edits the config itself; CRI-O: required
    # Where the paths above have the host's root: the drop-in path the config imports is the
    # host's, so a config edited from a container with the host mounted at /host stays valid.
    host_root: str = "/"


@dataclass(frozen=True)
class Report:
    """What install or cleanup did, a line per file, and whether any file changed."""

    lines: tuple[str, ...]
    changed: bool


@dataclass(frozen=True)
class FilePlan:
    """One file's bytes now, and what install will make of it."""

    record: FileRecord
    current: bytes | None  # None: the file does not exist
    new: bytes


def plan(target: Target, settings: Settings) -> list[FilePlan]:
    """What install would write, file by file (in writing order), reading but changing nothing.

    Raises :class:`InvalidConfig` naming the file for input it cannot edit safely.
    """
    return _plans(target, settings, load_journal(target.state_dir))


def install(target: Target, settings: Settings) -> Report:
    """Apply :func:`plan`: journal first, then each file atomically. Returns what was done."""
    recorded = load_journal(target.state_dir)
    plans = _plans(target, settings, recorded)
    changed = [p for p in plans if p.new != p.current]
    journal = Journal(target.runtime, tuple(p.record for p in plans))
    if journal != recorded:
        save_journal(target.state_dir, journal)
    for p in changed:
        _put(p.record.path, p.new)
    if not changed:
        return Report(tuple(f"{p.record.path}: already configured" for p in plans), False)
    return Report(tuple(f"{p.record.path}: {_describe(p)}" for p in changed), True)


def _plans(target: Target, settings: Settings, journal: Journal | None) -> list[FilePlan]:
    plans = _plan_files(target, settings, journal)
    stale = {f.path for f in journal.files} - {p.record.path for p in plans} if journal else set()
    if stale:
        raise InvalidConfig(
            f"the journal in {target.state_dir} also manages {', '.join(sorted(stale))}:"
            " run 'gpuctrl toolkit cleanup' with the earlier options first"
        )
    return plans


def _plan_files(target: Target, settings: Settings, journal: Journal | None) -> list[FilePlan]:
    if target.runtime == "crio":
        if target.drop_in is None:
            raise InvalidConfig("CRI-O needs --drop-in (gpuctrl never edits crio.conf)")
        text = crio_drop_in(settings)
        return [_plan_file(target.drop_in, "drop-in", journal, lambda _: Edit(text))]
    if target.drop_in is None:
        editor: Editor = lambda text: add_runtimes(text, settings)  # noqa: E731
        return [_plan_file(target.config, "config", journal, editor)]
    config, drop_in = _on_host(target, target.config), _on_host(target, target.drop_in)
    main = _plan_file(
        target.config,
        "config",
        journal,
        lambda text: containerd_drop_in(text, config, drop_in, settings)[0],
    )
    _, text = containerd_drop_in(main.new.decode(), config, drop_in, settings)
    return [_plan_file(target.drop_in, "drop-in", journal, lambda _: Edit(text)), main]


def _on_host(target: Target, path: str) -> str:
    """``path`` (under ``target.host_root``) as the host names it."""
    if os.path.abspath(target.host_root) == "/":
        return path
    return os.path.join("/", os.path.relpath(path, target.host_root))


def cleanup(target: Target) -> Report:
    """Undo install as the journal records it, then remove the journal. Returns what was done.

    A file still as install wrote it gets its original bytes back (or is removed if it did not
    exist); a config edited since keeps those edits and loses only install's changes.
    """
    journal = load_journal(target.state_dir)
    if journal is None:
        return Report((f"nothing to clean up: no journal in {target.state_dir}",), False)
    paths = [f.path for f in journal.files]
    if target.config not in paths and target.runtime == "containerd":
        raise InvalidConfig(f"the journal in {target.state_dir} is about {', '.join(paths)}")
    done = [_undo(record) for record in reversed(journal.files)]
    drop_journal(target.state_dir)
    return Report(tuple(line for line, _ in done), any(changed for _, changed in done))


def diff(plans: list[FilePlan]) -> str:
    """A unified diff from each file's current bytes to what install would write."""
    out: list[str] = []
    for p in plans:
        old = _text(p.current, p.record.path).splitlines(keepends=True)
        new = _text(p.new, p.record.path).splitlines(keepends=True)
        out += difflib.unified_diff(old, new, p.record.path, p.record.path)
    return "".join(line if line.endswith("\n") else line + "\n" for line in out)


def _plan_file(path: str, role: Role, journal: Journal | None, editor: Editor) -> FilePlan:
    current = read_bytes(path)
    record = journal.record(path) if journal else None
    try:
        original = _original(path, role, current, record)
        base = _base(path, role, original, record)
        edit = editor(_text(original if base is None else base, path))
    except InvalidConfig as err:
        raise err.with_path(path) from err
    new = edit.text.encode()
    file = FileRecord(path, role, original, digest(new), edit.changes, base)
    return FilePlan(file, current, new)


def _base(path: str, role: Role, original: bytes | None, record: FileRecord | None) -> bytes | None:
    """What install edits instead of a config that does not exist (None: an empty file).

    A k3s/RKE2 template is based on the config k3s generated; once recorded, the same base is
    used again (k3s may have regenerated its config from install's template since).
    """
    if original is not None or role != "config":
        return None
    if record is not None:
        return record.base
    source = generated_config(path)
    if source is None:
        return None
    generated = read_bytes(source)
    text = None if generated is None else _text(generated, source)
    return template_from_generated(text, path, source).encode()


def _original(
    path: str, role: Role, current: bytes | None, record: FileRecord | None
) -> bytes | None:
    """The user's file without install's changes: what install edits and cleanup restores.

    That is the recorded original while the file is still install's output (or, after a crash,
    still the original); for a config someone edited since, it is their file with install's
    changes taken out - never install's own output.
    """
    if record is None:
        return current
    if role == "drop-in" or digest(current) in (record.written_sha256, digest(record.original)):
        return record.original
    if current is None:
        return None
    return revert_changes(_text(current, path), record.changes).encode()


def _undo(record: FileRecord) -> tuple[str, bool]:
    current = read_bytes(record.path)
    if digest(current) in (record.written_sha256, digest(record.original)):
        target, how = record.original, "restored the original"
    elif record.role == "drop-in":
        target, how = record.original, "edited since install; restored the original anyway"
    elif current is None:
        return f"{record.path}: removed by someone since install; left alone", False
    else:
        text = revert_changes(_text(current, record.path), record.changes)
        target, how = text.encode(), "edited since install; took out only install's changes"
    if target != current:
        _put(record.path, target)
    removed = " (removed it)" if target is None and current is not None else ""
    return f"{record.path}: {how}{removed}", target != current


def _put(path: str, data: bytes | None) -> None:
    if data is None:
        remove(path)
    else:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        write_atomic(path, data)


def _text(data: bytes | None, path: str) -> str:
    if data is None:
        return ""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InvalidConfig(f"not UTF-8 text (byte {err.start})", path) from err


def _describe(p: FilePlan) -> str:
    if p.current is None:
        return "created" + (" from the config k3s/RKE2 generated" if p.record.base else "")
    parts = []
    for c in p.record.changes:
        name = dotted(c.path)
        if c.kind == "table":
            parts.append(f"{'updated' if c.previous else 'added'} [{name}]")
        elif c.kind == "key":
            was = "unset" if c.previous is None else repr(c.previous)
            parts.append(f"set {name} = {c.value!r} (was {was})")
        elif c.kind == "import":
            parts.append(f"added {c.value!r} to imports")
    return "; ".join(parts) or "rewritten"
