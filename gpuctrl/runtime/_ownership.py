"""Owner references: making one object the controller of another."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["set_controller_reference"]


def set_controller_reference(owner: Mapping[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
    """Make ``owner`` the controller of ``obj`` (mutating and returning ``obj``).

    Raises ``ValueError`` when ``obj`` already has a different controller, when ``owner``
    lacks apiVersion, kind or uid (as objects read without them would), or when a namespaced
    owner is in another namespace than ``obj`` (the garbage collector would delete ``obj``).
    """
    meta = owner["metadata"]
    missing = [f for f in ("apiVersion", "kind") if not owner.get(f)]
    if not meta.get("uid"):
        missing.append("metadata.uid")
    if missing:
        raise ValueError(f"owner {meta.get('name')!r} has no {', '.join(missing)}")
    owner_ns = meta.get("namespace")
    if owner_ns and owner_ns != obj["metadata"].get("namespace"):
        raise ValueError(
            f"owner {owner['kind']} {owner_ns}/{meta['name']} cannot own an object in namespace "
            f"{obj['metadata'].get('namespace')!r}"
        )
    reference = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    references = [dict(r) for r in obj["metadata"].get("ownerReferences", ())]
    for i, ref in enumerate(references):
        if ref.get("controller") and ref["uid"] != meta["uid"]:
            raise ValueError(
                f"{obj['metadata']['name']} is already controlled by {ref['kind']} {ref['name']}"
            )
        if ref["uid"] == meta["uid"]:
            references[i] = reference
            break
    else:
        references.append(reference)
    obj["metadata"]["ownerReferences"] = references
    return obj
