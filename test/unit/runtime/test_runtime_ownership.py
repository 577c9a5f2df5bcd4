"""Owner references: setting the controller reference, and mapping owned objects to owners."""

from typing import Any

import pytest

from gpuctrl.runtime import Request, freeze, request_for_object, requests_for_owner
from gpuctrl.runtime import set_controller_reference as set_ref

OWNER = {
    "apiVersion": "example.com/v1",
    "kind": "Widget",
    "metadata": {"name": "w", "namespace": "ns", "uid": "u-1"},
}


def child(*refs: dict[str, Any], namespace: str = "ns") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "c", "namespace": namespace}
    if refs:
        meta["ownerReferences"] = list(refs)
    return {"metadata": meta}


def ref(kind: str = "Widget", api_version: str = "example.com/v1", **extra: Any) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": "w", "uid": "u-1", **extra}


def test_set_controller_reference_adds_one_controller_reference() -> None:
    obj = set_ref(OWNER, child(ref(kind="Other", uid="u-2", name="o")))
    refs = obj["metadata"]["ownerReferences"]
    assert refs[1] == ref(controller=True, blockOwnerDeletion=True)
    assert set_ref(OWNER, obj)["metadata"]["ownerReferences"] == refs  # idempotent


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (child(ref(uid="u-9", name="x", controller=True)), "already controlled by Widget x"),
        (child(namespace="elsewhere"), "cannot own an object in namespace 'elsewhere'"),
    ],
    ids=["other-controller", "cross-namespace"],
)
def test_set_controller_reference_refuses(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        set_ref(OWNER, obj)


@pytest.mark.parametrize(
    ("refs", "namespaced", "requests"),
    [
        ([ref(controller=True)], True, [Request("ns", "w")]),
        ([ref(controller=True)], False, [Request("", "w")]),
        ([ref(api_version="example.com/v2", controller=True)], True, [Request("ns", "w")]),
        ([ref()], True, []),
        ([ref(kind="Gadget", controller=True)], True, []),
        ([ref(api_version="other.io/v1", controller=True)], True, []),
        ([], True, []),
    ],
    ids=[
        "controller",
        "cluster-scoped-owner",
        "other-version",
        "not-controller",
        "other-kind",
        "other-group",
        "none",
    ],
)
def test_requests_for_owner(
    refs: list[dict[str, Any]], namespaced: bool, requests: list[Request]
) -> None:
    mapper = requests_for_owner("example.com/v1", "Widget", namespaced=namespaced)
    assert list(mapper(freeze(child(*refs)))) == requests


def test_request_for_object() -> None:
    assert list(request_for_object(child())) == [Request("ns", "c")]
    assert str(Request("", "node-1")) == "node-1"
    assert str(Request("ns", "c")) == "ns/c"
