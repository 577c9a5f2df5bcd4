"""`make run` end to end: local cluster, CRDs, `gpuctrl manager` keeping the operands converged
(labels, DaemonSets, a roll after a spec edit, status, metrics), the real toolkit and validator
agents on each node behind an Istio-like injector (the table rows, the node's config restored
once the policy is deleted), clean Ctrl-C. Every command of README.md's quick start runs as
written, in a shell of its own, in the repository's folder, and does what the README says."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from e2e_stack import containerd_runtimes
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient

from api.crdgen import crd_files
from gpuctrl.runtime import ApiError, Client, Resource, new_api_client
from gpuctrl.testing import NODE_CONTAINERD_CONFIG, ControlPlane, eventually
from gpuctrl.validator import DEFAULT_OUTPUT_DIR

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 180.0
ADDRESS_VARIABLES = (
    "GPUCTRL_METRICS_ADDRESS",
    "GPUCTRL_PROBE_ADDRESS",
    "GPUCTRL_WEBHOOK_ADDRESS",
    "GPUCTRL_WEBHOOK_METRICS_ADDRESS",
    "GPUCTRL_WEBHOOK_PROBE_ADDRESS",
)


@dataclass
class Run:
    """A running `make run`: the process, the kubeconfig, the manager's metrics address and
    the lines it printed so far (read all along: a full pipe would block its processes)."""

    process: asyncio.subprocess.Process
    kubeconfig: Path
    metrics: str
    lines: list[str]

    @property
    def output(self) -> str:
        """Everything printed so far."""
        return "".join(self.lines)

    async def printed(self, text: str, within: float = 180) -> str:
        """The output once it contains ``text``; fails naming it after ``within`` seconds."""

        async def contains() -> str:
            output = self.output
            if text in output:
                return output
            if self.process.returncode is not None:
                code = self.process.returncode
                raise RuntimeError(f"make run exited {code} before printing {text!r}:\n{output}")
            raise AssertionError(f"make run has not printed {text!r} yet:\n{output}")

        return await eventually(contains, within=within)


def _free_addresses(count: int) -> list[str]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [f"127.0.0.1:{sock.getsockname()[1]}" for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


async def _start_run(env: dict[str, str], *, via_make: bool = False) -> asyncio.subprocess.Process:
    """`hack/run.py` (what `make run` runs), or `make run` itself, with ``env``, its output on
    one pipe."""
    command = ["make", "--no-print-directory", "run"] if via_make else [
        sys.executable, str(ROOT / "hack" / "run.py"),
    ]  # fmt: skip
    return await asyncio.create_subprocess_exec(
        *command,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
        start_new_session=True,  # its manager and webhook share the group: killed with it
    )


@asynccontextmanager
async def running_make_run(
    kubeconfig: Path | None = None, namespace: str | None = None, *, via_make: bool = False
) -> AsyncIterator[Run]:
    """`hack/run.py` (what `make run` runs; with ``via_make``, `make run`) up to its 'running'
    line, the manager's metrics and probes on free loopback ports; kills it on exit."""
    env = {key: value for key, value in os.environ.items() if key != "KUBECONFIG"}
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    if namespace is not None:
        env["GPUCTRL_NAMESPACE"] = namespace
    addresses = _free_addresses(len(ADDRESS_VARIABLES))
    env.update(zip(ADDRESS_VARIABLES, addresses, strict=True))
    process = await _start_run(env, via_make=via_make)
    lines: list[str] = []

    async def read() -> None:
        assert process.stdout is not None
        async for line in process.stdout:
            lines.append(line.decode(errors="replace"))

    reader = asyncio.create_task(read())
    try:
        run = Run(process, Path(), addresses[0], lines)
        await run.printed("\nrunning; Ctrl-C", within=START_TIMEOUT)
        (kubeconfig_line,) = [line for line in lines if line.startswith("kubeconfig: ")]
        run.kubeconfig = Path(kubeconfig_line.split(": ", 1)[1].strip())
        yield run
    finally:
        # Until every holder of its stdout is gone, asyncio's wait() does not return.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
        await reader


