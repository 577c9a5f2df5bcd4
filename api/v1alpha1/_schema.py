"""The structural schema of a model: what the CRDs carry, and what `rule_problems` checks.

`model_schema` turns a model's pydantic JSON schema into a structural ``openAPIV3Schema``
(references inlined, optional fields plain, ``int | str`` as int-or-string, free-form maps
preserved, CEL rules kept). `rule_problems` evaluates that schema's CEL rules
(``x-kubernetes-validations``) on a wire mapping offline, node by node as the apiserver does,
so a rule declared beside a field (see `api.v1alpha1._cel`) has one definition for both.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from api.v1alpha1._cel import failed_message
from api.v1alpha1._rules import Problem

__all__ = ["JsonSchema", "model_schema", "rule_problems", "structural"]

JsonSchema = dict[str, Any]
_KEPT = (
    "description",
    "type",
    "enum",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "maxProperties",
    "default",
    "required",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-validations",
)


def structural(schema: JsonSchema, defs: dict[str, JsonSchema]) -> JsonSchema:
    """A structural-schema copy of pydantic JSON ``schema``, whose ``$ref``s point into ``defs``."""
    if "$ref" in schema:
        target = structural(defs[schema["$ref"].rsplit("/", 1)[1]], defs)
        return _merged(target, _kept(schema))
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return _merged(structural(schema["allOf"][0], defs), _kept(schema))
    if "anyOf" in schema:
        return _any_of(schema, defs)
    out = _kept(schema)
    if "properties" in schema:
        out["properties"] = {k: _property(v, defs) for k, v in schema["properties"].items()}
    if "items" in schema:
        out["items"] = structural(schema["items"], defs)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        out["additionalProperties"] = structural(extra, defs)
    elif extra is True and "properties" not in schema:
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def model_schema(model: type[BaseModel]) -> JsonSchema:
    """The structural schema of ``model``, with camelCase property names (a new copy)."""
    schema = model.model_json_schema(by_alias=True)
    # A copy sharing nothing: pydantic shares the parts of a type used twice (YAML would
    # write them as aliases).
    copied: JsonSchema = json.loads(json.dumps(structural(schema, schema.get("$defs", {}))))
    return copied


def rule_problems(model: type[BaseModel], value: Any, path: str = "") -> Iterator[Problem]:
    """A `Problem` for each CEL rule of ``model``'s schema that its wire ``value`` breaks.

    Every rule of every node present in ``value`` (defaults filled in, as `wire` gives it) is
    evaluated and reported at the node's path below ``path``, as the apiserver reports it.
    """
    return _node_problems(_cached_schema(model), value, path)


@functools.cache
def _cached_schema(model: type[BaseModel]) -> JsonSchema:
    return model_schema(model)


def _node_problems(schema: JsonSchema, value: Any, path: str) -> Iterator[Problem]:
    for rule in schema.get("x-kubernetes-validations", ()):
        message = failed_message(rule, value)
        if message is not None:
            yield Problem(path or "(root)", message)
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, child in value.items():
            where = f"{path}.{key}" if path else str(key)
            if key in properties:
                yield from _node_problems(properties[key], child, where)
            elif isinstance(extra, dict):
                yield from _node_problems(extra, child, f"{path}[{key}]")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, child in enumerate(value):
            yield from _node_problems(schema["items"], child, f"{path}[{i}]")


def _merged(target: JsonSchema, outer: JsonSchema) -> JsonSchema:
    # A field's own rules add to those of its type (a model's, an annotated string's).
    rules = [
        *target.get("x-kubernetes-validations", ()),
        *outer.get("x-kubernetes-validations", ()),
    ]
    out = {**target, **outer}
    if rules:
        out["x-kubernetes-validations"] = rules
    return out


def _property(schema: JsonSchema, defs: dict[str, JsonSchema]) -> JsonSchema:
    out = structural(schema, defs)
    # A section with a default_factory: default it to {} so the apiserver fills in its fields.
    if "$ref" in schema and "default" not in out:
        out["default"] = {}
    return out


def _any_of(schema: JsonSchema, defs: dict[str, JsonSchema]) -> JsonSchema:
    options = [o for o in schema["anyOf"] if o.get("type") != "null"]
    types = sorted(o.get("type", "") for o in options)
    if types == ["integer", "string"]:
        out = _kept(schema)
        out["x-kubernetes-int-or-string"] = True
        return out
    if len(options) != 1:
        raise ValueError(f"no structural form for anyOf {schema['anyOf']}")
    # An optional field: the apiserver leaves it out rather than storing null.
    return _merged(structural(options[0], defs), _kept(schema))


def _kept(schema: JsonSchema) -> JsonSchema:
    out = {k: schema[k] for k in _KEPT if k in schema}
    # kube-apiserver 1.20 reads an empty-string default as null and rejects the CRD; the
    # models fill in both anyway.
    if "default" in out and out["default"] in (None, ""):
        del out["default"]
    return out
