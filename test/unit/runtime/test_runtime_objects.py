"""Frozen objects: what the cache hands out cannot be changed, and thaw gives a mutable copy."""

import copy
import json
import pickle
from collections.abc import Callable
from typing import Any

import pytest

from gpuctrl.runtime import FrozenDict, freeze, object_key, thaw

OBJ = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "a", "namespace": "ns", "labels": {"x": "1"}},
    "data": {"k": "v"},
    "list": [{"inner": [1, 2]}],
}

MUTATIONS: dict[str, Callable[[Any], object]] = {
    "setitem": lambda o: o.__setitem__("data", {}),
    "nested setitem": lambda o: o["metadata"]["labels"].__setitem__("x", "2"),
    "delitem": lambda o: o.__delitem__("data"),
    "pop": lambda o: o["data"].pop("k"),
    "popitem": lambda o: o.popitem(),
    "clear": lambda o: o["metadata"].clear(),
    "update": lambda o: o.update(data={}),
    "setdefault": lambda o: o.setdefault("new", 1),
    "in-place or": lambda o: o["data"].__ior__({"k": "w"}),
    "list append": lambda o: o["list"].append(1),
    "list item": lambda o: o["list"][0]["inner"].__setitem__(0, 9),
}


@pytest.mark.parametrize("mutate", MUTATIONS.values(), ids=MUTATIONS.keys())
def test_frozen_objects_refuse_every_mutation(mutate: Callable[[Any], object]) -> None:
    frozen = freeze(OBJ)
    with pytest.raises((TypeError, AttributeError)):
        mutate(frozen)
    assert thaw(frozen) == OBJ


def test_freeze_copies_and_reads_like_the_original() -> None:
    original = copy.deepcopy(OBJ)
    frozen = freeze(original)
    original["data"]["k"] = "changed"
    assert frozen["data"]["k"] == "v"
    assert isinstance(frozen, dict)
    assert isinstance(frozen["metadata"], FrozenDict)
    assert json.loads(json.dumps(frozen)) == OBJ


@pytest.mark.parametrize(
    "copier",
    [thaw, copy.deepcopy, lambda o: pickle.loads(pickle.dumps(o))],
    ids=["thaw", "deepcopy", "pickle"],
)
def test_copies_of_frozen_objects_are_mutable_and_independent(copier: Callable[[Any], Any]) -> None:
    frozen = freeze(OBJ)
    mutable = copier(frozen)
    mutable["metadata"]["labels"]["x"] = "2"
    mutable["list"].append(3)
    assert type(mutable) is dict
    assert frozen["metadata"]["labels"]["x"] == "1"
    assert len(frozen["list"]) == 1


@pytest.mark.parametrize(
    ("metadata", "key"),
    [({"name": "a", "namespace": "ns"}, "ns/a"), ({"name": "node-1"}, "node-1")],
    ids=["namespaced", "cluster-scoped"],
)
def test_object_key(metadata: dict[str, str], key: str) -> None:
    assert object_key({"metadata": metadata}) == key
