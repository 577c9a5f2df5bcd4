"""``gpuctrl migrate`` of NVIDIA-style policies with the MIG manager (fixtures of our own in
test/data/nvidia/mig/): NVIDIA's migManager fields carried with their meaning."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from api.nvidia import from_nvidia
from api.v1alpha1 import load_cluster_policy
from gpuctrl.cli import main

FIXTURE = Path(__file__).parents[2] / "data" / "nvidia" / "mig" / "clusterpolicy-mig.yaml"


def _migrated(spec: dict[str, Any]) -> Any:
    return from_nvidia({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "spec": spec})


def test_a_configured_mig_manager_is_carried_whole(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["migrate", "-f", str(FIXTURE)]) == 0
    out, err = capsys.readouterr()
    assert err == ""  # nothing lost, no operand lacking
    manager = load_cluster_policy(yaml.safe_load(out)).spec.mig_manager
    assert (manager.repository, manager.image, manager.version) == (
        "mirror.example.com/nvidia",
        "k8s-mig-manager",
        "v0.10.0-ubuntu20.04",
    )
    assert (manager.image_pull_policy, manager.image_pull_secrets) == ("Always", ["mirror-pull"])
    assert [(v.name, v.value) for v in manager.env] == [("WITH_REBOOT", "true")]
    assert manager.config.name == "custom-mig-parted-config"
    assert manager.config.default == "all-disabled"
    assert manager.gpu_clients_config.name == "site-gpu-clients"


@pytest.mark.parametrize(
    ("section", "enabled", "name", "clients"),
    [
        # NVIDIA's sample and chart: "" names mean NVIDIA's default ConfigMaps (gpuctrl's own).
        pytest.param(
            {"enabled": True, "config": {"name": ""}, "gpuClientsConfig": {"name": ""}},
            True,
            None,
            None,
            id="nvidia-sample",
        ),
        pytest.param({"enabled": False}, False, None, None, id="disabled"),
        # NVIDIA's CRD names its own default ConfigMaps: gpuctrl's defaults stand in.
        pytest.param(
            {"config": {"name": "default-mig-parted-config", "default": "all-disabled"}}
            | {"gpuClientsConfig": {"name": "default-gpu-clients"}},
            True,
            None,
            None,
            id="nvidias-defaults-by-name",
        ),
    ],
)
def test_nvidias_shapes_of_the_section(
    section: dict[str, Any], enabled: bool, name: str | None, clients: str | None
) -> None:
    migration = _migrated({"migManager": section})
    assert migration.dropped == []
    assert migration.lacking == []
    manager = load_cluster_policy(migration.policy).spec.mig_manager
    assert (manager.enabled, manager.config.name, manager.gpu_clients_config.name) == (
        enabled,
        name,
        clients,
    )


def test_a_field_gpuctrl_lacks_is_reported() -> None:
    migration = _migrated(
        {"migManager": {"enabled": True, "hostNetwork": True, "config": {"create": True}}}
    )
    lost = {line.split(":")[0] for line in migration.dropped}
    assert lost == {"spec.migManager.hostNetwork", "spec.migManager.config.create"}
