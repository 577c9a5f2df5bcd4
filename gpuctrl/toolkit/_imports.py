"""Line edits of a containerd config's top-level ``imports`` array (drop-in mode)."""

from __future__ import annotations

import fnmatch
import posixpath
import re
from typing import Any

from gpuctrl.toolkit import _toml as t
from gpuctrl.toolkit._errors import InvalidConfig
from gpuctrl.toolkit._layout import Layout, value_quote
from gpuctrl.toolkit._settings import Change

__all__ = ["add_import", "covers", "remove_import"]

_LINE = re.compile(
    r"(?P<head>[ \t]*imports[ \t]*=[ \t]*\[)(?P<items>.*)(?P<tail>\][ \t]*(#.*)?\r?\n?)"
)


def covers(imports: list[str], config_path: str, drop_in: str) -> bool:
    """Whether one of the ``imports`` globs (relative to the config's folder) names ``drop_in``."""
    base = posixpath.dirname(config_path)
    return any(
        fnmatch.fnmatchcase(drop_in, posixpath.normpath(posixpath.join(base, pattern)))
        for pattern in imports
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
