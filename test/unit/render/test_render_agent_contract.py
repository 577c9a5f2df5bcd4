"""The rendered DaemonSets run gpuctrl's node agents with command lines the agents accept.

For each sample (and one policy setting every containerd option), every container of
gpuctrl's image has its ``args`` expanded as the kubelet does (``$(VAR)`` from the container's
env, downward-API fields filled with plausible values) and parsed by the agent's own parser
(`gpuctrl.cli` subcommand module's ``configure``); the env and mounts the agent needs are there.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from api.v1alpha1 import ValidatorWorkloads
from controllers.render import render
from controllers.render._inputs import read_inputs
from gpuctrl.cli import SUBCOMMANDS
from gpuctrl.validator._status import status_path
from gpuctrl.validator.cli import POD_NAME_ENV, POD_UID_ENV

ROOT = Path(__file__).parents[3]
SAMPLES = sorted((ROOT / "config" / "samples").glob("clusterpolicy-*.yaml"))
NODES = ROOT / "test" / "data" / "render" / "nodes.yaml"
FIELDS = {
    "spec.nodeName": "gpu-node-1",
    "metadata.namespace": "gpuctrl",
    "metadata.name": "gpuctrl-validator-x7k2p",
    "metadata.uid": "3f1c3a52-4c52-4a44-9d1e-0c7c2d5d3a10",
}
ALL_CONTAINERD = {
    "distribution": "k3s",
    "configPath": "/etc/k3s/config.toml.tmpl",
    "socketPath": "/run/k3s.sock",
    "setAsDefault": True,
    "dropInMode": "always",
    "restartMode": "none",
}
_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _policy_files(tmp_path: Path) -> dict[str, Path]:
    files = {sample.stem: sample for sample in SAMPLES}
    policy = yaml.safe_load(
        (ROOT / "config" / "samples" / "clusterpolicy-minimal.yaml").read_text()
    )
    policy["spec"].setdefault("toolkit", {})["containerd"] = ALL_CONTAINERD
    files["every-containerd-option"] = tmp_path / "every-containerd-option.yaml"
    files["every-containerd-option"].write_text(yaml.safe_dump(policy))
    return files


def _agent_containers(stem: str, tmp_path: Path) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(pod spec, container) of every container running gpuctrl's image with args (not the
    device plugin's shell gate, which only waits for a file)."""
    given = read_inputs([_policy_files(tmp_path)[stem], NODES], "gpuctrl")
    found = []
    for obj in render(given.policy, given.facts):
        if obj["kind"] != "DaemonSet":
            continue
        pod = obj["spec"]["template"]["spec"]
        for container in pod.get("initContainers", []) + pod["containers"]:
            image_name = container["image"].rsplit("/", 1)[-1].split(":")[0]
            if (
                image_name == "gpuctrl"
                and "args" in container
                and container["command"] != ["sh", "-c"]
            ):
                found.append((pod, container))
    return found


def _environment(container: dict[str, Any]) -> dict[str, str]:
    """The container's env as the kubelet sets it (later entries may reference earlier ones)."""
    values: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            values[var["name"]] = _expand(var["value"], values)
        else:
            values[var["name"]] = FIELDS[var["valueFrom"]["fieldRef"]["fieldPath"]]
    return values


def _expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: defined names replaced, ``$$`` -> ``$``, rest kept."""

    def one(match: re.Match[str]) -> str:
        if match[0] == "$$":
            return "$"
        return env.get(match[1], match[0])

    return _REFERENCE.sub(one, text)


def _parse(argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed as `gpuctrl.cli.main` would; fails the test on a usage error."""
    by_name = {sub.name: sub for sub in SUBCOMMANDS}
    assert argv[0] in by_name, f"{argv[0]!r} is no gpuctrl subcommand"
    parser = argparse.ArgumentParser(prog=f"gpuctrl {argv[0]}")
    importlib.import_module(by_name[argv[0]].module).configure(parser)
    try:
        return parser.parse_args(argv[1:])
    except SystemExit as exit_:
        raise AssertionError(f"gpuctrl rejects {argv}") from exit_


