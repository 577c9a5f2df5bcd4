"""CDI by default, as in NVIDIA's chart, and the toolkit's host access: what each mode renders
for NVIDIA's installer, gpuctrl's toolkit agent and NVIDIA's device plugin, and that the
agent, run with the rendered options on a node of each containerd distribution, writes only
under the folders its DaemonSet mounts read-write over the read-only host root."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from render_kit import pod_of

from api.v1alpha1 import CONTAINERD_DEFAULTS
from gpuctrl.cli import main

CONFIG = 'version = 2\n\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  snapshotter = "x"\n'


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def _container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(
        c for c in [*pod.get("initContainers", []), *pod["containers"]] if c["name"] == name
    )


def _agent_args(spec: dict[str, Any] | None = None) -> list[str]:
    args: list[str] = _container(pod_of("toolkit", spec), "toolkit")["args"]
    return args


def test_cdi_is_on_by_default_through_installer_agent_and_device_plugin() -> None:
    pod = pod_of("toolkit")
    installer = _container(pod, "runtime-install")
    env = _env(installer)
    assert (env["CDI_ENABLED"], env["NVIDIA_CONTAINER_RUNTIME_MODE"]) == ("true", "cdi")
    assert env["CDI_OUTPUT_DIR"] == "/var/run/cdi"
    assert installer["securityContext"] == {"privileged": True}  # it creates device nodes
    cdi = next(v for v in pod["volumes"] if v["name"] == "cdi-root")
    assert cdi["hostPath"] == {"path": "/var/run/cdi", "type": "DirectoryOrCreate"}
    # containerd's own CDI support on; the default runtime left alone, as NVIDIA's operator does.
    args = _agent_args()
    assert "--enable-cdi" in args
    assert "--set-as-default" not in args
    plugin = _env(_container(pod_of("device-plugin"), "nvidia-device-plugin"))
    assert plugin["DEVICE_LIST_STRATEGY"] == "cdi-annotations,cdi-cri"
    assert (plugin["CDI_ENABLED"], plugin["CDI_ANNOTATION_PREFIX"]) == ("true", "cdi.k8s.io/")
    assert plugin["NVIDIA_CDI_HOOK_PATH"] == "/usr/local/nvidia/toolkit/nvidia-cdi-hook"


def test_without_cdi_the_nvidia_runtime_is_the_default_as_nvidias_installer_makes_it() -> None:
    spec = {"cdi": {"enabled": False}, "toolkit": {"installDir": "/opt/nv"}}
    installer = _container(pod_of("toolkit", spec), "runtime-install")
    env = _env(installer)
    assert not {"CDI_ENABLED", "NVIDIA_CONTAINER_RUNTIME_MODE", "CDI_OUTPUT_DIR"} & set(env)
    assert "securityContext" not in installer
    assert "/var/run/cdi" not in {m["mountPath"] for m in installer["volumeMounts"]}
    args = _agent_args(spec)
    assert "--set-as-default" in args
    assert "--enable-cdi" not in args
    plugin = _env(_container(pod_of("device-plugin", spec), "nvidia-device-plugin"))
    assert plugin["DEVICE_LIST_STRATEGY"] == "envvar"
    assert not {"CDI_ENABLED", "CDI_ANNOTATION_PREFIX", "NVIDIA_CDI_HOOK_PATH"} & set(plugin)


@pytest.mark.parametrize(
    ("cdi", "explicit", "expected"),
    [(True, True, True), (True, False, False), (False, False, False), (False, True, True)],
)
def test_an_explicit_set_as_default_wins(cdi: bool, explicit: bool, expected: bool) -> None:
    spec = {"cdi": {"enabled": cdi}, "toolkit": {"containerd": {"setAsDefault": explicit}}}
    assert ("--set-as-default" in _agent_args(spec)) is expected


def test_the_cdi_hook_path_needs_the_toolkit() -> None:
    plugin = _env(
        _container(pod_of("device-plugin", {"toolkit": {"enabled": False}}), "nvidia-device-plugin")
    )
    assert plugin["CDI_ENABLED"] == "true"
    assert "NVIDIA_CDI_HOOK_PATH" not in plugin


@pytest.mark.parametrize(
    ("strategy", "monitor"), [("single", "all"), ("mixed", "all"), ("none", None)]
)
def test_the_mig_strategy_reaches_the_device_plugin(strategy: str, monitor: str | None) -> None:
    spec = {"mig": {"strategy": strategy}}
    plugin = _env(_container(pod_of("device-plugin", spec), "nvidia-device-plugin"))
    assert plugin["MIG_STRATEGY"] == strategy
    assert plugin.get("NVIDIA_MIG_MONITOR_DEVICES") == monitor


def test_mig_strategy_defaults_to_nvidias_single() -> None:
    plugin = _env(_container(pod_of("device-plugin"), "nvidia-device-plugin"))
    assert plugin["MIG_STRATEGY"] == "single"


def test_cri_o_is_configured_through_its_drop_in_folder() -> None:
    spec = {
        "operator": {"defaultRuntime": "crio"},
        "toolkit": {"containerd": {"distribution": "k3s"}},
    }
    args = _agent_args(spec)
    assert args[args.index("--runtime") + 1] == "crio"
    assert "--distribution" not in args
    assert "--enable-cdi" not in args
    assert _writable(pod_of("toolkit", spec)) == {
        "/var/lib/gpuctrl/toolkit",
        "/etc/crio/crio.conf.d",
    }


def _writable(pod: dict[str, Any]) -> set[str]:
    """The host folders the toolkit agent's container may write: its read-write hostPath mounts
    (each mounted at its host path under /host)."""
    agent = _container(pod, "toolkit")
    volumes = {v["name"]: v for v in pod["volumes"]}
    found = set()
    for mount in agent["volumeMounts"]:
        if mount.get("readOnly"):
            continue
        host = volumes[mount["name"]]["hostPath"]["path"]
        assert mount["mountPath"] == "/host" + host, "a host folder is seen at its host path"
        found.add(host)
    return found


def test_the_host_root_is_read_only_for_every_container_of_the_toolkit() -> None:
    pod = pod_of("toolkit")
    for container in [*pod["initContainers"], *pod["containers"]]:
        for mount in container["volumeMounts"]:
            if mount["name"] == "host-root":
                assert mount["readOnly"] is True, container["name"]


DISTRIBUTIONS = sorted(CONTAINERD_DEFAULTS)


@pytest.mark.parametrize("explicit", [False, True], ids=["detected", "named"])
@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_the_agent_writes_only_under_its_read_write_mounts(
    distribution: str, explicit: bool, tmp_path: Path
) -> None:
    root = tmp_path / "host"
    config = str(CONTAINERD_DEFAULTS[distribution].config_path)  # type: ignore[index]
    (root / config.lstrip("/")).parent.mkdir(parents=True)
    (root / config.lstrip("/")).write_text(CONFIG)
    (root / "etc").mkdir(exist_ok=True)
    spec = {"toolkit": {"containerd": {"distribution": distribution}}} if explicit else None
    pod = pod_of("toolkit", spec)
    writable = _writable(pod)
    for folder in writable:  # the kubelet creates them (DirectoryOrCreate)
        (root / folder.lstrip("/")).mkdir(parents=True, exist_ok=True)
    before = _files(root)
    args = _container(pod, "toolkit")["args"]
    assert args[:2] == ["toolkit", "run"]
    options = _without(args[2:], "--ready-file")
    options[options.index("--host-root") + 1] = str(root)
    assert main(["toolkit", "install", *options, "--restart-mode", "none"]) == 0
    changed = {path for path, stamp in _files(root).items() if before.get(path) != stamp}
    assert any(p.endswith(config) for p in changed), "the config was edited"
    outside = [p for p in changed if not any(_under(p, w) for w in writable)]
    assert outside == [], f"written outside the read-write mounts {sorted(writable)}"


def _without(args: list[str], option: str) -> list[str]:
    at = args.index(option)
    return [*args[:at], *args[at + 2 :]]


def _files(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under ``root`` by host path, with its content stamp."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(folder) / name
            stat = path.lstat()
            found["/" + str(path.relative_to(root))] = (stat.st_mtime_ns, stat.st_size)
    return found


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")
