"""The operands start in NVIDIA's order, through NVIDIA's status files: the toolkit validates
the driver first, the device plugin (and GPU feature discovery) waits for the validator's
toolkit check and starts with the
driver's roots from ``driver-ready``, and the driver container is started once its probe finds
the module loaded and nvidia-smi answering. The scripts run here as the kubelet runs them, on
a temporary folder standing in for the node's."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from render_kit import pod_of

from api.v1alpha1 import NVIDIA_IMAGES
from controllers.render._agents import VALIDATOR_STATUS_DIR
from gpuctrl.cli import main


def _on_node(text: str, node: Path) -> str:
    """``text`` with the node's folders under ``node`` (as a sandbox would show them)."""
    for folder in ("/run/nvidia", "/sys/module"):
        text = text.replace(folder, f"{node}{folder}")
    return text


def test_nvidias_status_folder_is_the_one_every_operand_shares() -> None:
    assert VALIDATOR_STATUS_DIR == "/run/nvidia/validations"
    validator = pod_of("validator")
    paths = {v["hostPath"]["path"] for v in validator["volumes"] if "hostPath" in v}
    assert VALIDATOR_STATUS_DIR in paths


def test_the_toolkit_validates_the_driver_before_it_installs_anything(tmp_path: Path) -> None:
    pod = pod_of("toolkit")
    first, *_ = pod["initContainers"]
    assert first["name"] == "driver-validation"
    assert first["command"] == ["gpuctrl"]
    args = first["args"]
    assert args[:3] == ["validate", "driver", "--wait"]
    mounts = {m["mountPath"]: m for m in first["volumeMounts"]}
    assert mounts[args[args.index("--host-root") + 1]].get("readOnly") is True
    assert args[args.index("--output-dir") + 1] == VALIDATOR_STATUS_DIR
    # The same command line on a node folder: it passes, and writes NVIDIA's driver-ready env.
    host = tmp_path / "host"
    (host / "usr" / "bin").mkdir(parents=True)
    local = [
        *args[:2],
        "--output-dir",
        str(tmp_path / "validations"),
        "--host-root",
        "/",
        "--driver-root",
        str(tmp_path / "none"),
    ]
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho GPU 0\n")
    smi.chmod(0o755)
    path = os.environ["PATH"]
    os.environ["PATH"] = f"{smi.parent}{os.pathsep}{path}"
    try:
        assert main(local) == 0
    finally:
        os.environ["PATH"] = path
    text = (tmp_path / "validations" / "driver-ready").read_text()
    assert text.startswith("IS_HOST_DRIVER=true\nNVIDIA_DRIVER_ROOT=/\n")


@pytest.mark.parametrize("operand", ["device-plugin", "gpu-feature-discovery"])
def test_the_device_plugin_and_gfd_wait_for_the_toolkit_check(operand: str, tmp_path: Path) -> None:
    pod = pod_of(operand)
    [gate] = pod["initContainers"]
    assert gate["name"] == "toolkit-validation"
    [mount] = gate["volumeMounts"]
    assert mount["mountPath"] == VALIDATOR_STATUS_DIR
    script = _on_node(gate["args"][0], tmp_path)
    log = tmp_path / "gate.log"
    with log.open("w") as out:
        waiting = subprocess.Popen([*gate["command"], script], stdout=out)
        try:
            time.sleep(1)
            assert waiting.poll() is None, "it must wait while toolkit-ready is missing"
            ready = tmp_path / "run" / "nvidia" / "validations" / "toolkit-ready"
            ready.parent.mkdir(parents=True)
            ready.write_text("")
            assert waiting.wait(timeout=15) == 0
        finally:
            waiting.kill()
            waiting.wait()
    assert "waiting for the container toolkit" in log.read_text()


