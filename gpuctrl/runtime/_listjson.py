"""Decoding a list response one item at a time, as it arrives, so a big list never exists whole.

``json.loads`` of a 5,000-Node list builds every item's dicts at once (about ten times the
JSON's size) before the first one can be stored; reading the body first also holds all of it
twice (as ``bytes``, then as ``str``), in blocks the allocator may keep as a hole in the heap
once freed. `ListParser` instead takes the body chunk by chunk as the network delivers it and
returns the items each chunk completes (decoded with ``json``'s own scanner), so each item can
be stored compactly and its dicts freed before the next, while the server still sends the rest.
`read_list` does the same for a body read whole.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from typing import Any

__all__ = ["ListParser", "read_list"]

_scan = json.JSONDecoder().raw_decode
_WHITESPACE = " \t\n\r"


class _Incomplete(Exception):
    """The buffered text ends before the token being read does: wait for more."""


class ListParser:
    """Incremental reader of one JSON list object (``{"metadata": ..., "items": [...]}``).

    `feed` takes the next chunk of the body and returns the items it completed; `close` says
    the body ended and returns the last ones; `metadata` is the list's ``metadata`` once read
    (the API server writes it before the items). ``"items": null`` (an empty list, as some
    servers write it) yields nothing. Malformed or truncated JSON raises ``ValueError``, at the
    latest from `close`.
    """

    def __init__(self) -> None:
        self.metadata: dict[str, Any] = {}
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._text = ""  # buffered text; everything before _pos is read
        self._pos = 0
        self._state = "start"  # start, first key, key, value, items, item, item end, next, done
        self._key = ""
        self._wanted = 0  # buffered length needed before a value cut short is scanned again

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        """The items completed by ``chunk`` (possibly none)."""
        return self._feed_text(self._utf8.decode(chunk))

    def close(self) -> list[dict[str, Any]]:
        """The body ended: the items not returned yet; raises ``ValueError`` unless the body
        held exactly one whole list."""
        self._wanted = 0
        items = self._feed_text(self._utf8.decode(b"", final=True), final=True)
        if self._state != "done" or self._text[self._pos :].strip(_WHITESPACE):
            raise ValueError("truncated JSON list, or data after it")
        return items

    def _feed_text(self, text: str, *, final: bool = False) -> list[dict[str, Any]]:
        self._text = self._text[self._pos :] + text if self._pos else self._text + text
        self._pos = 0
        items: list[dict[str, Any]] = []
        if len(self._text) < self._wanted:
            return items
        self._wanted = 0
        while self._state != "done":
            started = self._pos
            try:
                self._step(items)
            except _Incomplete:
                self._pos = started
                if final:
                    raise ValueError("truncated or malformed JSON list") from None
                # Scanned again only once twice as much is buffered: a huge item arriving in
                # small chunks is not rescanned once per chunk.
                self._wanted = 2 * (len(self._text) - started)
                break
        return items

    def _step(self, items: list[dict[str, Any]]) -> None:
        """Read one token (or value) in the current state; on `_Incomplete` the caller
        restores the position, so the state only changes once the whole token was read."""
        state = self._state
        if state == "start":
            self._expect("{")
            self._state = "first key"
        elif state == "first key":
            if self._peek() == "}":
                self._pos += 1
                self._state = "done"
            else:
                self._state = "key"
        elif state == "key":
            key = self._value()
            self._expect(":")
            self._key = key
            self._state = "items" if key == "items" else "value"
        elif state == "value":
            value = self._value()
            if self._key == "metadata":
                self.metadata = value
            self._state = "next"
        elif state == "items":
            self._state = self._items_start()
        elif state == "item":
            items.append(self._value())
            self._state = "item end"
        elif state == "item end":
            self._state = "item" if self._either(",", "]") else "next"
        elif state == "next":
            self._state = "key" if self._either(",", "}") else "done"

    def _items_start(self) -> str:
        """Read ``null``, ``[]`` or ``[`` and return the state that follows."""
        pos = self._skip()
        head = self._text[pos : pos + 4]
        if head == "null":
            self._pos += 4
            return "next"
        if "null".startswith(head):
            raise _Incomplete
        self._expect("[")
        if self._peek() == "]":
            self._pos += 1
            return "next"
        return "item"

    def _either(self, more: str, end: str) -> bool:
        """Consume ``more`` (True) or ``end`` (False)."""
        char = self._peek()
        if char not in (more, end):
            raise ValueError(f"expected {more!r} or {end!r} in a JSON list, found {char!r}")
        self._pos += 1
        return char == more

    def _value(self) -> Any:
        pos = self._skip()
        try:
            value, self._pos = _scan(self._text, pos)
        except json.JSONDecodeError:
            raise _Incomplete from None  # or malformed: `close` tells, once nothing can follow
        if self._pos >= len(self._text) and not isinstance(value, dict | list | str):
            raise _Incomplete  # a number or literal at the very end may go on in the next chunk
        return value

    def _expect(self, char: str) -> None:
        found = self._peek()
        if found != char:
            raise ValueError(f"expected {char!r} in a JSON list, found {found!r}")
        self._pos += 1

    def _peek(self) -> str:
        return self._text[self._skip()]

    def _skip(self) -> int:
        """Move past whitespace; raise `_Incomplete` at the end of the buffered text."""
        text, pos = self._text, self._pos
        while pos < len(text) and text[pos] in _WHITESPACE:
            pos += 1
        self._pos = pos
        if pos >= len(text):
            raise _Incomplete
        return pos


def read_list(text: str) -> tuple[dict[str, Any], Iterator[dict[str, Any]]]:
    """The ``metadata`` of a JSON list object read whole, and an iterator over its items.
    Raises ``ValueError`` on malformed JSON."""
    parser = ListParser()
    items = parser._feed_text(text)
    items += parser.close()
    return parser.metadata, iter(items)
