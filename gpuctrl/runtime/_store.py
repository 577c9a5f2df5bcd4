"""An indexed store of objects kept as compact JSON: the memory behind one informer.

Each object is held as one ``bytes``: its compact JSON encoding, a newline and its
resourceVersion (compact JSON has no raw newline, so the last one ends the JSON): several times
smaller than the decoded dicts, one object per entry rather than three (a tuple and a second
string cost ~100 bytes more per object), and immune to changes by readers, who always decode a
private copy (`Store.get`, `Store.list`, `Store.by_index`), as controller-runtime's cache
deep-copies. An object whose JSON reaches `COMPRESS_FROM` bytes (a Node, a Pod; not a small
ConfigMap) is stored deflated (a zero byte, then raw deflate) with the store's first such object
as the preset dictionary: objects of one kind share most of their keys and many values, so a
Node of 2.3 KB takes a few hundred bytes, for ~8 us more per write and ~2 us per read.

Objects are keyed by `object_key` and indexed by named index functions (an object may have
several values per index); the ``namespace`` index always exists. Only its informer mutates a
store, on the event loop, so it needs no lock.
"""

from __future__ import annotations

import builtins
import json
import zlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ._objects import object_key

__all__ = ["COMPRESS_FROM", "NAMESPACE_INDEX", "IndexFunc", "Store"]

IndexFunc = Callable[[Mapping[str, Any]], Iterable[str]]
"""Maps an object to the values it is found under in one index."""

NAMESPACE_INDEX = "namespace"

COMPRESS_FROM = 1024
"""Bytes of compact JSON from which an object is stored deflated."""
_DEFLATED = 0  # the first byte of a deflated entry (a JSON one starts with "{")

# json.dumps(obj, separators=(",", ":"), ensure_ascii=False) without its set-up on every call
# (a new encoder, a check for circular references, which JSON from the API cannot have).
_make_encoder = getattr(json.encoder, "c_make_encoder", None)
_encode_chunks = (
    None
    if _make_encoder is None
    else _make_encoder(
        None,
        json.JSONEncoder().default,
        json.encoder.encode_basestring,
        None,
        ":",
        ",",
        False,
        False,
        True,
    )
)


def _encode(obj: Mapping[str, Any]) -> str:
    if _encode_chunks is None:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    return "".join(_encode_chunks(obj, 0))


_scan = json.JSONDecoder().raw_decode


