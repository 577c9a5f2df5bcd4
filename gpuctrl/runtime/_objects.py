"""Kubernetes objects as plain JSON values, and the read-only form the cache hands out.

Objects travel through gpuctrl as decoded JSON (``dict``/``list``/``str``/...), never as the
generated model classes. Informer event handlers get them *frozen*: every mapping a `FrozenDict`
(a ``dict`` subclass whose mutators raise ``TypeError``), every array a ``tuple``, so the
handlers of one event share one object none of them can change. `thaw` (or ``copy.deepcopy``)
returns a mutable deep copy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

__all__ = ["FrozenDict", "freeze", "key", "object_key", "thaw"]

JSONObject = dict[str, Any]


class FrozenDict(dict[str, Any]):
    """A read-only JSON object: reads work as on ``dict``; every mutator raises ``TypeError``."""

    __slots__ = ()

    def _readonly(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError(
            "objects from the gpuctrl cache are read-only; call gpuctrl.runtime.thaw(obj) "
            "for a mutable copy"
        )

    __setitem__ = _readonly
    __delitem__ = _readonly
    __ior__ = _readonly
    clear = _readonly
    pop = _readonly
    popitem = _readonly
    setdefault = _readonly
    update = _readonly

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> dict[str, Any]:
        copy: dict[str, Any] = thaw(self)
        return copy

    def __reduce__(self) -> tuple[type[dict[str, Any]], tuple[dict[str, Any]]]:
        return (dict, (thaw(self),))


def freeze(value: Any) -> Any:
    """Return a read-only deep copy of a JSON value: dicts become `FrozenDict`, lists tuples."""
    kind = type(value)
    if kind is dict or kind is FrozenDict:
        return _freeze_dict(value)
    if kind is list or kind is tuple:
        return _freeze_array(value)
    return value


# Every informer event freezes its objects: copy a mapping in one C call, then replace only the
# values that are containers (most of an object's values are strings, numbers or booleans).
_set_item = dict.__setitem__


def _freeze_dict(value: Mapping[str, Any]) -> FrozenDict:
    frozen = FrozenDict(value)
    for name, item in value.items():
        kind = type(item)
        if kind is dict or kind is FrozenDict:
            _set_item(frozen, name, _freeze_dict(item))
        elif kind is list or kind is tuple:
            _set_item(frozen, name, _freeze_array(item))
    return frozen


def _freeze_array(value: Any) -> tuple[Any, ...]:
    return tuple([freeze(item) for item in value])


def thaw(value: Any) -> Any:
    """Return a mutable deep copy of a JSON value (frozen or not): dicts and lists throughout."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [thaw(v) for v in value]
    return value


def key(namespace: str | None, name: str) -> str:
    """The one key of an object, used by the cache, requests and logs: ``namespace/name``, or
    ``name`` when there is no namespace (cluster-scoped objects)."""
    return f"{namespace}/{name}" if namespace else name


def object_key(obj: Mapping[str, Any]) -> str:
    """The `key` of an object: ``namespace/name``, or ``name`` for cluster-scoped objects."""
    meta = obj["metadata"]
    return key(meta.get("namespace"), str(meta["name"]))
