"""Issue 15, "Service mesh everywhere", end to end through the real agents.

One cluster for the module: the local control plane (controller-manager, scheduler),
``gpuctrl manager`` and ``gpuctrl webhook`` as processes, `MeshInjector` (Istio's injector) on
for the operands namespace, and four simulated GPU nodes of two OS releases on which every
gpuctrl container (toolkit and validator agents) runs for real in bubblewrap. Each node's
folder holds a containerd config for the toolkit and a fake ``nvidia-smi`` for the
validator's driver and toolkit checks (`gpuctrl.testing.seed_gpu_host`); the CUDA and plugin
workload pods stay simulated.

The module's setup is the story's: the PodPolicy ``meshes: [istio]``, then the ClusterPolicy.
Its workload pods get the opt-out and pass, every node's folder gets the status files, the
validator pods (which do get Istio's sidecar) turn Ready and the ClusterPolicy ``ready``; the
workload pods' init and main containers carry ``validator.workloads.resources``. A workload
pod deleted from outside mid-run is replaced and the check passes without failing once.
Without the PodPolicy the workload pods get Istio's sidecar and the checks still pass, one pod
each: gpuctrl's verdict judges only the template's containers, so where NVIDIA's validator
crash-loops, nothing fails (the issue expected a bounded failure here). A workload pod that
really hangs gives the bounded failure: after ``timeoutSeconds`` an Event naming the pod and
its running container, the ClusterPolicy notReady naming the validator and 3/4 nodes, the pod
deleted before the next try, one restart of the check. The same holds with Istio's native
sidecars (``ENABLE_NATIVE_SIDECARS``, Kubernetes 1.29+): the proxy an init container with
``restartPolicy: Always`` before the pod's own, in the workload pods and the agent's alike. An
apiserver restart while a workload pod runs leaves no pod behind.
The tests run in file order on the one cluster; each first waits for the policy to be ready.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, aclosing
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from e2e_stack import (
    NAMESPACES,
    PODS,
    POLICIES,
    STATUS_DIR,
    conditions,
    is_ready,
    operator_cluster,
    policy_ready,
    running_manager,
    running_webhook,
)

from controllers._kinds import POD_POLICIES
from gpuctrl.runtime import ApiError, Client, Gone, Resource
from gpuctrl.testing import (
    ContainerBehavior,
    ControlPlane,
    MeshInjector,
    SimulatedKubelet,
    eventually,
    seed_gpu_host,
    simulated_gpu_nodes,
)

pytestmark = pytest.mark.slow

NAMESPACE = "gpuctrl"
EVENTS = Resource("v1", "Event", "events")
WORKLOADS = "app.kubernetes.io/component=validator-workloads"
VALIDATORS = "app.kubernetes.io/component=validator"
CHECKS = ("driver", "toolkit", "cuda", "plugin")
OPT_OUT = "sidecar.istio.io/inject"
RESOURCES = {"requests": {"cpu": "20m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}}
POLICY = {
    "apiVersion": "gpuctrl.io/v1alpha1",
    "kind": "ClusterPolicy",
    "metadata": {"name": "mesh-everywhere"},
    "spec": {
        # The host has its driver: the fake nvidia-smi in each node's folder.
        "driver": {"enabled": False},
        # No containerd runs in the sandbox to be told to reload (see the containerd story).
        "toolkit": {"containerd": {"restartMode": "none", "dropInMode": "never"}},
        # A run may take 30 s (a hanging workload pod fails then).
        "validator": {"workloads": {"resources": RESOURCES, "timeoutSeconds": 30}},
    },
}
POD_POLICY = {
    "apiVersion": "gpuctrl.io/v1alpha1",
    "kind": "PodPolicy",
    "metadata": {"name": "istio-opt-out"},
    "spec": {"targets": {"components": ["validator-workloads"]}, "meshes": ["istio"]},
}


@dataclass
class Stack:
    """The module's cluster, its nodes, the mesh, and every workload pod as first created."""

    plane: ControlPlane
    admin: Client
    kubelet: SimulatedKubelet
    mesh: MeshInjector
    # Every watch event of a workload pod: (type, pod name), and each pod as first created.
    timeline: list[tuple[str, str]] = field(default_factory=list)
    workloads: dict[str, dict[str, Any]] = field(default_factory=dict)
    slow: set[str] = field(default_factory=set)  # nodes whose CUDA workload takes seconds
    stuck: set[str] = field(default_factory=set)  # nodes whose CUDA workload never ends
    recorder: asyncio.Task[None] | None = None  # fills timeline and workloads

    def runs(self, node: str, check: str) -> list[dict[str, Any]]:
        """The workload pods of ``check`` created for ``node``, oldest first."""
        assert self.recorder is not None
        if self.recorder.done():
            self.recorder.result()  # raises why it stopped
            raise AssertionError("the recorder of workload pods stopped")
        pods = [
            p
            for p in self.workloads.values()
            if p["spec"].get("nodeName") == node
            and p["metadata"]["labels"].get("gpuctrl.io/validation") == check
        ]
        return sorted(pods, key=lambda p: int(p["metadata"]["resourceVersion"]))