class Store:
    """Objects by key, with secondary indexes kept up to date on every change."""

    def __init__(self) -> None:
        self._objects: dict[str, bytes] = {}  # key -> JSON, b"\n", resourceVersion
        self._index_funcs: dict[str, IndexFunc] = {}
        # index name -> index value -> keys of the objects found under that value
        self._indices: dict[str, dict[str, set[str]]] = {NAMESPACE_INDEX: {}}
        # custom index name -> key -> the values its object is indexed under
        self._indexed_as: dict[str, dict[str, tuple[str, ...]]] = {}
        # the JSON of the first object stored deflated: the dictionary of every deflated entry
        self._zdict: bytes | None = None

    def add_index(self, name: str, func: IndexFunc) -> None:
        """Add an index (also over the objects already stored); a name can only be used once."""
        if name in self._indices:
            raise ValueError(f"index {name!r} already exists")
        self._index_funcs[name] = func
        self._indices[name] = {}
        self._indexed_as[name] = {}
        for key in self._objects:
            self._index_one(name, key, self._decoded(key))

    def has_index(self, name: str) -> bool:
        """Whether an index called ``name`` exists (the ``namespace`` index always does)."""
        return name in self._indices

    def get(self, key: str) -> dict[str, Any] | None:
        """A private (mutable) copy of the object stored under ``key``, or None."""
        entry = self._objects.get(key)
        return None if entry is None else self._decode(entry)

    def resource_version(self, key: str) -> str | None:
        """The resourceVersion of the object stored under ``key`` (None when absent)."""
        entry = self._objects.get(key)
        return None if entry is None else entry[entry.rindex(b"\n") + 1 :].decode()

    def list(self) -> builtins.list[dict[str, Any]]:
        """Private copies of every stored object, in no particular order."""
        decode = self._decode
        return [decode(entry) for entry in self._objects.values()]

    def keys(self) -> set[str]:
        """The keys of every stored object (a copy)."""
        return set(self._objects)

    def by_index(self, name: str, value: str) -> builtins.list[dict[str, Any]]:
        """Private copies of the objects whose index function ``name`` yielded ``value``."""
        return [self._decoded(k) for k in self.index_keys(name, value)]

    def index_keys(self, name: str, value: str) -> builtins.list[str]:
        """The keys of the objects whose index function ``name`` yielded ``value``, none of
        them decoded (client-go's ``IndexKeys``)."""
        return builtins.list(self._index(name).get(value, ()))

    def index_values(self, name: str) -> builtins.list[str]:
        """Every value index ``name`` holds at least one object under (client-go's
        ``ListIndexFuncValues``): with `index_keys`, counts by value without decoding."""
        return builtins.list(self._index(name))

    def upsert(self, obj: Mapping[str, Any]) -> None:
        """Store (a copy of) ``obj`` under its key, replacing what was there."""
        self.upsert_as(object_key(obj), obj)

    def upsert_as(self, key: str, obj: Mapping[str, Any]) -> None:
        """`upsert` for a caller that has computed ``key``, which must be ``object_key(obj)``."""
        if key in self._objects:
            self._unindex(key)
        else:
            self._indices[NAMESPACE_INDEX].setdefault(_namespace_of(key), set()).add(key)
        self._objects[key] = self._entry(obj)
        for name in self._index_funcs:
            self._index_one(name, key, obj)

    def delete(self, key: str) -> bool:
        """Remove the object stored under ``key``; whether there was one."""
        if self._objects.pop(key, None) is None:
            return False
        self._unindex(key)
        _discard(self._indices[NAMESPACE_INDEX], _namespace_of(key), key)
        return True

    def __len__(self) -> int:
        return len(self._objects)

    def _index(self, name: str) -> dict[str, set[str]]:
        index = self._indices.get(name)
        if index is None:
            raise KeyError(f"no index named {name!r}; known: {sorted(self._indices)}")
        return index

    def _decoded(self, key: str) -> dict[str, Any]:
        return self._decode(self._objects[key])

    def _entry(self, obj: Mapping[str, Any]) -> bytes:
        """What the store holds for ``obj`` (see the module docstring)."""
        rv = obj["metadata"].get("resourceVersion") or ""
        text = _encode(obj)
        if len(text) < COMPRESS_FROM:
            return f"{text}\n{rv}".encode()
        data = text.encode()
        if self._zdict is None:
            self._zdict = data
        deflater = zlib.compressobj(1, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY, self._zdict)
        return b"".join((b"\0", deflater.compress(data), deflater.flush(), b"\n", rv.encode()))

    def _decode(self, entry: bytes) -> dict[str, Any]:
        """The object of a stored entry (the resourceVersion after its JSON is not read)."""
        if entry[0] != _DEFLATED:
            text = entry.decode()
        else:  # the deflate stream ends before the resourceVersion, left as unused data
            assert self._zdict is not None
            inflater = zlib.decompressobj(-15, self._zdict)
            text = inflater.decompress(memoryview(entry)[1:]).decode()
        obj: dict[str, Any] = _scan(text)[0]
        return obj

    def _index_one(self, name: str, key: str, obj: Mapping[str, Any]) -> None:
        values = tuple(self._index_funcs[name](obj))
        self._indexed_as[name][key] = values
        index = self._indices[name]
        for value in values:
            index.setdefault(value, set()).add(key)

    def _unindex(self, key: str) -> None:
        for name, indexed_as in self._indexed_as.items():
            for value in indexed_as.pop(key, ()):
                _discard(self._indices[name], value, key)


def _namespace_of(key: str) -> str:
    return key.rpartition("/")[0]


def _discard(index: dict[str, set[str]], value: str, key: str) -> None:
    keys = index.get(value)
    if keys is not None:
        keys.discard(key)
        if not keys:
            del index[value]
