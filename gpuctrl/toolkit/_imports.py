"""containerd's ``imports``: which files it loads, in which order, and line edits of the
top-level ``imports`` array (drop-in mode).

containerd loads the main file, then each import in the order listed (a glob, any entry with
a ``*``, expands to its matches sorted), then their imports, each file once. A relative path
is taken relative to the importing file; a relative glob too from containerd 1.7 on, but 1.6
expands it against its own working directory - so a relative glob never counts as loading
gpuctrl's drop-in.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuctrl.toolkit import _toml as t
from gpuctrl.toolkit._errors import InvalidConfig
from gpuctrl.toolkit._layout import Layout, value_quote
from gpuctrl.toolkit._settings import Change

__all__ = ["Source", "add_import", "covers", "load_order", "relative_globs", "remove_import"]

_LINE = re.compile(
    r"(?P<head>[ \t]*imports[ \t]*=[ \t]*\[)(?P<items>.*)(?P<tail>\][ \t]*(#.*)?\r?\n?)"
)


@dataclass(frozen=True)
class Source:
    """A config file containerd loads, as the host names it, and its parsed data."""

    path: str
    data: dict[str, Any]


def covers(imports: list[str], config_path: str, drop_in: str) -> bool:
    """Whether every containerd loads ``drop_in`` through one of the ``imports`` of the config
    at ``config_path``: an absolute glob or a path naming it (a relative glob does not count)."""
    for entry in imports:
        pattern, glob = _resolved(entry, config_path)
        if glob and posixpath.isabs(entry) and _matches(pattern, drop_in):
            return True
        if not glob and pattern == drop_in:
            return True
    return False


def load_order(
    main: Source,
    load: Callable[[str], dict[str, Any] | None],
    expand: Callable[[str], list[str]],
) -> list[Source]:
    """Every file containerd loads for ``main``, in its order: ``load`` parses a host path
    (None: no such file), ``expand`` lists a glob's matches (host paths)."""
    order, seen = [main], {main.path}
    pending = _imported(main, expand)
    while pending:
        path = pending.pop(0)
        if path in seen:
            continue
        seen.add(path)
        data = load(path)
        if data is None:
            continue
        source = Source(path, data)
        order.append(source)
        pending += _imported(source, expand)
    return order


def _imported(source: Source, expand: Callable[[str], list[str]]) -> list[str]:
    imports = source.data.get("imports", [])
    if not isinstance(imports, list):
        return []
    out: list[str] = []
    for entry in imports:
        if isinstance(entry, str):
            pattern, glob = _resolved(entry, source.path)
            out += sorted(expand(pattern)) if glob else [pattern]
    return out


def relative_globs(source: Source) -> list[str]:
    """The relative globs of ``source``'s imports, resolved as containerd 1.7+ does (1.6
    expands them against its working directory instead)."""
    imports = source.data.get("imports", [])
    entries = [i for i in imports if isinstance(i, str)] if isinstance(imports, list) else []
    return [_resolved(e, source.path)[0] for e in entries if "*" in e and not posixpath.isabs(e)]


def _resolved(entry: str, importer: str) -> tuple[str, bool]:
    """An ``imports`` entry as a host path (or glob) relative to the importing file."""
    path = posixpath.join(posixpath.dirname(importer), entry)
    return posixpath.normpath(path), "*" in entry


def _matches(pattern: str, path: str) -> bool:
    """Whether ``path`` matches the glob ``pattern`` (``*`` never crosses a ``/``)."""
    parts, names = pattern.split("/"), path.split("/")
    return len(parts) == len(names) and all(
        fnmatch.fnmatchcase(name, part) for part, name in zip(parts, names, strict=True)
    )


def add_import(lines: list[str], layout: Layout, data: dict[str, Any], entry: str) -> Change:
    """Append ``entry`` to ``imports`` (a one-line array), or add the key after ``version``."""
    if "imports" not in data:
        found = t.key_line(layout, None, "version")
        at = found[0] + 1 if found else _end_of_top_level(layout)
        row = f"imports = [{t.string(entry, value_quote(layout.lines))}]{layout.newline}"
        t.insert_lines(lines, at, [row], layout.newline)
        return Change("import", ("imports",), None, entry)
    index, match = _imports_line(layout)
    items = match["items"].rstrip()
    quote = items.strip()[:1] if items.strip()[:1] in ("'", '"') else value_quote(layout.lines)
    items = f"{items.rstrip(',')}, " if items.strip() else ""
    lines[index] = f"{match['head']}{items}{t.string(entry, quote)}{match['tail']}"
    return Change("import", ("imports",), "", entry)


def remove_import(
    lines: list[str], layout: Layout, change: Change, expected: dict[str, Any]
) -> None:
    """Take the ``imports`` entry of ``change`` back out (the key too if install created it)."""
    imports = expected.get("imports")
    if not isinstance(imports, list) or change.value not in imports:
        return
    index, match = _imports_line(layout)
    items = match["items"]
    entries = {t.string(str(change.value), quote) for quote in "'\""}
    for spelled in [f"{a}{e}{b}" for e in entries for a, b in ((", ", ""), ("", ", "), ("", ""))]:
        if spelled in items:
            items = items.replace(spelled, "", 1)
            break
    imports.remove(change.value)
    if change.previous is None and not imports:
        del lines[index]
        del expected["imports"]
    else:
        lines[index] = f"{match['head']}{items}{match['tail']}"


def _imports_line(layout: Layout) -> tuple[int, re.Match[str]]:
    for index in layout.top_level():
        match = _LINE.fullmatch(layout.lines[index])
        if match:
            return index, match
    starts = [i for i in layout.top_level() if re.match(r"\s*imports\s*=", layout.lines[i])]
    where = f"line {starts[0] + 1}: " if starts else ""
    raise InvalidConfig(f"{where}key imports: gpuctrl edits it only when it is on one line")


def _end_of_top_level(layout: Layout) -> int:
    rows = [i for i in layout.top_level() if layout.lines[i].strip()]
    return rows[-1] + 1 if rows else 0
