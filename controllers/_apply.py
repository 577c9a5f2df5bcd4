"""Deciding whether to send an object (pure): a hash of the rendered intent, and a check that
the cached object still holds every field gpuctrl sets.

The hash annotation catches every change of the render, removals included (a field gpuctrl
stops setting); the field check catches drift (someone edited a field gpuctrl sets). Both
match on a converged cluster, so a controller sends nothing there, also after a restart.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["APPLIED_HASH", "holds", "needs_apply", "with_hash"]

APPLIED_HASH = "gpuctrl.io/applied-hash"


def with_hash(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` with the `APPLIED_HASH` annotation of its content (without that annotation)."""
    meta = dict(obj["metadata"])
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != APPLIED_HASH}
    content = {**obj, "metadata": {**meta, "annotations": annotations}}
    digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:20]
    meta["annotations"] = {**annotations, APPLIED_HASH: digest}
    return {**obj, "metadata": meta}


def needs_apply(desired: Mapping[str, Any], cached: Mapping[str, Any] | None) -> bool:
    """Whether ``desired`` (from `with_hash`) must be applied over ``cached``."""
    if cached is None:
        return True
    hashed = desired["metadata"]["annotations"][APPLIED_HASH]
    if (cached["metadata"].get("annotations") or {}).get(APPLIED_HASH) != hashed:
        return True
    return not holds(cached, desired)


def holds(actual: Any, wanted: Any) -> bool:
    """Whether ``actual`` has every field of ``wanted`` with its value. Maps may hold more
    keys (defaults the apiserver added); lists must have the same length, item by item;
    an empty list, map, string or null in ``wanted`` matches an absent field (the apiserver
    omits them, e.g. an env var's ``value: ""``)."""
    if isinstance(wanted, Mapping):
        if not isinstance(actual, Mapping):
            return False
        return all(
            holds(actual[key], value) if key in actual else _empty(value)
            for key, value in wanted.items()
        )
    if isinstance(wanted, list):
        if not isinstance(actual, list) or len(actual) != len(wanted):
            return _empty(wanted) and actual in (None, [])
        return all(holds(a, w) for a, w in zip(actual, wanted, strict=True))
    return bool(actual == wanted)


def _empty(value: Any) -> bool:
    return value is None or value in ([], {}, "")
