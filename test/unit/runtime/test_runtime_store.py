"""The store's entries: objects come back as stored, with their resourceVersion, whether they
were kept as JSON or (from `COMPRESS_FROM` bytes) deflated with the store's dictionary."""

import json
from typing import Any

import pytest

from gpuctrl.runtime import Store
from gpuctrl.runtime._store import COMPRESS_FROM


def node(name: str, rv: str, extra: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "resourceVersion": rv, "labels": {"zone": "ü-1"}},
        "status": {"images": [{"names": [f"img-{i}\n日本"], "sizeBytes": i} for i in range(extra)]},
    }


@pytest.mark.parametrize("extra", [0, 40, 400], ids=["small", "deflated", "large"])
def test_objects_come_back_as_stored(extra: int) -> None:
    store = Store()
    objs = [node(f"n{i}", str(10 + i), extra + i) for i in range(5)]
    for obj in objs:
        store.upsert(obj)
    assert sorted(store.list(), key=lambda o: o["metadata"]["name"]) == objs
    assert store.get("n3") == objs[3]
    assert store.resource_version("n3") == "13"
    assert len(store.by_index("namespace", "")) == 5  # cluster-scoped: namespace ""
    store.upsert(node("n3", "99", extra))  # replaced: the entry and its version
    assert store.get("n3") == node("n3", "99", extra)
    assert store.resource_version("n3") == "99"


def test_big_objects_are_stored_deflated_and_smaller() -> None:
    store = Store()
    objs = [node(f"n{i}", str(i), 60) for i in range(3)]
    assert len(json.dumps(objs[0], separators=(",", ":"))) >= COMPRESS_FROM
    for obj in objs:
        store.upsert(obj)
    size = len(json.dumps(objs[2], separators=(",", ":"), ensure_ascii=False).encode())
    assert len(store._objects["n2"]) < size / 4  # the first one's JSON is the dictionary
    assert store.get("n2") == objs[2]
