"""Reading containerd documents strictly, and line edits on them.

Every document gpuctrl writes is first read back by ``tomllib`` (TOML 1.0, like containerd's
parser; tomlkit also accepts TOML 1.1) and compared with the data it meant to write.
"""

from __future__ import annotations

import copy
import json
import re
import tomllib
from typing import Any

from gpuctrl.toolkit._errors import InvalidConfig, ToolkitError
from gpuctrl.toolkit._layout import Header, Layout, Path, format_key

__all__ = [
    "MISSING",
    "delete_in",
    "dotted",
    "get_in",
    "header_line",
    "insert_lines",
    "key_line",
    "load",
    "pruned",
    "quote_of",
    "raw_path",
    "remove_tables",
    "replace_value",
    "set_in",
    "string",
    "value",
    "verify",
]

MISSING: Any = object()


def load(text: str) -> dict[str, Any]:
    """Parse ``text`` as TOML 1.0, or raise :class:`InvalidConfig` saying where it is wrong.

    Bytes that are not UTF-8 (decoded with ``surrogateescape``) pass in comments and strings,
    as containerd 1.x accepts them.
    """
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise InvalidConfig(f"not valid TOML 1.0: {err}") from err


def verify(text: str, expected: dict[str, Any], *, ignore_empty: bool = False) -> str:
    """Return ``text`` if it parses to ``expected``; otherwise refuse to write it."""
    try:
        actual = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ToolkitError(f"refusing to write a document that is not TOML 1.0: {err}") from err
    if ignore_empty:
        actual, expected = pruned(actual), pruned(expected)
    if actual != expected:
        raise ToolkitError("refusing to write: the edited document does not mean what was intended")
    return text


def pruned(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` without tables that are empty or hold only empty tables."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            value = pruned(value)
            if not value:
                continue
        out[key] = value
    return out


def get_in(data: dict[str, Any], path: Path) -> Any:
    """The value at ``path``, or :data:`MISSING`."""
    node: Any = data
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return MISSING
        node = node[key]
    return node


def set_in(data: dict[str, Any], path: Path, value: Any) -> None:
    """Set ``path`` to a deep copy of ``value``, creating tables on the way."""
    node = data
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = copy.deepcopy(value)


def delete_in(data: dict[str, Any], path: Path) -> None:
    """Delete ``path`` if it is there."""
    parent = get_in(data, path[:-1])
    if isinstance(parent, dict):
        parent.pop(path[-1], None)


def string(value: str, quote: str = '"') -> str:
    """``value`` as a TOML string in the style of ``quote`` (one of the four quotes, as
    :func:`quote_of` gives it): literal where the value allows it, else basic."""
    literal = quote.startswith("'") and "'" not in value and value.isprintable()
    if literal:
        return f"{quote}{value}{quote}"
    basic = json.dumps(value, ensure_ascii=False)
    return f'""{basic}""' if quote == '"""' else basic


def quote_of(spelled: str) -> str:
    """The quote a TOML string value is spelled with (the multi-line ones included)."""
    return spelled[:3] if spelled[:3] in ("'''", '"""') else spelled[:1]


def dotted(path: Path) -> str:
    """``path`` spelled as a TOML dotted key, for messages."""
    return ".".join(format_key(key) for key in path)


def insert_lines(lines: list[str], at: int, new: list[str], newline: str) -> None:
    """Insert ``new`` before ``lines[at]``; at the end of a file without a final line ending,
    the inserted text ends without one instead."""
    if at > 0 and not lines[at - 1].endswith("\n"):
        lines[at - 1] += newline
        if at == len(lines) and new:
            new = [*new[:-1], new[-1].rstrip("\r\n")]
    lines[at:at] = new


def remove_tables(lines: list[str], layout: Layout, path: Path) -> tuple[int, str] | None:
    """Delete the blocks of ``path`` and of the tables below it, with the blank line before each.

    Returns where the first block was and the text of the deleted blocks (without the blank
    line before the first), or None if there were none.
    """
    headers = layout.within(path)
    if not headers:
        return None
    removed: list[str] = []
    start = 0
    for header in reversed(headers):
        start, end = header.line, layout.block_end(header)
        if start > 0 and not lines[start - 1].strip():
            start -= 1
        block = "".join(lines[start:end])
        removed.insert(0, block if block.endswith("\n") else block + layout.newline)
        unended = end == len(lines) and not lines[-1].endswith("\n")
        del lines[start:end]
        if unended and start == len(lines) and lines:
            lines[-1] = lines[-1].rstrip("\r\n")
    first = removed[0].splitlines(keepends=True)
    removed[0] = "".join(first[1:] if not first[0].strip() else first)
    return start, "".join(removed)


def key_line(layout: Layout, owner: Header | None, key: str) -> tuple[int, re.Match[str]] | None:
    """Find ``key = <string, integer or boolean>`` in ``owner``'s block (the top level when
    None)."""
    pattern = re.compile(
        r"(?P<indent>[ \t]*)(?:%s|\"%s\"|'%s')(?P<eq>[ \t]*=[ \t]*)"
        r"(?P<value>'''[^\n]*?'''|\"\"\"(?:[^\\\n]|\\.)*?\"\"\"|\"(?:[^\"\\]|\\.)*\"|'[^']*'"
        r"|[+-]?[0-9_]+|true|false)(?P<rest>.*?)(?P<eol>\r?\n?)$" % ((re.escape(key),) * 3)
    )
    rows = layout.body(owner) if owner else layout.top_level()
    for index in rows:
        match = pattern.fullmatch(layout.lines[index])
        if match:
            return index, match
    return None


def respelled(match: re.Match[str], data: Any) -> str:
    """The line of a :func:`key_line` match with its value set to ``data``, a string keeping the
    quote the line spells it with."""
    return replace_value(match, value(data, quote_of(match["value"])))


def replace_value(match: re.Match[str], value: str) -> str:
    """The line of a :func:`key_line` match with its value spelled ``value`` instead."""
    return match.string[: match.start("value")] + value + match.string[match.end("value") :]


def header_line(indent: str, raw: tuple[str, ...], newline: str, array: bool = False) -> str:
    """A ``[table]`` header line (``[[array]]`` when ``array``)."""
    spelled = ".".join(raw)
    return f"{indent}[[{spelled}]]{newline}" if array else f"{indent}[{spelled}]{newline}"


def value(data: Any, quote: str = '"') -> str:
    """A scalar or an array of scalars spelled as TOML (strings as :func:`string` does)."""
    if isinstance(data, str):
        return string(data, quote)
    if isinstance(data, bool):
        return "true" if data else "false"
    if isinstance(data, int | float):
        return repr(data)
    if isinstance(data, list):
        return "[" + ", ".join(value(item, quote) for item in data) + "]"
    raise ToolkitError(f"cannot spell {data!r} as a TOML value")


def raw_path(layout: Layout, path: Path) -> tuple[str, ...]:
    """``path`` spelled like the file's existing header that shares most of it."""
    prefixes = [h for h in layout.headers if not h.array and h.path == path[: len(h.path)]]
    best = max(prefixes, key=lambda h: len(h.path), default=None)
    done = best.raw if best else ()
    return done + tuple(format_key(k, layout.quote()) for k in path[len(done) :])
