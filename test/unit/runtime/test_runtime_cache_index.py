"""The informer's indexed store: keys, the namespace index, custom indexes kept current, and
reads that hand out private copies."""

from collections.abc import Iterable, Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuctrl.runtime import NAMESPACE_INDEX, Store, freeze


def obj(name: str, namespace: str = "ns", node: str | None = None, rv: str = "1") -> Any:
    spec = {"nodeName": node} if node else {}
    meta = {"name": name, "namespace": namespace, "resourceVersion": rv}
    return freeze({"metadata": meta, "spec": spec})


def by_node(o: Mapping[str, Any]) -> Iterable[str]:
    node = o["spec"].get("nodeName")
    return (node,) if node else ()


def names(objs: Iterable[Mapping[str, Any]]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objs)


def test_upsert_get_delete() -> None:
    store = Store()
    store.upsert(obj("a"))
    store.upsert(obj("a", rv="2"))
    assert store.get("ns/a") == obj("a", rv="2")
    assert store.resource_version("ns/a") == "2"
    assert len(store) == 1
    assert store.delete("ns/a")
    assert not store.delete("ns/a")
    assert store.get("ns/a") is None
    assert store.resource_version("ns/a") is None


def test_reads_are_private_copies() -> None:
    store = Store()
    store.upsert(obj("a", node="n1"))
    store.add_index("node", by_node)
    for read in (store.get("ns/a"), store.list()[0], store.by_index("node", "n1")[0]):
        assert read is not None
        read["spec"]["nodeName"] = "changed"
        read["metadata"].clear()
    assert store.get("ns/a") == obj("a", node="n1")


def test_namespace_index_follows_changes() -> None:
    store = Store()
    for name, ns in [("a", "one"), ("b", "one"), ("c", "two")]:
        store.upsert(obj(name, ns))
    assert names(store.by_index(NAMESPACE_INDEX, "one")) == ["a", "b"]
    store.delete("one/a")
    assert names(store.by_index(NAMESPACE_INDEX, "one")) == ["b"]
    assert store.by_index(NAMESPACE_INDEX, "three") == []


@pytest.mark.parametrize(
    "add_index_first", [True, False], ids=["index-then-objects", "objects-then-index"]
)
def test_custom_index_is_updated_on_every_change(add_index_first: bool) -> None:
    store = Store()
    if add_index_first:
        store.add_index("node", by_node)
    store.upsert(obj("p1", node="n1"))
    store.upsert(obj("p2", node="n1"))
    store.upsert(obj("p3"))
    if not add_index_first:
        store.add_index("node", by_node)
    assert names(store.by_index("node", "n1")) == ["p1", "p2"]
    store.upsert(obj("p2", node="n2", rv="2"))  # moved: leaves n1, joins n2
    assert names(store.by_index("node", "n1")) == ["p1"]
    assert names(store.by_index("node", "n2")) == ["p2"]
    store.delete("ns/p1")
    assert store.by_index("node", "n1") == []


def test_index_keys_and_values_follow_changes_without_decoding() -> None:
    store = Store()
    store.add_index("node", by_node)
    assert store.index_values("node") == []
    store.upsert(obj("p1", node="n1"))
    store.upsert(obj("p2", node="n1"))
    store.upsert(obj("p3", node="n2"))
    store.upsert(obj("p4"))  # under no value
    assert sorted(store.index_values("node")) == ["n1", "n2"]
    assert sorted(store.index_keys("node", "n1")) == ["ns/p1", "ns/p2"]
    assert store.index_keys("node", "n3") == []
    store.upsert(obj("p3", node="n1", rv="2"))
    assert store.index_values("node") == ["n1"]
    store.delete("ns/p1")
    assert sorted(store.index_keys("node", "n1")) == ["ns/p2", "ns/p3"]
    assert sorted(store.index_values(NAMESPACE_INDEX)) == ["ns"]


def test_index_errors_name_the_index() -> None:
    store = Store()
    for read in (store.by_index, store.index_keys):
        with pytest.raises(KeyError, match="no index named 'nodes'"):
            read("nodes", "x")
    with pytest.raises(KeyError, match="no index named 'nodes'"):
        store.index_values("nodes")
    store.add_index("node", by_node)
    with pytest.raises(ValueError, match="'node' already exists"):
        store.add_index("node", by_node)


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["upsert", "delete"]),
        st.sampled_from(["a", "b", "c", "d"]),
        st.one_of(st.none(), st.sampled_from(["n1", "n2", "n3"])),
    ),
    max_size=30,
)


@given(ops=_OPS)
def test_index_keys_and_values_match_the_stored_objects(
    ops: list[tuple[str, str, str | None]],
) -> None:
    """After any sequence of writes, the index holds exactly what its function says of the
    objects stored, and nothing under a value no object has any more."""
    store = Store()
    store.add_index("node", by_node)
    for rv, (op, name, node) in enumerate(ops):
        if op == "upsert":
            store.upsert(obj(name, node=node, rv=str(rv)))
        else:
            store.delete(f"ns/{name}")
    expected: dict[str, set[str]] = {}
    for stored in store.list():
        for value in by_node(stored):
            expected.setdefault(value, set()).add(f"ns/{stored['metadata']['name']}")
    assert sorted(store.index_values("node")) == sorted(expected)
    for value, keys in expected.items():
        assert set(store.index_keys("node", value)) == keys