async def _record_workloads(admin: Client, stack: Stack, version: str) -> None:
    """Until cancelled: each workload pod as the apiserver created it (after admission), and
    every event of each, from resource ``version`` on (a broken watch resumes where it was;
    after an apiserver restart, from a new listing: the timeline then has a gap)."""
    path = PODS.path(NAMESPACE)
    limits = aiohttp.ClientTimeout(total=None, sock_read=None)
    while True:
        query: dict[str, str | int | bool] = {
            "labelSelector": WORKLOADS,
            "resourceVersion": version,
            "allowWatchBookmarks": True,
        }
        try:
            async with aclosing(admin.watch(path, query, limits)) as events:
                async for event in events:
                    pod = event["object"]
                    version = pod["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        stack.workloads.setdefault(pod["metadata"]["name"], pod)
                        stack.timeline.append((event["type"], pod["metadata"]["name"]))
        except (aiohttp.ClientError, TimeoutError):
            await asyncio.sleep(0.5)
        except Gone:
            listing = await admin.request("GET", path, query={"labelSelector": WORKLOADS})
            for pod in listing["items"]:
                stack.workloads.setdefault(pod["metadata"]["name"], pod)
            version = listing["metadata"]["resourceVersion"]


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    folder = tmp_path_factory.mktemp("mesh")
    async with AsyncExitStack() as exits:
        plane, admin = await exits.enter_async_context(operator_cluster())
        await admin.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        )
        mesh = await exits.enter_async_context(MeshInjector(admin.api_client))
        await mesh.enable(NAMESPACE)
        nodes = simulated_gpu_nodes("mesh", count=4)
        kubelet = await exits.enter_async_context(SimulatedKubelet(plane.kubeconfig, nodes))
        stack = Stack(plane, admin, kubelet, mesh)
        for node in kubelet.nodes:
            assert node.root is not None
            seed_gpu_host(node.root)
        kubelet.set_behavior(behavior=ContainerBehavior(process=True), image="*/gpuctrl:*")
        # The CUDA workload pods' work, on the nodes the tests name (the agent's own init
        # container of that name runs gpuctrl's image, which these rules leave alone).
        for nodes_named, behavior in (
            (stack.slow, ContainerBehavior(run_seconds=4)),
            (stack.stuck, ContainerBehavior(never_exits=True)),
        ):
            kubelet.set_behavior(
                behavior=behavior,
                match=lambda pod, named=nodes_named: (
                    pod["metadata"].get("labels", {}).get("gpuctrl.io/validation") == "cuda"
                    and pod["spec"].get("nodeName") in named
                ),
                container="cuda-validation",
            )
        await exits.enter_async_context(running_webhook(plane.kubeconfig, NAMESPACE, folder))
        await exits.enter_async_context(
            running_manager(
                plane.kubeconfig, NAMESPACE, folder / "manager.log", "--no-leader-elect"
            )
        )
        listing = await admin.request("GET", PODS.path(NAMESPACE))
        version = listing["metadata"]["resourceVersion"]
        stack.recorder = asyncio.create_task(_record_workloads(admin, stack, version))
        exits.callback(stack.recorder.cancel)
        # The story's setup: the opt-out first (in effect once the webhook applies it), then
        # the ClusterPolicy; the tests wait for what they need of it.
        await admin.create(POD_POLICIES, POD_POLICY)
        await _mesh_injects_workloads(admin, expected=False)
        await admin.create(POLICIES, POLICY)
        yield stack


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*(pod["spec"].get("initContainers") or []), *pod["spec"]["containers"]]


