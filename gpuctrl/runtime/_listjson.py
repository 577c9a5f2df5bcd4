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
import itertools
import json
import json.scanner
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["ListParser", "read_list"]

_scan = json.JSONDecoder().raw_decode
# (text, index) -> (value, end), raising StopIteration or JSONDecodeError; typeshed's signature
# of make_scanner is wrong (it takes a decoder, whose settings it reads).
_scan_once: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(
    json.JSONDecoder()  # type: ignore[arg-type]
)
_WHITESPACE = " \t\n\r"


class _Incomplete(Exception):
    """The buffered text ends before the token being read does: wait for more."""


class ListParser:
    """Incremental reader of one JSON list object (``{"metadata": ..., "items": [...]}``).

    `feed` takes the next chunk of the body, `close` says the body ended; each returns an
    iterator over the items completed, decoding one per step, so that each item can be dropped
    before the next one is built (then a collection of the young generation finds nothing
    alive to promote): exhaust it before the next call. `metadata` is the list's ``metadata``,
    the same dict filled in once read (the API server writes it before the items). ``"items":
    null`` (an empty list, as some servers write it) yields nothing. Malformed or truncated
    JSON raises ``ValueError``, at the latest at the end of `close`'s iterator.
    """

    def __init__(self) -> None:
        self.metadata: dict[str, Any] = {}
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._text = ""  # buffered text; everything before _pos is read
        self._pos = 0
        self._state = "start"  # start, first key, key, value, items, item, item end, next, done
        self._key = ""
        self._wanted = 0  # buffered length needed before a value cut short is scanned again

    def feed(self, chunk: bytes) -> Iterator[dict[str, Any]]:
        """The items completed by ``chunk`` (possibly none), decoded as iterated."""
        self._buffer(self._utf8.decode(chunk))
        return self._items(final=False)

    def close(self) -> Iterator[dict[str, Any]]:
        """The body ended: the items not returned yet; at its end the iterator raises
        ``ValueError`` unless the body held exactly one whole list."""
        self._buffer(self._utf8.decode(b"", final=True))
        self._wanted = 0
        return self._items(final=True)

    def _buffer(self, text: str) -> None:
        self._text = self._text[self._pos :] + text if self._pos else self._text + text
        self._pos = 0

    def _items(self, *, final: bool) -> Iterator[dict[str, Any]]:
        if len(self._text) < self._wanted:
            return
        self._wanted = 0
        while self._state != "done":
            if self._state == "item":
                yield from self._compact_items()
            started = self._pos
            try:
                item = self._step()
            except _Incomplete:
                self._pos = started
                if final:
                    raise ValueError("truncated or malformed JSON list") from None
                # Scanned again only once twice as much is buffered: a huge item arriving in
                # small chunks is not rescanned once per chunk.
                self._wanted = 2 * (len(self._text) - started)
                return
            if item is not None:
                yield item
        if final and self._text[self._pos :].strip(_WHITESPACE):
            raise ValueError("data after a JSON list")

    def _compact_items(self) -> Iterator[dict[str, Any]]:
        """The fast path for items written as the API server writes them (``{...},{...}``):
        one scan and one look at the next character per item; anything else (whitespace, the
        end of the buffered text, malformed JSON) is left to `_step`."""
        scan, text, pos = _scan_once, self._text, self._pos
        while True:
            try:
                item, end = scan(text, pos)
            except (StopIteration, json.JSONDecodeError):
                return
            following = text[end : end + 1]
            if following == ",":
                self._pos = pos = end + 1
            elif following == "]":
                self._pos = end + 1
                self._state = "next"
            elif following or type(item) is dict:
                self._pos = end
                self._state = "item end"
            else:
                return  # a number or literal at the very end may go on in the next chunk
            yield item
            if self._state != "item":
                return

    def _step(self) -> dict[str, Any] | None:
        """Read one token (or value) in the current state, and return the item read, if any;
        on `_Incomplete` the caller restores the position, so the state only changes once the
        whole token was read."""
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
                self.metadata.clear()
                self.metadata.update(value)
            self._state = "next"
        elif state == "items":
            self._state = self._items_start()
        elif state == "item":
            item: dict[str, Any] = self._value()
            self._state = "item end"
            return item
        elif state == "item end":
            self._state = "item" if self._either(",", "]") else "next"
        elif state == "next":
            self._state = "key" if self._either(",", "}") else "done"
        return None

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
    """The ``metadata`` of a JSON list object read whole, and an iterator over its items,
    decoded as iterated when the metadata comes first. Raises ``ValueError`` on malformed JSON
    (from the iterator, once it got that far)."""
    parser = ListParser()
    parser._buffer(text)
    items = parser.close()
    first = next(items, None)  # reads the metadata written before the items
    if first is None:
        return parser.metadata, iter(())
    if not parser.metadata:  # written after the items (or empty): read them all first
        return parser.metadata, iter([first, *items])
    return parser.metadata, itertools.chain((first,), items)