async def _interrupt(process: asyncio.subprocess.Process) -> None:
    process.send_signal(signal.SIGINT)
    async with asyncio.timeout(30):
        assert await process.wait() == 0


async def test_make_run_brings_up_operands_and_stops_cleanly() -> None:
    async with running_make_run() as run:
        await _operands_run_then_interrupt(run)
    folder = run.kubeconfig.parent
    assert not folder.exists(), f"{folder} was left behind"
    assert not _pids_mentioning(str(folder)), "control plane processes were left running"
    for link in ("kubeconfig", "nodes", "bin/kubectl"):
        assert not (RUN_FILES / link).is_symlink(), f".run/{link} was left behind"


README = ROOT / "README.md"
QUICK_START = "## Quick start"
RUN_FILES = ROOT / ".run"
NODES = [f"gpu-node-{i}" for i in range(4)]


def quick_start_commands() -> list[str]:
    """The commands of README.md's quick start, in order: each line of its ``sh`` blocks that
    is not blank or a comment, as written."""
    section = README.read_text().split(f"\n{QUICK_START}\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```sh\n(.*?)^```", section, re.DOTALL | re.MULTILINE)
    lines = [line for block in blocks for line in block.splitlines()]
    return [line for line in lines if line.strip() and not line.lstrip().startswith("#")]