def _names(pod: dict[str, Any]) -> set[str]:
    return {c["name"] for c in _containers(pod)}


async def _validator_pods(admin: Client) -> dict[str, dict[str, Any]]:
    """The validator agent's pods by node (those not being deleted)."""
    pods = await admin.list(PODS, NAMESPACE, label_selector=VALIDATORS)
    return {
        p["spec"]["nodeName"]: p
        for p in pods
        if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
    }


async def _mesh_injects_workloads(admin: Client, expected: bool) -> None:
    """Wait until admission gives a new workload pod Istio's sidecar (``expected``) or the
    opt-out: a dry-run create shows what the webhooks do, and creates nothing."""
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "probe-",
            "namespace": NAMESPACE,
            "labels": {
                "app.kubernetes.io/managed-by": "gpuctrl",
                "app.kubernetes.io/component": "validator-workloads",
            },
        },
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "c"}]},
    }
    path = PODS.path(NAMESPACE)

    async def admitted() -> None:
        pod = await admin.request("POST", path, query={"dryRun": "All"}, body=probe)
        injected = MeshInjector.SIDECAR in _names(pod)
        assert injected == expected, pod["metadata"].get("labels")
        if not expected:
            assert pod["metadata"]["labels"][OPT_OUT] == "false"

    await eventually(admitted, within=30)


async def _all_validated(stack: Stack, since: dict[str, str] | None = None) -> None:
    """Every node's validator pod (a new one where ``since`` names the old uid) is Ready with
    every status file in the node's folder, then the ClusterPolicy is ready on all 4 nodes."""
    nodes = {node.name: node.root for node in stack.kubelet.nodes}

    async def validated() -> None:
        pods = await _validator_pods(stack.admin)
        assert sorted(pods) == sorted(nodes), sorted(pods)
        for name, pod in pods.items():
            if since is not None:
                assert pod["metadata"]["uid"] != since.get(name), name
            assert is_ready(pod), (name, await _why_not_ready(stack.admin, pod))
            root = nodes[name]
            assert root is not None
            for check in CHECKS:
                assert (root / STATUS_DIR / f"{check}-ready").is_file(), (name, check)
            # The driver check found the host's driver (nvidia-smi answering in a chroot of the
            # host's root) and wrote the env NVIDIA's images source; the toolkit check ran the
            # nvidia-smi the (simulated) NVIDIA runtime put into its container.
            driver = (root / STATUS_DIR / "driver-ready").read_text()
            assert driver.startswith("IS_HOST_DRIVER=true\nNVIDIA_DRIVER_ROOT=/\n"), driver
            toolkit = (root / STATUS_DIR / "toolkit-ready").read_text()
            assert toolkit.startswith("ran: nvidia-smi\npassed\nNVIDIA-SMI"), toolkit

    await eventually(validated, within=240)
    await policy_ready(stack.admin, POLICY["metadata"]["name"], within=60, ready_nodes="4/4")


