"""AdmissionReview ``admission.k8s.io/v1``: the request a webhook is handed and its answers.

`parse_review` turns a request body into an `AdmissionRequest` or raises `BadReview` naming
what is wrong (the server answers 400 with that message). A handler returns one of
`allowed`, `denied` or `patched`; `review_response` wraps it for the wire. `patched` computes
the JSON Patch (RFC 6902, with ``~0``/``~1`` escaping) from the object before and after the
handler's changes, and answers a plain `allowed` when nothing changed, so a webhook
reinvoked on its own output returns no patch.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jsonpatch
import jsonpointer

__all__ = [
    "ADMISSION_API_VERSION",
    "AdmissionRequest",
    "AdmissionResponse",
    "BadReview",
    "allowed",
    "denied",
    "parse_review",
    "patched",
    "review_response",
]

ADMISSION_API_VERSION = "admission.k8s.io/v1"


class BadReview(ValueError):
    """A request body that is not an AdmissionReview v1 request; the message says why."""


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """The parts of ``request`` a handler needs; ``raw`` is the whole request as sent.

    ``kind`` and ``resource`` are ``(group, version, kind)`` and ``(group, version, resource)``;
    ``name`` is empty on a CREATE with ``generateName``; ``object`` is a dict (possibly empty
    for DELETE).
    """

    uid: str
    kind: tuple[str, str, str]
    resource: tuple[str, str, str]
    sub_resource: str
    name: str
    namespace: str
    operation: str
    dry_run: bool
    object: dict[str, Any]
    raw: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class AdmissionResponse:
    """A handler's answer: allowed or not, an optional JSON Patch, warnings and a Status."""

    allowed: bool
    patch: Sequence[Mapping[str, Any]] = ()
    warnings: Sequence[str] = ()
    message: str = ""
    code: int = 200


def allowed(*, warnings: Sequence[str] = ()) -> AdmissionResponse:
    """Admit the object unchanged."""
    return AdmissionResponse(allowed=True, warnings=tuple(warnings))


def denied(message: str, *, code: int = 403) -> AdmissionResponse:
    """Refuse the object; ``message`` is what the user sees, ``code`` the Status code."""
    return AdmissionResponse(allowed=False, message=message, code=code)


def patched(
    original: Mapping[str, Any],
    mutated: Mapping[str, Any],
    *,
    warnings: Sequence[str] = (),
) -> AdmissionResponse:
    """Admit the object changed from ``original`` into ``mutated`` (JSON values); no patch
    when they are equal."""
    operations: list[dict[str, Any]] = []
    _diff(original, mutated, [], operations)
    return AdmissionResponse(allowed=True, patch=operations, warnings=tuple(warnings))


def _diff(original: Any, mutated: Any, parts: list[str], out: list[dict[str, Any]]) -> None:
    """Append the operations turning ``original`` into ``mutated`` at ``parts``.

    Equal subtrees are skipped with one C-speed ``==``; maps are walked key by key (added and
    removed keys are single operations), lists of one length index by index; any other change
    is left to ``jsonpatch.make_patch``, whose list diff is thorough but slow on big trees.
    """
    if original == mutated and type(original) is type(mutated):
        return
    if isinstance(original, dict) and isinstance(mutated, dict):
        for key, value in original.items():
            if key not in mutated:
                out.append({"op": "remove", "path": _pointer([*parts, key])})
            else:
                _diff(value, mutated[key], [*parts, key], out)
        for key, value in mutated.items():
            if key not in original:
                out.append({"op": "add", "path": _pointer([*parts, key]), "value": value})
        return
    if isinstance(original, list) and isinstance(mutated, list) and len(original) == len(mutated):
        for index, (before, after) in enumerate(zip(original, mutated, strict=True)):
            _diff(before, after, [*parts, str(index)], out)
        return
    if not parts:
        out.extend(jsonpatch.make_patch(original, mutated).patch)
        return
    prefix = _pointer(parts)
    if isinstance(original, dict | list) and type(original) is type(mutated):
        for operation in jsonpatch.make_patch(original, mutated).patch:
            out.append(_prefixed(operation, prefix))
        return
    out.append({"op": "replace", "path": prefix, "value": mutated})


def _pointer(parts: list[str]) -> str:
    return "".join("/" + jsonpointer.escape(part) for part in parts)


def _prefixed(operation: dict[str, Any], prefix: str) -> dict[str, Any]:
    operation = dict(operation)
    for field in ("path", "from"):
        if field in operation:
            operation[field] = prefix + operation[field]
    return operation


def review_response(uid: str, response: AdmissionResponse) -> dict[str, Any]:
    """The AdmissionReview (v1) that answers request ``uid`` with ``response``."""
    body: dict[str, Any] = {"uid": uid, "allowed": response.allowed}
    if response.patch:
        body["patchType"] = "JSONPatch"
        body["patch"] = base64.b64encode(
            json.dumps(list(response.patch), separators=(",", ":")).encode()
        ).decode()
    if response.warnings:
        body["warnings"] = list(response.warnings)
    if not response.allowed or response.message:
        body["status"] = {"code": response.code, "message": response.message}
    return {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": body}


def parse_review(body: bytes) -> AdmissionRequest:
    """The request of an AdmissionReview v1 body; `BadReview` names the first thing wrong."""
    try:
        review = json.loads(body)
    except (ValueError, RecursionError) as error:
        raise BadReview(f"the body is not JSON: {error}") from None
    if not isinstance(review, dict):
        raise BadReview(f"the body is a JSON {type(review).__name__}, not an AdmissionReview")
    if review.get("apiVersion") != ADMISSION_API_VERSION or review.get("kind") != "AdmissionReview":
        raise BadReview(
            f"expected apiVersion {ADMISSION_API_VERSION} and kind AdmissionReview, got "
            f"{_short(review.get('apiVersion'))} {_short(review.get('kind'))}"
        )
    request = review.get("request")
    if not isinstance(request, dict):
        raise BadReview("the AdmissionReview has no request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("request.uid is missing or not a string")
    obj = request.get("object")
    if obj is None:
        obj = {}
    if not isinstance(obj, dict):
        raise BadReview(f"request.object is a JSON {type(obj).__name__}, not an object")
    dry_run = request.get("dryRun", False)
    if not isinstance(dry_run, bool):
        raise BadReview("request.dryRun is not a boolean")
    return AdmissionRequest(
        uid=uid,
        kind=_triple(request, "kind", "kind"),
        resource=_triple(request, "resource", "resource"),
        sub_resource=_string(request, "subResource"),
        name=_string(request, "name"),
        namespace=_string(request, "namespace"),
        operation=_string(request, "operation"),
        dry_run=dry_run,
        object=obj,
        raw=request,
    )


def _triple(request: Mapping[str, Any], field_name: str, last: str) -> tuple[str, str, str]:
    value = request.get(field_name)
    if not isinstance(value, dict):
        raise BadReview(f"request.{field_name} is missing or not an object")
    parts = (value.get("group", ""), value.get("version"), value.get(last))
    if not all(isinstance(part, str) for part in parts):
        raise BadReview(f"request.{field_name} needs string group, version and {last}")
    return parts  # type: ignore[return-value]


def _string(request: Mapping[str, Any], field_name: str) -> str:
    value = request.get(field_name, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadReview(f"request.{field_name} is not a string")
    return value


def _short(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."
