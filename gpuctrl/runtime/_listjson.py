"""Decoding a list response one item at a time, so a big list never exists twice in memory.

``json.loads`` of a 5,000-Node list builds every item's dicts at once (about ten times the
JSON's size) before the first one can be stored; `read_list` instead returns the list's
metadata and a lazy iterator that decodes one item per step (with ``json``'s own scanner), so
each item can be stored compactly and its dicts freed before the next is decoded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

__all__ = ["read_list"]

_scan = json.JSONDecoder().raw_decode
_WHITESPACE = " \t\n\r"


def read_list(text: str) -> tuple[dict[str, Any], Iterator[dict[str, Any]]]:
    """The ``metadata`` of a JSON list object (``{"metadata": ..., "items": [...]}``) and an
    iterator over its items. Items are decoded lazily when ``metadata`` precedes ``items`` (as
    the API server writes them), else at once; ``"items": null`` (an empty list, as some
    servers write it) yields nothing. Raises ``ValueError`` on malformed JSON."""
    pos = _expect(text, 0, "{")
    metadata: dict[str, Any] = {}
    items: list[dict[str, Any]] = []
    while text[pos] != "}":
        key, pos = _scan(text, pos)
        pos = _expect(text, pos, ":")
        if key == "items" and metadata:
            return metadata, _items(text, pos)
        value, pos = _scan(text, pos)
        if key == "items":
            items = value or []
        elif key == "metadata":
            metadata = value
        pos = _skip(text, pos)
        if text[pos] == ",":
            pos = _skip(text, pos + 1)
    return metadata, iter(items)


def _items(text: str, pos: int) -> Iterator[dict[str, Any]]:
    if text.startswith("null", pos):
        return
    pos = _expect(text, pos, "[")
    if text[pos] == "]":
        return
    while True:
        item, pos = _scan(text, pos)
        yield item
        pos = _skip(text, pos)
        if text[pos] == "]":
            return
        pos = _expect(text, pos, ",")


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WHITESPACE:
        pos += 1
    if pos >= len(text):
        raise ValueError("truncated JSON list")
    return pos


def _expect(text: str, pos: int, char: str) -> int:
    pos = _skip(text, pos)
    if text[pos] != char:
        raise ValueError(f"expected {char!r} at offset {pos} of a JSON list, found {text[pos]!r}")
    return _skip(text, pos + 1)
