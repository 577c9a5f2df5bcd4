"""NVIDIA's images get what NVIDIA's operator gives them: the driver, driver-manager and device
plugin containers of a default render hold every env var and host mount of
test/data/nvidia/operand-contract.yaml (a summary of NVIDIA's manifests at the pinned images),
but for the deliberate differences docs/nvidia-parity.md lists; and that table lists no
difference that is not there."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from operands_kit import EVERY_OPERAND_ENABLED
from render_kit import pod_of

ROOT = Path(__file__).resolve().parents[3]
CONTRACT = yaml.safe_load((ROOT / "test" / "data" / "nvidia" / "operand-contract.yaml").read_text())
PARITY = ROOT / "docs" / "nvidia-parity.md"


def _containers(operand: str) -> dict[str, dict[str, Any]]:
    """The containers (init ones too) of ``operand``'s DaemonSet in a default render
    (`render_kit.pod_of`) with every operand enabled, by name, each with its pod's volumes."""
    spec = pod_of(operand, EVERY_OPERAND_ENABLED)
    volumes = {v["name"]: v for v in spec.get("volumes") or ()}
    return {
        c["name"]: {**c, "volumes": volumes}
        for kind in ("initContainers", "containers")
        for c in spec.get(kind) or ()
    }


def _mount(container: Mapping[str, Any], path: str) -> dict[str, Any] | None:
    """The mount at ``path`` in the contract's terms, None when there is none."""
    for mount in container.get("volumeMounts") or ():
        if mount["mountPath"] != path:
            continue
        volume = container["volumes"][mount["name"]]
        found: dict[str, Any] = {}
        if "hostPath" in volume:
            found["host"] = volume["hostPath"]["path"]
        if "configMap" in volume:
            found["configMap"] = True
        if mount.get("readOnly"):
            found["readOnly"] = True
        if mount.get("mountPropagation"):
            found["propagation"] = mount["mountPropagation"]
        return found
    return None


def _env_matches(entry: Mapping[str, Any], value: str | None) -> bool:
    """Whether an env entry is the contract's: that value, or (None) one from the API."""
    return "valueFrom" in entry if value is None else entry.get("value") == value


def differences() -> Iterator[tuple[str, str, str, str]]:
    """(operand, container, item, what gpuctrl has) for each way the render differs from the
    contract."""
    for operand, containers in CONTRACT.items():
        ours = _containers(operand)
        for name, wanted in containers.items():
            container = ours.get(name)
            if container is None:
                yield operand, name, "container", "none"
                continue
            env = {e["name"]: e for e in container.get("env") or ()}
            for var, value in wanted.get("env", {}).items():
                entry = env.get(var)
                if entry is None:
                    yield operand, name, f"env {var}", "unset"
                elif not _env_matches(entry, value):
                    yield operand, name, f"env {var}", repr(entry.get("value"))
            for path, mount in wanted.get("mounts", {}).items():
                found = _mount(container, path)
                if found != mount:
                    yield operand, name, f"mount {path}", "none" if found is None else str(found)
            if wanted.get("startupProbe") and "startupProbe" not in container:
                yield operand, name, "startupProbe", "none"


def documented() -> set[tuple[str, str, str]]:
    """(operand, container, item) of each row of docs/nvidia-parity.md's table."""
    rows = re.findall(r"^\| `([^`]+)` \| `([^`]+)` \| ([^|]+?) \|", PARITY.read_text(), re.M)
    return {(operand, container, item.replace("`", "")) for operand, container, item in rows}


def test_nvidias_images_get_what_nvidias_operator_gives_them_but_the_listed_differences() -> None:
    found = {(o, c, item): ours for o, c, item, ours in differences()}
    listed = documented()
    undocumented = {key: ours for key, ours in found.items() if key not in listed}
    assert undocumented == {}, "differences from NVIDIA's manifests docs/nvidia-parity.md lacks"
    assert listed - found.keys() == set(), "docs/nvidia-parity.md lists what is no longer so"


def test_the_contract_is_read() -> None:
    # The parity test cannot pass for want of rows: the contract names the containers and
    # most of what they need, and the render meets most of it.
    items = sum(
        len(c.get("env", {})) + len(c.get("mounts", {}))
        for o in CONTRACT.values()
        for c in o.values()
    )
    assert set(CONTRACT) == {
        "driver",
        "device-plugin",
        "gpu-feature-discovery",
        "dcgm",
        "dcgm-exporter",
        "mig-manager",
        "mps-control-daemon",
    }
    assert items > 40
    assert len(documented()) < items / 4
