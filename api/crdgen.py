"""Generate the CustomResourceDefinitions from the pydantic models (``make manifests``).

The models are the single source of truth: `crd_files` turns each kind's JSON schema into a
structural ``openAPIV3Schema`` (references inlined, optional fields plain, ``int | str`` as
int-or-string, free-form maps preserved) and returns the YAML text of each CRD by file name.
``python -m api.crdgen DIR`` writes them into DIR.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from api.v1alpha1 import ClusterPolicySpec, ClusterPolicyStatus, PodPolicySpec, PodPolicyStatus
from api.v1alpha1._clusterpolicy import GROUP, VERSION

__all__ = ["crd_files", "main", "structural"]

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
    "default",
    "required",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
)


@dataclass(frozen=True)
class Kind:
    """A custom resource kind and the models of its spec and status."""

    kind: str
    plural: str
    description: str
    spec: type[BaseModel]
    status: type[BaseModel] | None
    columns: tuple[dict[str, str], ...]


KINDS = (
    Kind(
        kind="ClusterPolicy",
        plural="clusterpolicies",
        description="The GPU stack gpuctrl deploys. Only the oldest ClusterPolicy is honoured.",
        spec=ClusterPolicySpec,
        status=ClusterPolicyStatus,
        columns=(
            {"name": "State", "type": "string", "jsonPath": ".status.state"},
            {"name": "Ready", "type": "string", "jsonPath": ".status.readyNodes"},
            {"name": "Namespace", "type": "string", "jsonPath": ".status.namespace"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ),
    ),
    Kind(
        kind="PodPolicy",
        plural="podpolicies",
        description="What gpuctrl's admission webhook sets on the pods it targets.",
        spec=PodPolicySpec,
        status=PodPolicyStatus,
        columns=(
            {"name": "Meshes", "type": "string", "jsonPath": ".spec.meshes"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ),
    ),
)


def structural(schema: JsonSchema, defs: dict[str, JsonSchema]) -> JsonSchema:
    """A structural-schema copy of pydantic JSON ``schema``, whose ``$ref``s point into ``defs``."""
    if "$ref" in schema:
        target = structural(defs[schema["$ref"].rsplit("/", 1)[1]], defs)
        return {**target, **_kept(schema)}
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return {**structural(schema["allOf"][0], defs), **_kept(schema)}
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
    return {**structural(options[0], defs), **_kept(schema)}


def _kept(schema: JsonSchema) -> JsonSchema:
    out = {k: schema[k] for k in _KEPT if k in schema}
    # kube-apiserver 1.20 reads an empty-string default as null and rejects the CRD; the
    # models fill in both anyway.
    if "default" in out and out["default"] in (None, ""):
        del out["default"]
    return out


def _model_schema(model: type[BaseModel]) -> JsonSchema:
    schema = model.model_json_schema(by_alias=True)
    return structural(schema, schema.get("$defs", {}))


def crd(kind: Kind) -> dict[str, Any]:
    """The CustomResourceDefinition of ``kind``."""
    properties: dict[str, Any] = {
        "apiVersion": {"type": "string", "description": "gpuctrl.io/v1alpha1"},
        "kind": {"type": "string", "description": kind.kind},
        "metadata": {"type": "object"},
        "spec": {**_model_schema(kind.spec), "default": {}},
    }
    version: dict[str, Any] = {"name": VERSION, "served": True, "storage": True}
    if kind.status is not None:
        properties["status"] = _model_schema(kind.status)
        version["subresources"] = {"status": {}}
    version["additionalPrinterColumns"] = list(kind.columns)
    version["schema"] = {
        "openAPIV3Schema": {
            "type": "object",
            "description": kind.description,
            "properties": properties,
        }
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{kind.plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind.kind,
                "listKind": f"{kind.kind}List",
                "plural": kind.plural,
                "singular": kind.kind.lower(),
                "categories": ["gpuctrl"],
            },
            "scope": "Cluster",
            "versions": [version],
        },
    }


def crd_files() -> dict[str, str]:
    """The YAML text of every CRD, by file name (``<group>_<plural>.yaml``)."""
    header = (
        "# Generated by `make manifests` (python -m api.crdgen) from api/v1alpha1. Do not edit.\n"
    )
    return {
        f"{GROUP}_{kind.plural}.yaml": header
        + yaml.safe_dump(crd(kind), sort_keys=False, width=100)
        for kind in KINDS
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Write every CRD into the folder named on the command line."""
    parser = argparse.ArgumentParser(prog="python -m api.crdgen", description=__doc__)
    parser.add_argument("directory", type=Path, help="where to write the CRD files")
    args = parser.parse_args(argv)
    args.directory.mkdir(parents=True, exist_ok=True)
    for name, text in crd_files().items():
        (args.directory / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