async def _why_not_ready(admin: Client, pod: dict[str, Any]) -> str:
    """The states of a pod's containers and the log of the first that is not done, for a
    failure message."""
    statuses = [
        *(pod["status"].get("initContainerStatuses") or []),
        *(pod["status"].get("containerStatuses") or []),
    ]
    lines = [f"{s['name']}: {s.get('state')} restarts={s.get('restartCount')}" for s in statuses]
    stuck = next((s for s in statuses if not s.get("ready") and "running" not in s["state"]), None)
    if stuck is not None:
        path = PODS.path(NAMESPACE, pod["metadata"]["name"], "log")
        query: dict[str, str | int | bool] = {"container": stuck["name"], "tailLines": 30}
        if stuck.get("restartCount"):
            query["previous"] = True
        with contextlib.suppress(ApiError, aiohttp.ClientError, TimeoutError):
            async with admin.stream(path, query, aiohttp.ClientTimeout(total=5)) as response:
                lines.append((await response.read()).decode(errors="replace"))
    return "\n".join(lines)


async def _no_workload_pods(admin: Client) -> None:
    async def none_left() -> None:
        pods = await admin.list(PODS, NAMESPACE, label_selector=WORKLOADS)
        assert pods == [], [p["metadata"]["name"] for p in pods]

    await eventually(none_left, within=30)


async def _events(admin: Client, node: str, check: str) -> list[dict[str, Any]]:
    """The validator's Events on ``node`` for ``check``, oldest first."""
    events = await admin.list(EVENTS, "default")
    found = [
        e
        for e in events
        if e["involvedObject"].get("name") == node
        and e.get("source", {}).get("component") == "gpuctrl-validator"
        and e["metadata"]["name"].startswith(f"{node}.gpuctrl-{check}-validation.")
    ]
    return sorted(found, key=lambda e: int(e["metadata"]["resourceVersion"]))


async def _failures(admin: Client, node: str) -> list[dict[str, Any]]:
    """The validator's ValidationFailed Events for the CUDA check on ``node``."""
    return [e for e in await _events(admin, node, "cuda") if e["reason"] == "ValidationFailed"]


async def test_mesh_opt_out_validates_every_node(stack: Stack) -> None:
    admin = stack.admin
    await _all_validated(stack)

    validators = await _validator_pods(admin)
    for node in stack.kubelet.nodes:
        # Injection is on in the namespace: the agent's own pod has Istio's sidecar.
        assert MeshInjector.SIDECAR in _names(validators[node.name])
        for check in ("cuda", "plugin"):
            (pod,) = stack.runs(node.name, check)  # one pod, one run: no retry
            assert pod["metadata"]["labels"][OPT_OUT] == "false"
            assert not {MeshInjector.SIDECAR, MeshInjector.INIT} & _names(pod)
            init, main = pod["spec"]["initContainers"], pod["spec"]["containers"]
            assert len(init) == len(main) == 1
            assert init[0]["resources"] == main[0]["resources"], pod["spec"]
            for kind, values in RESOURCES.items():
                assert values.items() <= init[0]["resources"][kind].items()
            (event,) = await _events(admin, node.name, check)
            assert event["reason"] == "ValidationPassed", event
    await _no_workload_pods(admin)


