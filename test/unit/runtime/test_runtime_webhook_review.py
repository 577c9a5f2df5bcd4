"""AdmissionReview parsing and answers: patched() escaping, absent maps, no-op patches."""

from __future__ import annotations

import base64
import json
from typing import Any

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuctrl.runtime.webhook import (
    BadReview,
    allowed,
    denied,
    parse_review,
    patched,
    review_response,
)


def review(**request: Any) -> bytes:
    body = {
        "uid": "u1",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": "CREATE",
        "object": {"metadata": {}},
        **request,
    }
    return json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": body}
    ).encode()


@pytest.mark.parametrize(
    ("original", "mutated", "expected"),
    [
        pytest.param(
            {"metadata": {}},
            {"metadata": {"labels": {"a/b": "1"}}},
            [{"op": "add", "path": "/metadata/labels", "value": {"a/b": "1"}}],
            id="absent-map-added-whole",
        ),
        pytest.param(
            {"metadata": {"labels": {"x": "y"}}},
            {"metadata": {"labels": {"x": "y", "sidecar.istio.io/inject": "false"}}},
            [{"op": "add", "path": "/metadata/labels/sidecar.istio.io~1inject", "value": "false"}],
            id="slash-escaped",
        ),
        pytest.param(
            {"metadata": {"annotations": {"a~b": "1"}}},
            {"metadata": {"annotations": {"a~b": "2"}}},
            [{"op": "replace", "path": "/metadata/annotations/a~0b", "value": "2"}],
            id="tilde-escaped",
        ),
        pytest.param({"a": {"b": [1, 2]}}, {"a": {"b": [1, 2]}}, [], id="equal-no-patch"),
    ],
)
def test_patched_computes_an_escaped_minimal_patch(
    original: dict[str, Any], mutated: dict[str, Any], expected: list[dict[str, Any]]
) -> None:
    answer = patched(original, mutated)
    assert list(answer.patch) == expected
    assert jsonpatch.apply_patch(original, list(answer.patch)) == mutated


def test_review_response_carries_patch_and_warnings_or_neither() -> None:
    answer = patched({"a": 1}, {"a": 2}, warnings=["w"])
    wire = review_response("u", answer)["response"]
    assert wire["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(wire["patch"])) == [
        {"op": "replace", "path": "/a", "value": 2}
    ]
    assert wire["warnings"] == ["w"]
    plain = review_response("u", allowed())["response"]
    assert plain == {"uid": "u", "allowed": True}
    refused = review_response("u", denied("no", code=400))["response"]
    assert refused == {"uid": "u", "allowed": False, "status": {"code": 400, "message": "no"}}


def test_parse_review_reads_a_generate_name_dry_run_request() -> None:
    request = parse_review(review(name="", dryRun=True, namespace="ns"))
    assert (request.uid, request.name, request.dry_run, request.namespace) == ("u1", "", True, "ns")
    assert request.kind == ("", "v1", "Pod")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(b"{", "not JSON", id="not-json"),
        pytest.param(b"[]", "JSON list", id="array"),
        pytest.param(
            json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}),
            "expected apiVersion admission.k8s.io/v1",
            id="v1beta1",
        ),
        pytest.param(
            json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
            "no request",
            id="no-request",
        ),
        pytest.param(review(uid=None), "request.uid", id="no-uid"),
        pytest.param(review(object=[1]), "request.object is a JSON list", id="object-list"),
        pytest.param(review(kind={"group": ""}), "request.kind needs", id="kind-incomplete"),
        pytest.param(review(dryRun="yes"), "dryRun", id="dry-run-string"),
        pytest.param(b"[" * 100_000, "not JSON", id="deeply-nested"),
    ],
)
def test_parse_review_names_what_is_wrong(body: bytes | str, message: str) -> None:
    with pytest.raises(BadReview, match=message):
        parse_review(body if isinstance(body, bytes) else body.encode())


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(["a", "b", "a/b", "~", "~1", ""]), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=500, deadline=None)
@given(original=json_values, mutated=json_values)
def test_patched_turns_any_document_into_any_other(original: Any, mutated: Any) -> None:
    patch = list(patched({"root": original}, {"root": mutated}).patch)
    assert jsonpatch.apply_patch({"root": original}, patch) == {"root": mutated}
