"""Decoding list responses item by item."""

import json
from typing import Any

import pytest

from gpuctrl.runtime._listjson import read_list

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
