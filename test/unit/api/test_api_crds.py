"""The committed CRDs are what the models generate, and their schemas are structural."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from api.crdgen import crd_files

CRD_DIR = Path(__file__).parents[3] / "config" / "crd"
GENERATED = crd_files()


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_committed_crd_matches_models(name: str) -> None:
    committed = CRD_DIR / name
    assert committed.exists(), f"{committed} missing: run `make manifests`"
    assert committed.read_text() == GENERATED[name], f"{name} is stale: run `make manifests`"


def test_no_stray_crd_files() -> None:
    assert sorted(p.name for p in CRD_DIR.glob("*.yaml")) == sorted(GENERATED)


def _nodes(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = [(path, schema)]
    for key, child in schema.get("properties", {}).items():
        found += _nodes(child, f"{path}.{key}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            found += _nodes(schema[key], f"{path}[]")
    return found


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_schema_is_structural(name: str) -> None:
    crd = yaml.safe_load(GENERATED[name])
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _nodes(schema):
        assert not {"anyOf", "oneOf", "allOf", "$ref", "title"} & node.keys(), path
        assert "type" in node or node.get("x-kubernetes-int-or-string"), path
        assert node.get("default", 0) not in (None, ""), path
        if path.count(".") > 1 and not path.endswith("[]"):
            assert node.get("description"), f"{path} has no description"


def test_cluster_policy_crd_shape() -> None:
    crd = yaml.safe_load(GENERATED["gpuctrl.io_clusterpolicies.yaml"])
    version = crd["spec"]["versions"][0]
    assert crd["spec"]["scope"] == "Cluster"
    assert version["subresources"] == {"status": {}}
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert status["state"]["enum"] == ["ready", "notReady", "ignored"]
    assert status["conditions"]["x-kubernetes-list-type"] == "map"
    assert status["conditions"]["x-kubernetes-list-map-keys"] == ["type"]
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == ["State", "Ready", "Namespace", "Age"]
    assert status["readyNodes"]["type"] == "string"
