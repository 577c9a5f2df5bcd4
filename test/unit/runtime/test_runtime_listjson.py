"""Decoding list responses item by item."""

import json
from typing import Any

import pytest

from gpuctrl.runtime._listjson import ListParser, read_list

ITEMS = [{"metadata": {"name": f"n{i}"}, "data": {"k": "v,]}"}} for i in range(3)]
META = {"resourceVersion": "42", "continue": ""}


@pytest.mark.parametrize(
    "document",
    [
        {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": META, "items": ITEMS},
        {"items": ITEMS, "metadata": META, "kind": "ConfigMapList"},
        {"metadata": META, "items": []},
    ],
    ids=["server-order", "items-first", "empty"],
)
@pytest.mark.parametrize("indent", [None, 2], ids=["compact", "indented"])
def test_read_list(document: dict[str, Any], indent: int | None) -> None:
    metadata, items = read_list(json.dumps(document, indent=indent))
    assert metadata == META
    assert list(items) == document["items"]


@pytest.mark.parametrize(
    "text",
    ['{"metadata": {}, "items": [{"a": 1}', "[]", '{"metadata": {}, "items": [{"a": 1} {"b": 2}]}'],
    ids=["truncated", "not-an-object", "missing-comma"],
)
def test_malformed_lists_raise_value_error(text: str) -> None:
    def read_all() -> list[Any]:
        return list(read_list(text)[1])

    with pytest.raises(ValueError, match=r"JSON|Expecting|expected"):
        read_all()


DOCUMENTS = [
    {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": META, "items": ITEMS},
    {"items": ITEMS, "metadata": META, "remainingItemCount": 12345},
    {"metadata": META, "items": None},
    {"metadata": META, "items": [{"data": {"ü": "日本語 ✓", "n": 1.5e3, "t": True}}] * 3},
    {},
]


@pytest.mark.parametrize("document", DOCUMENTS, ids=["server", "items-first", "null", "utf8", "{}"])
@pytest.mark.parametrize("size", [1, 2, 7, 64, 1 << 20], ids=lambda n: f"chunks-of-{n}")
@pytest.mark.parametrize("indent", [None, 1], ids=["compact", "indented"])
def test_parser_fed_in_chunks_reads_what_a_whole_read_does(
    document: dict[str, Any], size: int, indent: int | None
) -> None:
    """However the body is cut (inside strings, numbers, multi-byte characters, ``null``),
    the items come out in order, each once, and the metadata is read."""
    body = json.dumps(document, indent=indent, ensure_ascii=False).encode()
    parser = ListParser()
    items = [item for at in range(0, len(body), size) for item in parser.feed(body[at : at + size])]
    items += parser.close()
    assert items == (document.get("items") or [])
    assert parser.metadata == document.get("metadata", {})


def test_parser_returns_items_as_soon_as_they_are_complete() -> None:
    parser = ListParser()
    metadata = parser.metadata
    items = parser.feed(b'{"metadata": {"resourceVersion": "7"}, "items": [{"a": 1}, {"b"')
    assert next(items) == {"a": 1}
    assert metadata == {"resourceVersion": "7"}  # the same dict, filled in
    assert list(items) == []
    assert list(parser.feed(b": 2}]}")) == [{"b": 2}]
    assert list(parser.close()) == []


@pytest.mark.parametrize(
    "body",
    [b'{"metadata": {}, "items": [{"a": 1}', b'{"items": [{"a": }]}', b'{"items": []} {}'],
    ids=["truncated", "malformed-item", "data-after"],
)
def test_parser_close_raises_on_a_body_that_is_not_one_list(body: bytes) -> None:
    parser = ListParser()
    list(parser.feed(body))
    with pytest.raises(ValueError, match="JSON list"):
        list(parser.close())
