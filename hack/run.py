"""`make run`: run `gpuctrl manager` against $KUBECONFIG, or against a local cluster it starts.

Without KUBECONFIG it starts a local control plane (etcd, kube-apiserver, controller-manager,
scheduler) with four simulated GPU nodes of two OS versions, each with a folder of its own
seeded as a GPU host (`seed_gpu_host`: containerd's config, a fake nvidia-smi) where gpuctrl's
toolkit and validator agents run for real (bubblewrap), an Istio-like sidecar injector
(`MeshInjector`) on the operands' namespace, the minimal sample ClusterPolicy (the toolkit told
not to restart containerd: none runs there) and the Istio PodPolicy sample; once the policy is
ready it prints what happened on each node and three things to try. For a second shell it
links `.run/kubeconfig`, `.run/nodes` (the nodes' folders) and `.run/bin/kubectl` (the control
plane's kubectl) in the repository to this run's, unless another running `make run` holds them
(then it names its own files instead); the links go when it stops. In both cases it installs
the CRDs, starts ``gpuctrl webhook`` (managed certificates, configuration on its loopback URL
$GPUCTRL_WEBHOOK_ADDRESS, default 127.0.0.1:9443; metrics and probes on
$GPUCTRL_WEBHOOK_METRICS_ADDRESS and $GPUCTRL_WEBHOOK_PROBE_ADDRESS, default :8090 and :8091)
and runs ``gpuctrl manager`` (metrics on $GPUCTRL_METRICS_ADDRESS, default 127.0.0.1:8080;
probes on $GPUCTRL_PROBE_ADDRESS, default 127.0.0.1:8081) until Ctrl-C, when it stops
everything it started (so does SIGTERM to make: GNU make passes SIGTERM on to its recipe, but
not SIGINT, which it expects the terminal to send the whole process group). A busy port or a
process that exits stops everything, says why in one line and exits 1. The manager labels the
nodes, applies the operands and keeps them converged.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import tempfile
from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from api.crdgen import crd_files
from controllers._kinds import CLUSTER_POLICIES as POLICIES
from gpuctrl.runtime import Client, Resource, new_api_client
from gpuctrl.testing import (
    ContainerBehavior,
    ControlPlane,
    MeshInjector,
    SimulatedKubelet,
    seed_gpu_host,
    simulated_gpu_nodes,
)
from gpuctrl.validator import DEFAULT_OUTPUT_DIR

ROOT = Path(__file__).resolve().parent.parent
FIELD_MANAGER = "gpuctrl"
OS_RELEASES = (("ubuntu", "22.04"), ("ubuntu", "24.04"))
NAMESPACE = os.environ.get("GPUCTRL_NAMESPACE", "gpuctrl")
METRICS = os.environ.get("GPUCTRL_METRICS_ADDRESS", "127.0.0.1:8080")
PROBES = os.environ.get("GPUCTRL_PROBE_ADDRESS", "127.0.0.1:8081")
WEBHOOK = os.environ.get("GPUCTRL_WEBHOOK_ADDRESS", "127.0.0.1:9443")
WEBHOOK_METRICS = os.environ.get("GPUCTRL_WEBHOOK_METRICS_ADDRESS", "127.0.0.1:8090")
WEBHOOK_PROBES = os.environ.get("GPUCTRL_WEBHOOK_PROBE_ADDRESS", "127.0.0.1:8091")
PODS = Resource("v1", "Pod", "pods")
CONTAINERD_CONFIG = "etc/containerd/config.toml"
# No containerd runs on a simulated node to be told to reload: the agent only edits the file.
LOCAL_POLICY = {"toolkit": {"containerd": {"restartMode": "none", "dropInMode": "never"}}}
VALIDATIONS = str(DEFAULT_OUTPUT_DIR).lstrip("/")  # where the validator writes <check>-ready
# What a second shell reads of a local run (see `_second_shell`); README.md's quick start
# names these paths.
RUN_FILES = ROOT / ".run"
SESSION_ENV = "GPUCTRL_MAKE_SESSION"  # make run's target file, see the Makefile
SECOND_SHELL = "export KUBECONFIG=$PWD/.run/kubeconfig PATH=$PWD/.run/bin:$PATH"


def _load(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


async def _apply(client: Client, obj: Mapping[str, Any]) -> None:
    resource = await client.resource(obj["apiVersion"], obj["kind"])
    await client.apply(resource, obj, field_manager=FIELD_MANAGER, force=True)


async def _install_crds(client: Client) -> None:
    for text in crd_files().values():
        crd = yaml.safe_load(text)
        await _apply(client, crd)
        await _wait_established(client, crd["metadata"]["name"])


async def _wait_established(client: Client, name: str) -> None:
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
    for _ in range(100):
        crd = await client.request("GET", path)
        conditions = (crd.get("status") or {}).get("conditions") or []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"CRD {name} was not established within 10 s")


class CannotRun(Exception):
    """What keeps `make run` from running, in one line (exit 1 once everything is stopped)."""


async def _start(
    stack: AsyncExitStack, name: str, probes: str, *args: str
) -> asyncio.subprocess.Process:
    """``gpuctrl NAME ARGS...`` once its /readyz on ``probes`` answers; stopped (SIGTERM, then
    SIGKILL after 30 s) when ``stack`` closes. Raises when it exits or is not ready in 60 s."""
    gpuctrl = str(Path(sys.executable).with_name("gpuctrl"))
    process = await asyncio.create_subprocess_exec(
        gpuctrl, name, *args, "--health-probe-bind-address", probes
    )
    stack.push_async_callback(_stop, process)
    async with aiohttp.ClientSession() as session:
        for _ in range(600):
            if process.returncode is not None:
                raise CannotRun(
                    f"gpuctrl {name} exited with {process.returncode} (its reason is above: "
                    "a port in use? another `make run`? GPUCTRL_*_ADDRESS pick others)"
                )
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(f"http://{probes}/readyz") as response:
                    if response.status == 200:
                        return process
            await asyncio.sleep(0.1)
    raise CannotRun(f"gpuctrl {name} was not ready on {probes} within 60 s")


async def _serve(kubeconfig: Path | None, stop: asyncio.Event) -> None:
    async with AsyncExitStack() as stack:
        local = kubeconfig is None
        shell: SecondShell | None = None  # a local run's
        if kubeconfig is None:
            print("starting a local control plane with simulated GPU nodes ...", flush=True)
            plane = await stack.enter_async_context(
                ControlPlane(controller_manager=True, scheduler=True)
            )
            nodes = simulated_gpu_nodes("gpu-node", count=4, os_releases=OS_RELEASES)
            kubelet = await stack.enter_async_context(SimulatedKubelet(plane.kubeconfig, nodes))
            # gpuctrl's own agents (toolkit, validator) run for real on every node, against
            # the node's folder: containerd's config and a fake nvidia-smi there.
            kubelet.set_behavior(behavior=ContainerBehavior(process=True), image="*/gpuctrl:*")
            for node in kubelet.nodes:
                assert node.root is not None
                seed_gpu_host(node.root)
            kubeconfig = plane.kubeconfig
            shell = _second_shell(stack, plane, kubelet)
        api = await new_api_client(kubeconfig)
        stack.push_async_callback(api.close)
        client = Client(api)
        await _install_crds(client)
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        await _apply(client, namespace)
        if local:
            mesh = await stack.enter_async_context(MeshInjector(api))
            await mesh.enable(NAMESPACE)  # Istio-like injection in the operands' namespace
            for name in ("clusterpolicy-minimal.yaml", "podpolicy-istio.yaml"):
                for sample in _load(ROOT / "config" / "samples" / name):
                    await _apply(client, sample)
                    if sample["kind"] == "ClusterPolicy":  # the apiserver merges (RFC 7386)
                        patch = {"spec": LOCAL_POLICY}
                        await client.merge_patch(POLICIES, sample["metadata"]["name"], patch)
        certs = stack.enter_context(tempfile.TemporaryDirectory(prefix="gpuctrl-webhook-"))
        await _start(
            stack, "webhook", WEBHOOK_PROBES,
            "--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE,
            "--bind-address", WEBHOOK, "--manage-certificates", "--cert-dir", certs,
            "--webhook-url", f"https://{WEBHOOK}/mutate-v1-pod",
            "--metrics-bind-address", WEBHOOK_METRICS,
            "--shutdown-delay", "0",  # called by URL: no Service endpoints to wait for
        )  # fmt: skip
        manager = await _start(
            stack, "manager", PROBES,
            "--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE,
            "--metrics-bind-address", METRICS,
        )  # fmt: skip
        print(f"gpuctrl manager running: metrics http://{METRICS}/metrics", flush=True)
        print(f"gpuctrl webhook running: metrics http://{WEBHOOK_METRICS}/metrics", flush=True)
        print(f"kubeconfig: {kubeconfig}", flush=True)
        if shell is not None:
            if shell.export == SECOND_SHELL:
                print(f"in another shell, in {ROOT}:\n  {shell.export}", flush=True)
            else:
                print(f"{RUN_FILES}/kubeconfig is another running `make run`'s", flush=True)
                print(f"in another shell:\n  {shell.export}", flush=True)
        print("look:  kubectl get nodes,clusterpolicies", flush=True)
        print(f"       kubectl -n {NAMESPACE} get ds,pods -o wide", flush=True)
        print("       kubectl get podpolicies,mutatingwebhookconfigurations", flush=True)
        print("running; Ctrl-C stops everything", flush=True)
        if shell is not None:
            report = asyncio.create_task(_report_when_ready(client, kubelet, shell.nodes_folder))
            stack.callback(report.cancel)
        waiting = asyncio.create_task(stop.wait())
        exited = asyncio.create_task(manager.wait())
        await asyncio.wait([waiting, exited], return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        exited.cancel()
        print("stopping ...", flush=True)
        if manager.returncode is not None and not stop.is_set():
            raise CannotRun(f"gpuctrl manager exited with {manager.returncode} (its log is above)")


async def _report_when_ready(client: Client, kubelet: SimulatedKubelet, nodes_folder: str) -> None:
    """Once the ClusterPolicy is ready: what happened on each node, and three things to try
    (``nodes_folder``: the nodes' folder as a second shell names it)."""
    while True:
        policies = await client.list(POLICIES)
        ready = [p for p in policies if (p.get("status") or {}).get("state") == "ready"]
        if ready:
            break
        await asyncio.sleep(1)
    name = ready[0]["metadata"]["name"]
    selector = "app.kubernetes.io/managed-by=gpuctrl"
    pods = await client.list(PODS, NAMESPACE, label_selector=selector)
    rows = [("NODE", "OS", "DRIVER", "TOOLKIT", "VALIDATOR")]
    nodes = sorted(kubelet.nodes, key=lambda node: node.name)
    for node in nodes:
        assert node.root is not None
        on_node = {
            p["metadata"]["labels"].get("app.kubernetes.io/component", ""): p
            for p in pods
            if p["spec"].get("nodeName") == node.name
        }
        toolkit = _state(on_node.get("toolkit"))
        if "runtimes.nvidia]" in (node.root / CONTAINERD_CONFIG).read_text():
            toolkit += ", nvidia runtime added"
        passed = sorted(
            f.name.removesuffix("-ready") for f in (node.root / VALIDATIONS).glob("*-ready")
        )
        validator = _state(on_node.get("validator"))
        if passed:
            validator += f" ({', '.join(passed)} passed)"
        os_release = f"{node.os_id} {node.os_version}"
        rows.append((node.name, os_release, _state(on_node.get("driver")), toolkit, validator))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    config = f"{nodes_folder}/{nodes[0].name}/{CONTAINERD_CONFIG}"
    version = '{"spec":{"driver":{"version":"550.90.07"}}}'
    print(f"\nClusterPolicy {name} is ready:", *lines, sep="\n  ", flush=True)
    print(
        "\ntry:",
        f"kubectl -n {NAMESPACE} rollout restart daemonset/gpuctrl-validator",
        f"kubectl -n {NAMESPACE} rollout status daemonset/gpuctrl-validator",
        "    each node's validator pod is replaced and runs its four checks again",
        f"kubectl patch clusterpolicy {name} --type merge -p '{version}'",
        f"kubectl wait clusterpolicy/{name} --for=condition=Ready --timeout=300s",
        "    the driver DaemonSets roll to the new image; Ready once every node runs it",
        f"kubectl delete clusterpolicy {name} --cascade=foreground",
        f"cat {config}",
        "    the toolkit agents clean up: each node's config.toml is as it was, byte for byte",
        sep="\n  ",
        flush=True,
    )


@dataclass(frozen=True)
class SecondShell:
    """How a second shell reaches this run: the line that sets its environment, and the
    nodes' folder as it names it."""

    export: str
    nodes_folder: str


def _second_shell(
    stack: AsyncExitStack, plane: ControlPlane, kubelet: SimulatedKubelet
) -> SecondShell:
    """Link `RUN_FILES`' kubeconfig, nodes and bin/kubectl to this run's, unlinked when
    ``stack`` closes. When a running `make run` holds them (its kubeconfig link leads to its
    live control plane's folder), link nothing and name this run's own files instead."""
    (nodes,) = {node.root.parent for node in kubelet.nodes if node.root is not None}
    kubectl = plane.assets_dir / "kubectl"
    (RUN_FILES / "bin").mkdir(parents=True, exist_ok=True)
    first = RUN_FILES / "kubeconfig"
    if first.is_symlink() and not first.exists():
        first.unlink()  # a stopped run's: its control plane's folder is gone
    try:
        first.symlink_to(plane.kubeconfig)
    except FileExistsError:
        export = f"export KUBECONFIG={plane.kubeconfig} PATH={kubectl.parent}:$PATH"
        return SecondShell(export, str(nodes))
    made = {first: plane.kubeconfig}
    stack.callback(_unlink, made)
    for link, target in ((RUN_FILES / "nodes", nodes), (RUN_FILES / "bin/kubectl", kubectl)):
        if link.is_symlink():
            link.unlink()  # a stopped run's
        try:
            link.symlink_to(target)
        except FileExistsError:
            raise CannotRun(f"{link} is in the way of this run's link: remove it") from None
        made[link] = target
    return SecondShell(SECOND_SHELL, f"{RUN_FILES.name}/nodes")


def _unlink(made: Mapping[Path, Path]) -> None:
    """Remove the links in ``made`` that still lead where this run made them lead, then the
    folders left empty."""
    for link, target in made.items():
        with contextlib.suppress(OSError):
            if os.readlink(link) == str(target):
                link.unlink()
    for folder in (RUN_FILES / "bin", RUN_FILES):
        with contextlib.suppress(OSError):
            folder.rmdir()


def _state(pod: Mapping[str, Any] | None) -> str:
    """A pod's phase, and Ready when it is."""
    if pod is None:
        return "-"
    status = pod.get("status") or {}
    ready = any(
        c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", [])
    )
    return f"{status.get('phase', 'Pending')}{', Ready' if ready else ''}"


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(30):
                await process.wait()
        except TimeoutError:
            process.kill()
            await process.wait()


def _claim_session(session: Path) -> bool:
    """Write this run's pid into ``session`` (`make run`'s target file) unless another live
    run wrote it; whether this run now holds it."""
    with contextlib.suppress(FileNotFoundError, ValueError):
        if _alive(int(session.read_text())):
            return False
    session.parent.mkdir(parents=True, exist_ok=True)
    session.write_text(str(os.getpid()))
    return True


async def _watch_session(session: Path, stop: asyncio.Event) -> None:
    """Set ``stop`` once ``session`` is gone: make deletes it when it gets a SIGINT of its
    own. A file another live run holds is left to it (this run then stops on Ctrl-C or
    SIGTERM only)."""
    if not _claim_session(session):
        return
    # Polled: nothing tells a process that a file was deleted but inotify, not in asyncio.
    while os.path.exists(session):  # noqa: ASYNC110, ASYNC240 (a stat, every 0.5 s)
        await asyncio.sleep(0.5)
    print("make was interrupted: stopping", flush=True)
    stop.set()


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _forget_session(session: Path) -> None:
    """Remove ``session`` if this run wrote it, and `RUN_FILES` once it is empty."""
    with contextlib.suppress(OSError, ValueError):
        if int(session.read_text()) == os.getpid():
            session.unlink()
    with contextlib.suppress(OSError):
        RUN_FILES.rmdir()


async def main() -> int:
    """Run until SIGINT or SIGTERM, or until make deletes its session file (its SIGINT);
    return the exit code."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    configured = os.environ.get("KUBECONFIG")
    named = os.environ.get(SESSION_ENV)
    session = Path(named) if named else None
    watching = None if session is None else asyncio.create_task(_watch_session(session, stop))
    try:
        await _serve(Path(configured) if configured else None, stop)
    except CannotRun as error:
        print(f"make run: {error}", file=sys.stderr, flush=True)
        return 1
    finally:
        if watching is not None:
            watching.cancel()
        if session is not None:
            _forget_session(session)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
