"""install, cleanup and plan: the I/O shell around the pure edits.

Order of install: compute every new file (refusing bad input before anything is written),
write the journal, write the drop-in, write the main config, restart the runtime. Cleanup walks
the journal backwards and removes the journal last, so a crash at any step leaves each file
either as it was or completely rewritten, and running the same command again finishes the job.
A missing k3s/RKE2 template is created from the config k3s generated (see ``_template``), and
cleanup removes it again.
"""

from __future__ import annotations

import contextlib
import difflib
import fnmatch
import glob
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuctrl.toolkit import _toml as t
from gpuctrl.toolkit._containerd import CRI, GO_TEMPLATE, add_runtimes, load_config
from gpuctrl.toolkit._dropin import check_later, containerd_drop_in, crio_drop_in, import_drop_in
from gpuctrl.toolkit._errors import InvalidConfig, ToolkitError
from gpuctrl.toolkit._fs import locked, read_bytes, remove, remove_stale, resolve, write_atomic
from gpuctrl.toolkit._imports import Source, load_order, relative_globs
from gpuctrl.toolkit._journal import (
    FileRecord,
    Journal,
    Role,
    digest,
    drop_journal,
    journal_path,
    load_journal,
    save_journal,
)
from gpuctrl.toolkit._revert import revert_changes
from gpuctrl.toolkit._settings import Edit, RuntimeKind, Settings
from gpuctrl.toolkit._template import TEMPLATES, generated_config, template_from_generated
from gpuctrl.toolkit._toml import dotted

__all__ = ["FilePlan", "Report", "Target", "cleanup", "diff", "install", "plan"]

Editor = Callable[[str], Edit]
_BOM = "\ufeff"  # kept as it was: containerd 1.x reads a file that starts with one


@dataclass(frozen=True)
class Target:
    """Which runtime's files install manages, and where its journal lives."""

    runtime: RuntimeKind
    config: str
    state_dir: str
    drop_in: str | None = None  # containerd: None edits the config itself; CRI-O: required
    # Where the paths above have the host's root: the drop-in path the config imports is the
    # host's, so a config edited from a container with the host mounted at /host stays valid;
    # symbolic links are followed as the host follows them.
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
    real: str  # the file this process opens: record.path with its symbolic links followed
    mode: int | None = None  # the mode it must have; None: keep its own (0644 when new)
    notes: tuple[str, ...] = ()


def plan(target: Target, settings: Settings) -> list[FilePlan]:
    """What install would write, file by file (in writing order), reading but changing nothing.

    Raises :class:`InvalidConfig` naming the file for input it cannot edit safely.
    """
    state = _real(target, target.state_dir)
    with locked(state):
        return _plans(target, settings, load_journal(state))


def install(target: Target, settings: Settings) -> Report:
    """Apply :func:`plan` under the state folder's lock: journal first, then each file
    atomically. Returns what was done; idempotent, and run again it re-derives the drop-in
    from the current files."""
    state = _real(target, target.state_dir)
    with locked(state):
        recorded = load_journal(state)
        plans = _plans(target, settings, recorded)
        remove_stale(journal_path(state))
        for p in plans:
            remove_stale(p.real)
        changed = [p for p in plans if p.new != p.current or p.mode not in (None, _mode(p.real))]
        journal = Journal(target.runtime, tuple(p.record for p in plans))
        if journal != recorded:
            save_journal(state, journal)
        for p in changed:
            _put(p.real, p.new, p.mode)
    notes = tuple(note for p in plans for note in p.notes)
    if not changed:
        return Report((*(f"{p.record.path}: already configured" for p in plans), *notes), False)
    return Report((*(f"{p.record.path}: {_describe(p)}" for p in changed), *notes), True)


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
        return [_plan_file(target, target.drop_in, "drop-in", journal, lambda _: Edit(text))]
    config = _on_host(target, target.config)
    if target.drop_in is None:
        editor: Editor = lambda text: add_runtimes(text, settings)  # noqa: E731
        main = _plan_file(target, target.config, "config", journal, editor)
        data, version = load_config(_text(main.new))
        order = _load_order(target, Source(config, data), None)
        if version != 1:
            check_later(version, order[1:], config, settings, in_place=True)
        return [main]
    drop_in = _on_host(target, target.drop_in)
    main = _plan_file(
        target,
        target.config,
        "config",
        journal,
        lambda text: import_drop_in(text, config, drop_in),
    )
    data, version = load_config(_text(main.new))
    order = _load_order(target, Source(config, data), drop_in)
    at = next((i for i, s in enumerate(order) if s.path == drop_in), None)
    if at is None:
        raise ToolkitError(f"containerd would not load {drop_in} from {config}'s imports")
    before, after = order[:at], order[at + 1 :]
    if version == 2:
        _check_relative_globs(order, drop_in)
    edit = containerd_drop_in(version, before, after, drop_in, settings)
    mode = _most_restrictive([_real(target, _in_root(target, s.path)) for s in before])
    drop = _plan_file(target, target.drop_in, "drop-in", journal, lambda _: edit, mode)
    return [drop, main]


