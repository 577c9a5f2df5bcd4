"""Taking install's changes back out of a containerd config that someone edited since.

Only what the :class:`Change` records name is touched: runtime tables install added (or the
lines they replaced come back), keys it set (restored only while they still hold install's
value), the header it created, the ``imports`` entry. The result is checked with a strict
TOML 1.0 parser against the data it must mean.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from gpuctrl.toolkit import _toml as t
from gpuctrl.toolkit._imports import remove_import
from gpuctrl.toolkit._layout import Layout, Path, parse_layout
from gpuctrl.toolkit._settings import Change

__all__ = ["revert_changes"]


def revert_changes(text: str, changes: Sequence[Change]) -> str:
    """Take ``changes`` (made by :func:`add_runtimes` or the imports edit) back out of ``text``.

    Keeps everything else, also edits made after install; a key is restored only if it still
    holds the value install set. Raises :class:`InvalidConfig` if ``text`` is not TOML 1.0.
    """
    data = t.load(text)
    expected = copy.deepcopy(data)
    lines = list(text.splitlines(keepends=True))
    for change in reversed(changes):
        layout = parse_layout("".join(lines))
        if change.kind == "table":
            _revert_table(lines, layout, change, expected)
        elif change.kind == "key":
            _revert_key(lines, layout, change, data, expected)
        elif change.kind == "header":
            _revert_header(lines, layout, change.path)
        else:
            remove_import(lines, layout, change, expected)
    return t.verify("".join(lines), expected, ignore_empty=True)


def _revert_table(
    lines: list[str], layout: Layout, change: Change, expected: dict[str, Any]
) -> None:
    removed = t.remove_tables(lines, layout, change.path)
    t.delete_in(expected, change.path)
    if isinstance(change.previous, str):
        at = removed[0] if removed else layout.end_of_first([change.path[:-1]])
        sep = [layout.newline] if at > 0 and layout.blank_between_tables() else []
        block = change.previous.splitlines(keepends=True)
        t.insert_lines(lines, at, [*sep, *block], layout.newline)
        previous = t.get_in(t.load(change.previous), change.path)
        t.set_in(expected, change.path, previous)


def _revert_key(
    lines: list[str],
    layout: Layout,
    change: Change,
    data: dict[str, Any],
    expected: dict[str, Any],
) -> None:
    if t.get_in(data, change.path) != change.value:
        return  # someone changed it since: theirs stays
    owner = layout.header(change.path[:-1]) if len(change.path) > 1 else None
    found = t.key_line(layout, owner, change.path[-1])
    if found is None:
        return
    index, match = found
    if change.previous is None:
        del lines[index]
        t.delete_in(expected, change.path)
    else:
        lines[index] = t.respelled(match, change.previous)
        t.set_in(expected, change.path, change.previous)


def _revert_header(lines: list[str], layout: Layout, path: Path) -> None:
    """Delete the header install wrote for ``path`` if its block is empty, and one blank line."""
    header = layout.header(path)
    if header is None or any(layout.lines[i].strip() for i in layout.body(header)):
        return
    i = header.line
    del lines[i]
    if not layout.blank_between_tables():
        return
    if i < len(lines) and not lines[i].strip():
        del lines[i]  # install put the blank line after the header it added ...
    elif i == len(lines) and i > 0 and not lines[i - 1].strip():
        del lines[i - 1]  # ... or before it, at the end of the file
