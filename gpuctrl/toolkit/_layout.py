"""A line-level view of a TOML document: where each table header sits and how it is spelled.

tomlkit keeps a file's bytes through parse and dump, but lays out what it inserts in its own way
(no indentation, no blank lines, misplaced tables in out-of-order or dotted layouts). gpuctrl
therefore edits a configuration by inserting and deleting whole lines at the places found here,
spelled like their neighbours, and checks every result with a strict TOML 1.0 parser.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass

from gpuctrl.toolkit._errors import InvalidConfig

__all__ = ["Header", "Layout", "format_key", "parse_layout", "value_quote"]

Path = tuple[str, ...]

_BARE = re.compile(r"[A-Za-z0-9_-]+")
_BASIC = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_LITERAL = re.compile(r"'[^'\n]*'")


@dataclass(frozen=True)
class Header:
    """A ``[table]`` or ``[[array]]`` header line."""

    path: Path  # the decoded keys
    raw: tuple[str, ...]  # each key as written, quotes kept
    line: int  # index into Layout.lines
    indent: str
    array: bool


@dataclass(frozen=True)
class Layout:
    """The lines of a document (each with its line ending) and its table headers, in order."""

    lines: tuple[str, ...]
    headers: tuple[Header, ...]
    newline: str  # "\r\n" when the file uses CRLF, else "\n"

    def block_end(self, header: Header) -> int:
        """The index just past the last line of ``header``'s own block: its last non-blank
        line, less trailing comments that belong to what follows (comments set off from the
        block's last key by a blank line, or written right above the next header)."""
        following = [h.line for h in self.headers if h.line > header.line]
        end = following[0] if following else len(self.lines)
        while end > header.line + 1 and not self.lines[end - 1].strip():
            end -= 1
        keys = end
        while keys > header.line + 1 and (
            not self.lines[keys - 1].strip() or self.lines[keys - 1].lstrip().startswith("#")
        ):
            keys -= 1
        if keys == end:
            return end
        above_next = bool(following) and end == following[0]
        return keys if above_next or not self.lines[keys].strip() else end

    def within(self, path: Path) -> list[Header]:
        """The headers of ``path`` and of every table below it, in file order."""
        return [h for h in self.headers if h.path[: len(path)] == path]

    def header(self, path: Path) -> Header | None:
        """The header that defines ``path``, if the file has one."""
        return next((h for h in self.headers if h.path == path and not h.array), None)

    def body(self, header: Header) -> range:
        """The line indexes of ``header``'s block after the header, up to its last non-blank."""
        return range(header.line + 1, self.block_end(header))

    def top_level(self) -> range:
        """The line indexes before the first header."""
        return range(self.headers[0].line if self.headers else len(self.lines))

    def blank_between_tables(self) -> bool:
        """Whether the file puts a blank line before its table headers (most of them)."""
        later = [h for h in self.headers if h.line > 0]
        blank = sum(1 for h in later if not self.lines[h.line - 1].strip())
        return not later or blank * 2 >= len(later)

    def step(self) -> str:
        """The indentation step: two spaces if the file indents its tables, else none."""
        return "  " if any(h.indent for h in self.headers) else ""

    def key_indent(self, header: Header) -> str:
        """How ``header``'s keys are indented (a step more than the header if it has none)."""
        for i in self.body(header):
            row = self.lines[i]
            if row.strip() and not row.lstrip().startswith("#"):
                return row[: len(row) - len(row.lstrip())]
        return header.indent + self.step()

    def child_indent(self, parent: Header | None, path: Path) -> str:
        """Indentation for a new table below ``parent`` (else below the nearest table that
        ``path`` lies in)."""
        for depth in range(len(path), 0, -1):
            parent = parent or self.header(path[:depth])
        return parent.indent + self.step() if parent else ""

    def end_of_first(self, paths: list[Path]) -> int:
        """Just past the last block below the first of ``paths`` that has any, else the end."""
        for path in paths:
            headers = self.within(path)
            if headers:
                return self.block_end(max(headers, key=lambda h: h.line))
        return len(self.lines)

    def quote(self) -> str:
        """The quote character the file uses in table headers (``'`` for containerd 2.x files)."""
        for h in self.headers:
            for raw in h.raw:
                if raw[0] in "'\"":
                    return raw[0]
        return '"'


def value_quote(lines: tuple[str, ...] | list[str]) -> str:
    """The quote character most string values in ``lines`` use (``"`` when tied)."""
    single = sum(1 for line in lines if re.search(r"=\s*'", line))
    double = sum(1 for line in lines if re.search(r'=\s*"', line))
    return "'" if single > double else '"'


def format_key(key: str, quote: str = '"') -> str:
    """``key`` spelled as a TOML key: bare when it can be, else quoted with ``quote``."""
    if _BARE.fullmatch(key):
        return key
    if quote == "'" and "'" not in key and key.isprintable():
        return f"'{key}'"
    escaped = key.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def parse_layout(text: str) -> Layout:
    """Find the table headers of ``text``, a document that ``tomllib`` already accepted.

    Raises :class:`InvalidConfig` for a header line it cannot read.
    """
    lines = tuple(text.splitlines(keepends=True))
    newline = "\r\n" if text.count("\r\n") * 2 > text.count("\n") else "\n"
    headers = [_header(lines[i], i) for i in _header_lines(lines)]
    return Layout(lines, tuple(headers), newline)


def _header_lines(lines: tuple[str, ...]) -> Iterator[int]:
    """Indexes of lines that start a header: outside multi-line strings and arrays."""
    closer: str | None = None  # the delimiter that ends the multi-line string we are in
    depth = 0  # open brackets of a multi-line array
    for index, line in enumerate(lines):
        if closer is None and depth == 0 and line.lstrip().startswith("["):
            yield index
            continue
        closer, depth = _scan_value_line(line, closer, depth)


def _scan_value_line(line: str, closer: str | None, depth: int) -> tuple[str | None, int]:
    """Carry the multi-line string / array state across one non-header line."""
    i = 0
    while i < len(line):
        if closer is not None:
            end = line.find(closer, i)
            if end < 0:
                return closer, depth
            if closer == '"""':
                while end >= 0 and _escaped(line, end):
                    end = line.find(closer, end + 1)
                if end < 0:
                    return closer, depth
            i, closer = end + 3, None
            continue
        char = line[i]
        if char == "#":
            break
        if line.startswith(('"""', "'''"), i):
            closer, i = line[i : i + 3], i + 3
            continue
        if char in "\"'":
            match = (_BASIC if char == '"' else _LITERAL).match(line, i)
            i = match.end() if match else len(line)
            continue
        if char == "[":
            depth += 1
        elif char == "]":
            depth = max(depth - 1, 0)
        i += 1
    return closer, depth


def _escaped(line: str, pos: int) -> bool:
    backslashes = len(line[:pos]) - len(line[:pos].rstrip("\\"))
    return backslashes % 2 == 1


def _header(line: str, index: int) -> Header:
    stripped = line.lstrip()
    indent = line[: len(line) - len(stripped)]
    array = stripped.startswith("[[")
    pos = 2 if array else 1
    raw: list[str] = []
    while True:
        pos = _skip_space(stripped, pos)
        match = _BARE.match(stripped, pos) or _BASIC.match(stripped, pos)
        match = match or _LITERAL.match(stripped, pos)
        if not match:
            raise InvalidConfig(f"line {index + 1}: cannot read the table header {line.strip()!r}")
        raw.append(match.group())
        pos = _skip_space(stripped, match.end())
        if stripped.startswith(".", pos):
            pos += 1
            continue
        break
    closing = "]]" if array else "]"
    if not stripped.startswith(closing, pos):
        raise InvalidConfig(f"line {index + 1}: cannot read the table header {line.strip()!r}")
    path = tuple(_decode_key(k) for k in raw)
    return Header(path, tuple(raw), index, indent, array)


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t":
        pos += 1
    return pos


def _decode_key(raw: str) -> str:
    if raw[0] in "\"'":
        return str(tomllib.loads(f"k = {raw}")["k"])
    return raw