def _load_order(target: Target, main: Source, drop_in: str | None) -> list[Source]:
    """The files containerd loads for ``main``; ``drop_in`` (if any) as a placeholder, since
    install is about to (re)write it."""

    def load(path: str) -> dict[str, Any] | None:
        if path == drop_in:
            return {}
        real = _real(target, _in_root(target, path))
        data = read_bytes(real)
        if data is None or os.path.isdir(real):
            return None
        try:
            return t.load(_text(data))
        except InvalidConfig as err:
            raise err.with_path(real) from err

    def expand(pattern: str) -> list[str]:
        found = [_on_host(target, p) for p in glob.glob(_in_root(target, pattern))]
        if drop_in is not None and _matches(pattern, drop_in):
            found.append(drop_in)
        return sorted(set(found))

    return load_order(main, load, expand)


def _check_relative_globs(order: list[Source], drop_in: str) -> None:
    """Refuse a relative glob that loads a CRI table: containerd 1.6 expands it against its
    working directory and 1.7 against the config's folder, so no drop-in fits both."""
    for source in order:
        for pattern in relative_globs(source):
            for other in order:
                cri = t.get_in(other.data, ("plugins", CRI[2]))
                if (
                    other.path != drop_in
                    and isinstance(cri, dict)
                    and _matches(pattern, other.path)
                ):
                    raise InvalidConfig(
                        f"{source.path} imports {other.path} through a relative glob, which"
                        " containerd 1.6 expands against its working directory and 1.7 against"
                        " the config's folder: write the glob as an absolute path"
                    )


def _matches(pattern: str, path: str) -> bool:
    return fnmatch.fnmatchcase(path, pattern) and pattern.count("/") == path.count("/")


def _on_host(target: Target, path: str) -> str:
    """``path`` (under ``target.host_root``) as the host names it."""
    if os.path.abspath(target.host_root) == "/":
        return path
    return os.path.join("/", os.path.relpath(path, target.host_root))


def _in_root(target: Target, path: str) -> str:
    """Host path ``path`` as this process names it."""
    return os.path.join(target.host_root, path.lstrip("/"))


def _real(target: Target, path: str) -> str:
    return resolve(target.host_root, path)


def _mode(path: str) -> int | None:
    try:
        return os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        return None


def _most_restrictive(paths: list[str]) -> int:
    """The permissions every one of ``paths`` grants (0644 for none): a drop-in that copies
    their settings (registry credentials) must not be readable by more users than they are."""
    mode = 0o644
    for path in paths:
        found = _mode(path)
        mode &= found if found is not None else 0o644
    return mode


def cleanup(target: Target) -> Report:
    """Undo install as the journal records it, then remove the journal (all under the state
    folder's lock). Returns what was done.

    A file still as install wrote it gets its original bytes back (or is removed if it did not
    exist, with the folders install created for it when they are empty); a config edited since
    keeps those edits and loses only install's changes.
    """
    state = _real(target, target.state_dir)
    with locked(state):
        journal = load_journal(state)
        if journal is None:
            return Report((f"nothing to clean up: no journal in {target.state_dir}",), False)
        paths = [f.path for f in journal.files]
        if target.config not in paths and target.runtime == "containerd":
            raise InvalidConfig(f"the journal in {target.state_dir} is about {', '.join(paths)}")
        remove_stale(journal_path(state))
        done = [_undo(target, record) for record in reversed(journal.files)]
        drop_journal(state)
    return Report(tuple(line for line, _ in done), any(changed for _, changed in done))