def _host_path_of(pod: dict[str, Any], container: dict[str, Any], path: Path) -> str | None:
    """The host folder ``path`` is in, through the container's hostPath mounts (None: none)."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    for mount in container.get("volumeMounts", []):
        host = volumes[mount["name"]].get("hostPath")
        inside = Path(mount["mountPath"])
        if host and (path == inside or inside in path.parents):
            return str(Path(host["path"]) / path.relative_to(inside))
    return None


STEMS = [*(s.stem for s in SAMPLES), "every-containerd-option"]
_NOT_CHECKS = ("toolkit", "node-status-exporter")  # agents that run no check of the validator's


@pytest.mark.parametrize("stem", STEMS)
def test_every_agent_command_line_parses(stem: str, tmp_path: Path) -> None:
    containers = _agent_containers(stem, tmp_path)
    # The toolkit agent, its driver check, the validator's four checks (and the node status
    # exporter where the sample turns it on).
    exporter = [c for _, c in containers if c["name"] == "node-status-exporter"]
    assert len(exporter) == (stem == "clusterpolicy-monitoring")
    assert len(containers) == 6 + len(exporter)
    for _, container in containers:
        # gpuctrl itself, not whatever entrypoint an image (a validator.image override) has.
        assert container.get("command") == ["gpuctrl"], container["name"]
        argv = [_expand(arg, _environment(container)) for arg in container["args"]]
        assert not [arg for arg in argv if "$(" in arg], f"undefined reference in {argv}"
        _parse(argv)


@pytest.mark.parametrize("stem", STEMS)
def test_toolkit_sees_the_hosts_root_and_the_policys_options(stem: str, tmp_path: Path) -> None:
    [(pod, container)] = [c for c in _agent_containers(stem, tmp_path) if c[1]["name"] == "toolkit"]
    args = _parse(container["args"])
    assert (args.action, args.runtime) == ("run", "containerd")
    assert _host_path_of(pod, container, Path(args.host_root)) == "/"
    assert pod["hostPID"] is True  # --restart-mode signal sends SIGHUP to the host's containerd
    assert args.runtime_dir == "/usr/local/nvidia/toolkit"  # a host path, used as given
    if stem == "every-containerd-option":
        chosen = (args.distribution, args.config, args.socket, args.drop_in_mode)
        assert chosen == ("k3s", "/etc/k3s/config.toml.tmpl", "/run/k3s.sock", "always")
        assert (args.restart_mode, args.set_as_default) == ("none", True)
    else:  # unset: detected on the node
        assert (args.distribution, args.config, args.socket, args.restart_mode) == (None,) * 4


@pytest.mark.parametrize("stem", STEMS)
def test_validator_checks_get_their_node_namespace_owner_and_overrides(
    stem: str, tmp_path: Path
) -> None:
    checks = {
        c["name"]: (pod, c)
        for pod, c in _agent_containers(stem, tmp_path)
        if c["name"] not in _NOT_CHECKS
    }
    assert list(checks) == [f"{n}-validation" for n in ("driver", "toolkit", "cuda", "plugin")]
    pod, driver = checks["driver-validation"]
    args = _parse(driver["args"])
    assert _host_path_of(pod, driver, args.host_root) == "/"
    assert _host_path_of(pod, driver, args.driver_root) == "/run/nvidia/driver"
    for name in ("cuda-validation", "plugin-validation"):
        _, container = checks[name]
        env = _environment(container)
        assert {POD_NAME_ENV, POD_UID_ENV} <= set(env)
        args = _parse([_expand(arg, env) for arg in container["args"]])
        assert (args.node, args.namespace) == (
            FIELDS["spec.nodeName"],
            FIELDS["metadata.namespace"],
        )
        workloads = ValidatorWorkloads.model_validate(json.loads(args.overrides))
        assert workloads.config_map_name
        assert workloads.runtime_class_name
        assert (args.image, args.image_pull_policy) == (
            workloads.image,
            workloads.image_pull_policy,
        )


@pytest.mark.parametrize("stem", STEMS)
def test_every_check_writes_its_status_into_one_host_folder(stem: str, tmp_path: Path) -> None:
    found = [
        (pod, c) for pod, c in _agent_containers(stem, tmp_path) if c["name"] not in _NOT_CHECKS
    ]
    host_folders = set()
    for pod, container in found:
        args = _parse([_expand(arg, _environment(container)) for arg in container["args"]])
        host = _host_path_of(pod, container, args.output_dir)
        assert host is not None, f"{container['name']} writes {args.output_dir} into its own fs"
        volume = next(v for v in pod["volumes"] if v["hostPath"]["path"] == host)
        assert volume["hostPath"]["type"] == "DirectoryOrCreate"
        host_folders.add(host)
        [main] = pod["containers"]  # the container that stays up sees the same files
        assert _host_path_of(pod, main, args.output_dir) == host
    assert len(host_folders) == 1


def test_the_node_status_exporter_reads_what_the_checks_write(tmp_path: Path) -> None:
    containers = _agent_containers("clusterpolicy-monitoring", tmp_path)
    [(pod, exporter)] = [c for c in containers if c[1]["name"] == "node-status-exporter"]
    args = _parse([_expand(arg, _environment(exporter)) for arg in exporter["args"]])
    assert (args.check, args.node, args.port) == ("metrics", FIELDS["spec.nodeName"], 8000)
    assert _host_path_of(pod, exporter, args.output_dir) == "/run/nvidia/validations"
    assert _host_path_of(pod, exporter, args.driver_root) == "/run/nvidia/driver"
    assert _host_path_of(pod, exporter, args.host_root) == "/"
    assert all(m["readOnly"] for m in exporter["volumeMounts"])  # it writes nothing


@pytest.mark.parametrize("stem", STEMS)
def test_nvidias_installer_puts_the_runtimes_where_the_agent_points(
    stem: str, tmp_path: Path
) -> None:
    [(pod, agent)] = [c for c in _agent_containers(stem, tmp_path) if c[1]["name"] == "toolkit"]
    runtime_dir = Path(_parse(agent["args"]).runtime_dir)
    [installer] = [c for c in pod["initContainers"] if c["name"] == "runtime-install"]
    assert installer["image"].rsplit("/", 1)[-1].startswith("container-toolkit:")  # NVIDIA's
    env = _environment(installer)
    # NVIDIA's installer (v1.17 tools/container/nvidia-toolkit) installs into $ROOT/toolkit.
    assert Path(env["ROOT"]) / "toolkit" == runtime_dir
    assert Path(env["RUNTIME_DIR"]) == runtime_dir  # what the script checks afterwards
    # The agent writes runtime_dir into containerd's config as a host path: the install lands
    # there, and the containerd config the installer writes lands nowhere on the host.
    assert _host_path_of(pod, installer, runtime_dir) == str(runtime_dir)
    assert _host_path_of(pod, installer, Path(env["RUNTIME_CONFIG"])) is None
    assert (env["NO_DAEMON"], env["RUNTIME_RESTART_MODE"]) == ("true", "none")


def _catches(pid: int, signal_number: int) -> bool:
    """Whether process ``pid`` has a handler for ``signal_number`` (its SigCgt mask)."""
    status = Path(f"/proc/{pid}/status").read_text()
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(mask, 16) >> (signal_number - 1) & 1)


def test_the_validators_main_container_removes_the_status_files_and_exits_0_on_sigterm(
    tmp_path: Path,
) -> None:
    """As PID 1 of its container a process without a SIGTERM handler ignores SIGTERM, and each
    deletion of the pod waits out the grace period: the container that keeps the validator
    pod up must handle it, remove the status files (no operand may trust the checks of a
    validator that is gone, as NVIDIA's preStop ensures) and exit 0."""
    given = read_inputs([SAMPLES[0], NODES], "gpuctrl")
    [daemonset] = [
        o
        for o in render(given.policy, given.facts)
        if o["kind"] == "DaemonSet" and o["metadata"]["name"] == "gpuctrl-validator"
    ]
    [main] = daemonset["spec"]["template"]["spec"]["containers"]
    script, files = main["command"][:4], main["command"][4:]
    output_dir = Path(main["volumeMounts"][-1]["mountPath"])
    assert files == [
        str(status_path(output_dir, c)) for c in ("driver", "toolkit", "cuda", "plugin")
    ]
    # Run here on files of a temporary folder instead (one of them absent), and a neighbour.
    here = [tmp_path / Path(f).name for f in files]
    for path in [*here[:3], tmp_path / "other"]:
        path.write_text("ok")
    process = subprocess.Popen([*script, *map(str, here)], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not _catches(process.pid, signal.SIGTERM) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _catches(process.pid, signal.SIGTERM), main["command"]
        assert all(p.exists() for p in here[:3])  # held until the pod goes
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
        assert not any(p.exists() for p in here)
        assert (tmp_path / "other").read_text() == "ok"
    finally:
        with contextlib.suppress(ProcessLookupError):  # the orphaned sleep, if still there
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