async def test_workload_pod_deleted_mid_run_validation_still_completes(stack: Stack) -> None:
    admin = stack.admin
    await _all_validated(stack)
    victim = stack.kubelet.nodes[0].name
    before = await _validator_pods(admin)
    runs = len(stack.runs(victim, "cuda"))
    stack.slow.add(victim)  # its CUDA workload runs 4 s: time to delete it mid-run
    try:
        await admin.delete(PODS, before[victim]["metadata"]["name"], NAMESPACE)

        async def workload_running() -> None:
            if len(stack.runs(victim, "cuda")) == runs:
                pods = await admin.list(PODS, NAMESPACE, label_selector=VALIDATORS)
                states = [
                    (p["metadata"]["name"], p["metadata"].get("deletionTimestamp"),
                     await _why_not_ready(admin, p))
                    for p in pods if p["spec"].get("nodeName") == victim
                ]  # fmt: skip
                raise AssertionError(f"no new CUDA workload pod on {victim}: {states}")

        await eventually(workload_running, within=120, interval=0.1)
        # The deleted pod's SIGTERM removed its status files: the new one's plugin check, which
        # comes after the CUDA check under way, has not written its file yet.
        root = stack.kubelet.nodes[0].root
        assert root is not None
        assert not (root / STATUS_DIR / "plugin-ready").exists()
        doomed = stack.runs(victim, "cuda")[-1]
        await admin.delete(PODS, doomed["metadata"]["name"], NAMESPACE)
        await _all_validated(stack, since={victim: before[victim]["metadata"]["uid"]})
    finally:
        stack.slow.clear()
    replaced = stack.runs(victim, "cuda")[runs:]
    names = [p["metadata"]["name"] for p in replaced]
    assert len(names) == 2, names  # the one deleted, and its replacement
    assert names[0] == doomed["metadata"]["name"], names
    restarts = (await _validator_pods(admin))[victim]["status"]["initContainerStatuses"]
    assert all(s["restartCount"] == 0 for s in restarts), restarts
    await _no_workload_pods(admin)


def _proxy(pod: dict[str, Any]) -> str:
    """Where Istio put its proxy in ``pod``: a "container" (after istio-init, the last init
    container), a "native sidecar" (an init container with restartPolicy Always right after
    istio-init, the pod's own init containers after both), or "misplaced"."""
    inits = [(c["name"], c.get("restartPolicy")) for c in pod["spec"].get("initContainers") or []]
    names = [c["name"] for c in pod["spec"]["containers"]]
    if names[-1:] == [MeshInjector.SIDECAR] and inits[-1:] == [(MeshInjector.INIT, None)]:
        return "container"
    if inits[:2] == [(MeshInjector.INIT, None), (MeshInjector.SIDECAR, "Always")]:
        return "native sidecar"
    return "misplaced"


@pytest.mark.parametrize("native", [False, True], ids=["classic-sidecar", "native-sidecar"])
async def test_without_pod_policy_sidecar_is_injected_and_validation_is_bounded(
    stack: Stack, native: bool
) -> None:
    admin = stack.admin
    await _all_validated(stack)
    stack.mesh.native_sidecar = native
    await admin.delete(POD_POLICIES, POD_POLICY["metadata"]["name"])
    try:
        await _mesh_injects_workloads(admin, expected=True)
        before = await _validator_pods(admin)
        runs = {(n, c): len(stack.runs(n, c)) for n in before for c in ("cuda", "plugin")}
        for pod in before.values():  # every node validates again, now without the opt-out
            await admin.delete(PODS, pod["metadata"]["name"], NAMESPACE)
        await _all_validated(stack, since={n: p["metadata"]["uid"] for n, p in before.items()})
    finally:
        stack.mesh.native_sidecar = False
        await admin.create(POD_POLICIES, POD_POLICY)
    # gpuctrl judges only the containers of its template, so Istio's never-exiting sidecar
    # holds nothing: one pod per check and node (no retry, no crash loop), passed, and
    # deleted by the agent (as a container, the sidecar would have kept it running for ever).
    where = "native sidecar" if native else "container"
    for (node, check), count in runs.items():
        (pod,) = stack.runs(node, check)[count:]
        assert OPT_OUT not in pod["metadata"]["labels"]
        assert _proxy(pod) == where, pod["spec"]
        event = (await _events(admin, node, check))[-1]
        assert (event["reason"], event["message"]) == (
            "ValidationPassed",
            f"{check} validation passed",
        )
    await _no_workload_pods(admin)
    for node, pod in (await _validator_pods(admin)).items():
        assert _proxy(pod) == where, (node, pod["spec"])  # and it turned Ready with it
        restarts = [s["restartCount"] for s in pod["status"]["initContainerStatuses"]]
        assert set(restarts) == {0}, (node, pod["status"]["initContainerStatuses"])