def diff(plans: list[FilePlan]) -> str:
    """A unified diff from each file's current bytes to what install would write."""
    out: list[str] = []
    for p in plans:
        old = _text(p.current).splitlines(keepends=True)
        new = _text(p.new).splitlines(keepends=True)
        out += difflib.unified_diff(old, new, p.record.path, p.record.path)
    text = "".join(line if line.endswith("\n") else line + "\n" for line in out)
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _plan_file(
    target: Target,
    path: str,
    role: Role,
    journal: Journal | None,
    editor: Editor,
    mode: int | None = None,
) -> FilePlan:
    real = _real(target, path)
    current = read_bytes(real)
    record = journal.record(path) if journal else None
    try:
        original = _original(role, current, record)
        base, generated = _base(target, path, role, original, record)
        source = original if base is None else base
        text = _text(source)
        if role == "config" and os.path.basename(path) in TEMPLATES and "{{" in text:
            raise InvalidConfig(GO_TEMPLATE)
        edit = editor(text)
    except InvalidConfig as err:
        raise err.with_path(path) from err
    new = _bytes(edit.text, source)
    if generated is not None and current is None:
        mode = _mode(generated)  # a template k3s's config is copied into: no wider than it
    folders = record.folders if record else _missing_folders(os.path.dirname(real))
    file = FileRecord(path, role, original, digest(new), edit.changes, base, folders)
    return FilePlan(file, current, new, real, mode, edit.notes)


def _missing_folders(folder: str) -> tuple[str, ...]:
    """``folder`` and those above it that do not exist, outermost first."""
    missing: list[str] = []
    while folder and not os.path.exists(folder) and folder != os.path.dirname(folder):
        missing.insert(0, folder)
        folder = os.path.dirname(folder)
    return tuple(missing)


def _base(
    target: Target, path: str, role: Role, original: bytes | None, record: FileRecord | None
) -> tuple[bytes | None, str | None]:
    """What install edits instead of a config that does not exist (None: an empty file), and
    the file it came from.

    A k3s/RKE2 template is based on the config k3s generated; once recorded, the same base is
    used again (k3s may have regenerated its config from install's template since).
    """
    if original is not None or role != "config":
        return None, None
    source = generated_config(path)
    if record is not None:
        return record.base, source and _real(target, source)
    if source is None:
        return None, None
    real = _real(target, source)
    generated = read_bytes(real)
    text = None if generated is None else _text(generated)
    base = template_from_generated(text, path, source)
    return _bytes(base, generated), real


def _original(role: Role, current: bytes | None, record: FileRecord | None) -> bytes | None:
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
    return _bytes(revert_changes(_text(current), record.changes), current)


def _undo(target: Target, record: FileRecord) -> tuple[str, bool]:
    real = _real(target, record.path)
    remove_stale(real)
    current = read_bytes(real)
    if digest(current) in (record.written_sha256, digest(record.original)):
        wanted, how = record.original, "restored the original"
    elif record.role == "drop-in":
        wanted, how = record.original, "edited since install; restored the original anyway"
    elif current is None:
        return f"{record.path}: removed by someone since install; left alone", False
    else:
        try:
            text = revert_changes(_text(current), record.changes)
        except InvalidConfig as err:
            raise err.with_path(record.path) from err
        wanted, how = _bytes(text, current), "edited since install; took out only install's changes"
    if wanted != current:
        _put(real, wanted)
    for folder in reversed(record.folders):
        with contextlib.suppress(OSError):
            os.rmdir(folder)  # only when empty
    removed = " (removed it)" if wanted is None and current is not None else ""
    return f"{record.path}: {how}{removed}", wanted != current


def _put(path: str, data: bytes | None, mode: int | None = None) -> None:
    if data is None:
        remove(path)
        return
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as err:
        raise ToolkitError(f"{folder}: cannot create the folder: {err.strerror}") from err
    write_atomic(path, data, mode)


def _text(data: bytes | None) -> str:
    """A file's text as the edits see it: no BOM, bytes that are not UTF-8 kept as surrogates."""
    text = "" if data is None else data.decode("utf-8", "surrogateescape")
    return text.removeprefix(_BOM)


def _bytes(text: str, like: bytes | None) -> bytes:
    """``text`` as bytes again, with the BOM that ``like`` (the file it came from) started with."""
    bom = _BOM if like is not None and like.startswith(_BOM.encode()) else ""
    return (bom + text).encode("utf-8", "surrogateescape")


def _describe(p: FilePlan) -> str:
    if p.current is None:
        return "created" + (" from the config k3s/RKE2 generated" if p.record.base else "")
    parts = []
    for c in p.record.changes:
        name = dotted(c.path)
        if c.kind == "table":
            parts.append(f"{'updated' if c.previous else 'added'} [{name}]")
        elif c.kind == "key":
            now = t.value(c.value, "'")
            was = "unset" if c.previous is None else t.value(c.previous, "'")
            parts.append(f"set {name} = {now} (was {was})")
        elif c.kind == "import":
            parts.append(f"added {c.value!r} to imports")
    return "; ".join(parts) or "rewritten"