async def _shell(script: str) -> tuple[int, str]:
    """``script`` run by bash in the repository's folder, as a user's fresh shell there would
    (no KUBECONFIG of ours); its exit code and its output."""
    env = {key: value for key, value in os.environ.items() if key != "KUBECONFIG"}
    process = await asyncio.create_subprocess_exec(
        "bash", "-c", script, cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    async with asyncio.timeout(400):
        out, _ = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(errors="replace")


def _node_configs() -> dict[str, bytes]:
    """Each node's containerd config, read through .run/nodes."""
    return {node: (RUN_FILES / "nodes" / node / CONTAINERD_CONFIG).read_bytes() for node in NODES}


POLICIES = Resource("gpuctrl.io/v1alpha1", "ClusterPolicy", "clusterpolicies", False)
DAEMON_SETS = Resource("apps/v1", "DaemonSet", "daemonsets")
PODS = Resource("v1", "Pod", "pods")
CONTAINERD_CONFIG = "etc/containerd/config.toml"


async def _operands_run_then_interrupt(run: Run) -> None:
    async with await new_api_client(run.kubeconfig) as api:
        apps = client.AppsV1Api(api)
        core = client.CoreV1Api(api)
        raw = Client(api)

        async def operands_running() -> None:
            sets = (await apps.list_namespaced_daemon_set("gpuctrl")).items
            names = {ds.metadata.name for ds in sets}
            assert {"gpuctrl-driver-ubuntu22.04", "gpuctrl-driver-ubuntu24.04"} <= names
            assert "gpuctrl-toolkit" in names
            for ds in sets:
                # make run's nodes are neither MIG- nor MPS-capable: the MIG manager and the MPS
                # control daemon run on none of them.
                placed = ds.metadata.name not in (
                    "gpuctrl-mig-manager",
                    "gpuctrl-mps-control-daemon",
                )
                assert (ds.status.desired_number_scheduled > 0) == placed, ds.metadata.name
                assert ds.status.number_ready == ds.status.desired_number_scheduled, (
                    ds.metadata.name
                )
            pods = (await core.list_namespaced_pod("gpuctrl")).items
            assert pods
            assert all(pod.status.phase == "Running" for pod in pods)
            (policy,) = await raw.list(POLICIES)
            assert policy["status"]["state"] == "ready", policy["status"]
            assert policy["status"]["readyNodes"] == "4/4"

        await eventually(operands_running, within=120)
        # Both metrics addresses are printed; a certificate about to be written is no warning.
        assert "gpuctrl webhook running: metrics http://" in run.output
        assert "WARNING" not in "".join(
            line for line in run.lines if "serving certificate" in line
        ), run.output
        # What happened per node, printed once the policy was ready: the real toolkit agent
        # added the runtime to each node's containerd config ...
        output = await run.printed("try:\n")
        table = output.split(" is ready:\n", 1)[1].split("\n\n", 1)[0].splitlines()
        assert table[0].split() == ["NODE", "OS", "DRIVER", "TOOLKIT", "VALIDATOR"]
        assert sorted(row.split()[0] for row in table[1:]) == NODES
        assert all("nvidia runtime added" in row for row in table[1:]), table
        # ... and the real validator agent passed its four checks on each node, the workload
        # pods opted out of the mesh by the Istio sample PodPolicy.
        assert all(row.endswith("(cuda, driver, plugin, toolkit passed)") for row in table[1:])
        await _quick_start(run, raw, operands_running)
    await _interrupt(run.process)


async def _quick_start(
    run: Run, raw: Client, operands_running: Callable[[], Awaitable[None]]
) -> None:
    """README.md's quick start, each command as written, each followed by the check that it
    did what the README says; every command make run suggests is one of them."""
    commands = quick_start_commands()
    printed = run.output.split("\ntry:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    suggested = [
        line.strip() for line in printed if line.startswith("  ") and not line.startswith("    ")
    ]
    missing = [line for line in suggested if line not in commands]
    assert not missing, f"make run suggests commands the README's quick start lacks: {missing}"
    assert (RUN_FILES / "kubeconfig").resolve() == run.kubeconfig.resolve(), (
        "another make run holds .run/kubeconfig: stop it to run this test"
    )
    (export,) = [line for line in commands if line.startswith("export KUBECONFIG=")]
    assert f"\n  {export}\n" in run.output  # what make run tells the second shell
    driver = "gpuctrl-driver-ubuntu22.04"
    validators = {"before": set[str]()}
    driver_generation = {"before": 0}

    async def make_run(_: str) -> None:
        # `make run` is what _start_run started: the Makefile's recipe ends in hack/run.py.
        code, out = await _shell("make --no-print-directory -n run")
        assert code == 0, out
        last = out.splitlines()[-1].split()
        assert last == ["GPUCTRL_MAKE_SESSION=.run/make-session", ".venv/bin/python", "hack/run.py"]

    async def exported(_: str) -> None:
        code, out = await _shell(f'{export}\nprintf "%s %s" "$KUBECONFIG" "$(command -v kubectl)"')
        assert code == 0, out
        kubeconfig, kubectl = out.split()
        assert Path(kubeconfig) == RUN_FILES / "kubeconfig", out
        assert Path(kubectl) == RUN_FILES / "bin" / "kubectl", out

    async def looked(out: str) -> None:
        assert "gpu-cluster-policy" in out, out
        assert all(node in out for node in NODES), out

    async def before_restart() -> None:
        validators["before"] = {p["metadata"]["uid"] for p in await _validator_pods(raw)}

    async def validators_replaced(_: str) -> None:
        async def replaced() -> None:
            pods = await _validator_pods(raw)
            assert sorted(p["spec"]["nodeName"] for p in pods) == NODES, pods
            assert not {p["metadata"]["uid"] for p in pods} & validators["before"]
            assert all(_ready(p) for p in pods), [p["status"] for p in pods]
            for node in NODES:
                passed = RUN_FILES / "nodes" / node / str(DEFAULT_OUTPUT_DIR).lstrip("/")
                assert sorted(f.name for f in passed.glob("*-ready")) == [
                    f"{check}-ready" for check in ("cuda", "driver", "plugin", "toolkit")
                ]

        await eventually(replaced, within=60)
        await eventually(operands_running, within=120)

    async def before_patch() -> None:
        ds = await raw.get(DAEMON_SETS, driver, "gpuctrl")
        driver_generation["before"] = ds["metadata"]["generation"]

    async def patched(_: str) -> None:
        (policy,) = await raw.list(POLICIES)
        assert policy["spec"]["driver"]["version"] == "550.90.07"

    async def rolled(_: str) -> None:
        # Ready (of the policy's new generation) means every node runs the new driver.
        ds = await raw.get(DAEMON_SETS, driver, "gpuctrl")
        image = ds["spec"]["template"]["spec"]["containers"][0]["image"]
        assert image.endswith(":550.90.07-ubuntu22.04"), image
        assert ds["metadata"]["generation"] > driver_generation["before"]
        status = ds["status"]
        assert status["observedGeneration"] == ds["metadata"]["generation"], status
        assert status["updatedNumberScheduled"] == status["desiredNumberScheduled"], status
        await eventually(operands_running, within=120)
        # The gauges follow the operand controllers' own reconciles, a moment after the
        # DaemonSets' status.
        await eventually(lambda: _metrics_served(run.metrics), within=30)

    async def images_shown(out: str) -> None:
        assert ":550.90.07-ubuntu22.04" in out, out

    async def before_delete() -> None:
        assert all(b"runtimes.nvidia]" in text for text in _node_configs().values())

    async def deleted(_: str) -> None:
        # The foreground delete returns once the toolkit pods are gone: cleanup has run.
        assert await raw.list(POLICIES) == []
        for node, text in _node_configs().items():
            assert b"nvidia" not in text, (node, text)
            assert containerd_runtimes(text)["runc"]["options"] == {"SystemdCgroup": True}

    async def restored(out: str) -> None:
        assert out == NODE_CONTAINERD_CONFIG, out  # byte for byte as the installer wrote it

    Check = tuple[Callable[[], Awaitable[None]] | None, Callable[[str], Awaitable[None]]]
    checks: dict[str, Check] = {
        "make run": (None, make_run),
        "export KUBECONFIG=": (None, exported),
        "kubectl get nodes,clusterpolicies": (None, looked),
        "rollout restart daemonset/gpuctrl-validator": (before_restart, _nothing),
        "rollout status daemonset/gpuctrl-validator": (None, validators_replaced),
        "kubectl patch clusterpolicy gpu-cluster-policy": (before_patch, patched),
        "kubectl wait clusterpolicy/gpu-cluster-policy": (None, rolled),
        "get daemonsets -o wide": (None, images_shown),
        "--cascade=foreground": (before_delete, deleted),
        "cat .run/nodes/gpu-node-0/etc/containerd/config.toml": (None, restored),
    }
    done = []
    for command in commands:
        matching = [key for key in checks if key in command]
        assert len(matching) == 1, f"no one check for the quick start's command {command!r}"
        (key,) = matching
        before, after = checks[key]
        if before is not None:
            await before()
        if key != "make run":  # the run under test is that command
            code, out = await _shell(f"{export}\n{command}")
            assert code == 0, f"{command}: exit {code}\n{out}"
        else:
            out = ""
        await after(out)
        done.append(key)
    assert done == list(checks), f"the quick start's commands changed: {commands}"


async def _nothing(_: str) -> None:
    """No check of its own: the next command's check covers it."""


async def _validator_pods(raw: Client) -> list[dict[str, Any]]:
    selector = "app.kubernetes.io/component=validator"
    pods = await raw.list(PODS, "gpuctrl", label_selector=selector)
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


async def _metrics_served(address: str) -> None:
    async with aiohttp.ClientSession() as session, session.get(f"http://{address}/metrics") as got:
        text = await got.text()
    for expected in (
        'controller_runtime_reconcile_total{controller="driver",result="success"}',
        "controller_runtime_reconcile_time_seconds_bucket",
        'workqueue_depth{controller="nodes",name="nodes"}',
        "leader_election_master_status",
        "gpuctrl_gpu_nodes 4.0",
        'gpuctrl_operand_ready_nodes{operand="driver"} 4.0',
        'gpuctrl_operand_desired_nodes{operand="toolkit"} 4.0',
    ):
        assert expected in text, expected


async def test_make_run_with_kubeconfig_uses_that_cluster() -> None:
    async with ControlPlane() as plane:
        async with await new_api_client(plane.kubeconfig) as api:
            await _create_cluster_policy(api)
            async with running_make_run(plane.kubeconfig, namespace="operands") as run:
                assert run.kubeconfig == plane.kubeconfig
                assert "starting a local control plane" not in run.output
                apps = client.AppsV1Api(api)

                async def applied() -> None:
                    sets = (await apps.list_namespaced_daemon_set("operands")).items
                    assert "gpuctrl-toolkit" in {ds.metadata.name for ds in sets}

                await eventually(applied, within=30)
                await _interrupt(run.process)
        assert plane.processes, "make run must not stop a cluster it did not start"


async def test_a_sigint_to_make_itself_stops_everything() -> None:
    """GNU make forwards SIGTERM to its child but only waits on SIGINT: a SIGINT sent to the
    make process alone (not its group, as Ctrl-C does) must stop make run all the same."""
    async with ControlPlane() as plane:
        async with await new_api_client(plane.kubeconfig) as api:
            await _create_cluster_policy(api)
        async with running_make_run(plane.kubeconfig, via_make=True) as run:
            assert (RUN_FILES / "make-session").is_file()
            os.kill(run.process.pid, signal.SIGINT)  # make's pid only
            async with asyncio.timeout(20):
                await run.process.wait()

            async def said_why() -> None:
                assert "make was interrupted: stopping" in run.output, run.output

            await eventually(said_why, within=5)
            assert not _pids_mentioning(str(plane.kubeconfig)), "manager or webhook left running"
        assert not (RUN_FILES / "make-session").exists()


async def _create_cluster_policy(api: ApiClient) -> None:
    """A ClusterPolicy in a cluster whose CRDs make run has not installed yet: apply both."""
    crd_client = Client(api)
    for text in crd_files().values():
        crd = yaml.safe_load(text)
        crds = await crd_client.resource("apiextensions.k8s.io/v1", "CustomResourceDefinition")
        await crd_client.apply(crds, crd, field_manager="e2e")

    async def policy_created() -> None:
        fresh = Client(api)  # a new discovery cache each try, until the CRD is served
        try:
            policies = await fresh.resource("gpuctrl.io/v1alpha1", "ClusterPolicy")
        except (ApiError, ValueError) as error:
            raise AssertionError(f"ClusterPolicy is not served yet: {error}") from error
        policy = {"apiVersion": "gpuctrl.io/v1alpha1", "kind": "ClusterPolicy"}
        await fresh.create(policies, {**policy, "metadata": {"name": "e2e"}})

    await eventually(policy_created, within=30)


def _pids_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


async def test_make_run_stops_with_one_line_when_a_port_is_taken() -> None:
    """Issue 23: a busy port (another `make run`) stops everything, says so in one line and
    exits 1 (it printed 'running' with no manager and no webhook before)."""
    async with ControlPlane() as plane:
        env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig)}
        addresses = _free_addresses(len(ADDRESS_VARIABLES))
        env.update(zip(ADDRESS_VARIABLES, addresses, strict=True))
        with socket.socket() as busy:
            host, port = env["GPUCTRL_WEBHOOK_METRICS_ADDRESS"].split(":")
            busy.bind((host, int(port)))
            busy.listen()
            process = await _start_run(env)
            async with asyncio.timeout(60):
                output, _ = await process.communicate()
        text = output.decode(errors="replace")
        assert process.returncode == 1, text
        assert "Traceback" not in text
        assert "running; Ctrl-C" not in text
        (line,) = [line for line in text.splitlines() if line.startswith("make run: ")]
        assert line.startswith("make run: gpuctrl webhook exited with 2"), line
        assert f"cannot listen on {host}:{port}" in text
        assert not _pids_mentioning(str(plane.kubeconfig)), "nothing it started is left"