async def test_a_hanging_workload_pod_fails_clearly_once_per_try(stack: Stack) -> None:
    admin = stack.admin
    await _all_validated(stack)
    victim = stack.kubelet.nodes[1].name
    before = await _validator_pods(admin)
    runs = len(stack.runs(victim, "cuda"))
    failures = len(await _failures(admin, victim))
    stack.stuck.add(victim)  # its next CUDA workload pod never finishes
    try:
        await admin.delete(PODS, before[victim]["metadata"]["name"], NAMESPACE)

        async def failed() -> tuple[dict[str, Any], dict[str, Any]]:
            found = await _failures(admin, victim)
            assert len(found) > failures, found
            policy = await admin.get(POLICIES, POLICY["metadata"]["name"])
            return found[-1], policy["status"]

        event, status = await eventually(failed, within=120)
    finally:
        stack.stuck.clear()  # the try after the failure gets a pod that works
    await _all_validated(stack, since={victim: before[victim]["metadata"]["uid"]})

    hung, passed = stack.runs(victim, "cuda")[runs:]
    name = hung["metadata"]["name"]
    assert event["type"] == "Warning"
    assert event["message"].startswith(f"no verdict on workload pod {name} in time:")
    assert "cuda-validation: running" in event["message"], event["message"]
    # Meanwhile the ClusterPolicy says which operand and how many nodes.
    assert status["state"] == "notReady", status
    validator = conditions(status)["ValidatorReady"]
    assert validator["status"] == "False", status
    assert "validator: 3/4 nodes ready" in validator["message"], status
    # Bounded: the hanging pod was deleted before the next try created its pod, and the
    # agent's check failed once (one restart of its init container), then passed.
    order = stack.timeline
    assert order.index(("DELETED", name)) < order.index(("ADDED", passed["metadata"]["name"]))
    statuses = (await _validator_pods(admin))[victim]["status"]["initContainerStatuses"]
    restarts = {s["name"]: s["restartCount"] for s in statuses}
    assert restarts["cuda-validation"] == 1, statuses
    assert restarts["driver-validation"] == restarts["plugin-validation"] == 0, statuses
    await _no_workload_pods(admin)


async def test_an_apiserver_restart_mid_run_leaves_no_pod_behind(stack: Stack) -> None:
    """kube-apiserver restarts while a node's CUDA workload pod runs: the agent's watch
    breaks, and the check still ends, with no workload pod left."""
    admin = stack.admin
    await _all_validated(stack)
    victim = stack.kubelet.nodes[2].name
    before = await _validator_pods(admin)
    runs = len(stack.runs(victim, "cuda"))
    stack.slow.add(victim)  # the restart lands while its CUDA workload pod runs
    try:
        await admin.delete(PODS, before[victim]["metadata"]["name"], NAMESPACE)

        async def workload_running() -> None:
            assert len(stack.runs(victim, "cuda")) > runs

        await eventually(workload_running, within=120, interval=0.1)
        await stack.plane.restart_apiserver()
        await _all_validated(stack, since={victim: before[victim]["metadata"]["uid"]})
    finally:
        stack.slow.clear()
    await _no_workload_pods(admin)
    # One pod per try of the check (a try that outlived its timeout during the outage fails
    # and the next one passes); nothing created twice by a retried request.
    statuses = (await _validator_pods(admin))[victim]["status"]["initContainerStatuses"]
    tries = 1 + next(s["restartCount"] for s in statuses if s["name"] == "cuda-validation")
    assert len(stack.runs(victim, "cuda")[runs:]) == tries, statuses