@pytest.mark.parametrize("driver_ready", [True, False], ids=["driver-ready", "none-yet"])
def test_the_device_plugin_starts_with_the_drivers_roots(
    tmp_path: Path, driver_ready: bool
) -> None:
    spec = {"devicePlugin": {"args": ["--fail-on-init-error=true"]}}
    [container] = pod_of("device-plugin", spec)["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert env["PASS_DEVICE_SPECS"] == env["FAIL_ON_INIT_ERROR"] == "true"
    assert env["DEVICE_LIST_STRATEGY"] == "cdi-annotations,cdi-cri"
    assert env["DEVICE_ID_STRATEGY"] == "uuid"
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/host"]["readOnly"]
    assert mounts["/run/nvidia"]["readOnly"]
    assert "/var/run/cdi" in mounts
    validations = tmp_path / "run" / "nvidia" / "validations"
    validations.mkdir(parents=True)
    if driver_ready:
        lines = "IS_HOST_DRIVER=false\nNVIDIA_DRIVER_ROOT=/run/nvidia/driver\n"
        (validations / "driver-ready").write_text(lines)
    plugin = tmp_path / "bin" / "nvidia-device-plugin"
    plugin.parent.mkdir()
    plugin.write_text('#!/bin/sh\necho "args: $*"\necho "root: ${NVIDIA_DRIVER_ROOT:-unset}"\n')
    plugin.chmod(0o755)
    command, args = container["command"], container["args"]
    done = subprocess.run(
        [*command, _on_node(args[0], tmp_path), *args[1:]],
        capture_output=True,
        text=True,
        check=True,
        env={**env, "PATH": f"{plugin.parent}:/usr/bin:/bin"},
    )
    assert "args: --fail-on-init-error=true" in done.stdout
    expected = "/run/nvidia/driver" if driver_ready else "unset"
    assert f"root: {expected}" in done.stdout


def _probe(pod: dict[str, Any]) -> list[str]:
    [container] = pod["containers"]
    probe = container["startupProbe"]
    assert probe["failureThreshold"] * probe["periodSeconds"] >= 1200  # a driver build's time
    command: list[str] = probe["exec"]["command"]
    return command


def test_the_driver_is_started_once_its_module_is_loaded_and_nvidia_smi_answers(
    tmp_path: Path,
) -> None:
    pod = pod_of("driver")
    command = _probe(pod)
    script = _on_node(command[-1], tmp_path)
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho GPU 0\n")
    smi.chmod(0o755)
    env = {"PATH": f"{smi.parent}:/usr/bin:/bin"}
    ready = tmp_path / "run" / "nvidia" / "validations" / ".driver-ctr-ready"

    not_loaded = subprocess.run([*command[:-1], script], env=env, capture_output=True, text=True)
    assert not_loaded.returncode != 0
    assert "not loaded" in not_loaded.stdout
    assert not ready.exists()

    module = tmp_path / "sys" / "module" / "nvidia"
    module.mkdir(parents=True)
    (module / "refcnt").write_text("1\n")
    smi.write_text("#!/bin/sh\nexit 9\n")
    assert subprocess.run([*command[:-1], script], env=env, capture_output=True).returncode != 0
    assert not ready.exists()

    smi.write_text("#!/bin/sh\necho GPU 0\n")
    subprocess.run([*command[:-1], script], env=env, capture_output=True, check=True)
    # What NVIDIA's validator reads of it: the optional driver components, as YAML booleans.
    assert yaml.safe_load(ready.read_text()) == {
        "GDRCOPY_ENABLED": False,
        "GDS_ENABLED": False,
        "GPU_DIRECT_RDMA_ENABLED": False,
    }
    [container] = pod["containers"]
    assert container["lifecycle"]["preStop"]["exec"]["command"][-1].endswith(".driver-ctr-ready")


def test_the_driver_gets_the_host_folders_nvidia_shares_with_it() -> None:
    pod = pod_of("driver")
    paths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert {
        "/run/nvidia-fabricmanager",
        "/run/nvidia-topologyd",
        "/run/mellanox/drivers",
        "/run/mellanox/drivers/usr/src",
        "/sys/module/firmware_class/parameters/path",
        "/run/nvidia/driver/lib/firmware",
    } <= paths


def test_nvidias_driver_manager_runs_before_the_driver_container() -> None:
    pod = pod_of("driver")
    [manager] = pod["initContainers"]
    assert manager["name"] == "k8s-driver-manager"
    assert manager["image"] == NVIDIA_IMAGES["driverManager"].reference
    assert (manager["command"], manager["args"]) == (["driver-manager"], ["uninstall_driver"])
    env = {e["name"]: e.get("value") for e in manager["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"  # runc for it, never the NVIDIA runtime
    assert (env["ENABLE_GPU_POD_EVICTION"], env["ENABLE_AUTO_DRAIN"]) == ("true", "false")
    mounts = {m["mountPath"]: m for m in manager["volumeMounts"]}
    assert mounts["/host"]["readOnly"] is True
    assert mounts["/run/nvidia"]["mountPropagation"] == "Bidirectional"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert all(m["name"] in volumes for m in manager["volumeMounts"])


def test_the_driver_managers_image_and_env_are_the_policys() -> None:
    manager = {
        "repository": "mirror.example.com/nvidia",
        "version": "v0.9.0",
        "imagePullPolicy": "Always",
        "env": [
            {"name": "ENABLE_AUTO_DRAIN", "value": "true"},
            {"name": "DRAIN_TIMEOUT_SECONDS", "value": "300s"},
        ],
    }
    [init] = pod_of("driver", {"driver": {"manager": manager}})["initContainers"]
    assert init["image"] == "mirror.example.com/nvidia/k8s-driver-manager:v0.9.0"
    assert init["imagePullPolicy"] == "Always"
    names = [e["name"] for e in init["env"]]
    assert len(names) == len(set(names))  # the policy's value replaces the default, in place
    env = {e["name"]: e.get("value") for e in init["env"]}
    assert (env["ENABLE_AUTO_DRAIN"], env["DRAIN_TIMEOUT_SECONDS"]) == ("true", "300s")
    assert env["ENABLE_GPU_POD_EVICTION"] == "true"
