"""The cuda and plugin checks against the local control plane and the simulated kubelet.

Container behaviour is chosen through the simulated kubelet's pod annotation, which the tests
set with the overrides' ``annotations`` - the way a user would add any annotation.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from api.v1alpha1 import ValidatorWorkloads
from gpuctrl.cli import main
from gpuctrl.runtime import new_api_client
from gpuctrl.testing import (
    BEHAVIOR_ANNOTATION,
    ContainerBehavior,
    ControlPlane,
    MeshInjector,
    SimulatedKubelet,
)
from gpuctrl.validator import (
    Failed,
    InvalidOverrides,
    Passed,
    PodOwner,
    RetryPolicy,
    WorkloadCheck,
    run_workload_check,
    status_path,
    workload_selector,
)

# Short backoff and watches, so that a replacement pod or a re-watch costs little time here.
QUICK = RetryPolicy(backoff=0.2, watch_seconds=10)
# A pod whose container is retried (restartPolicy OnFailure), unlike the built-in templates'.
RETRYING_POD = """\
apiVersion: v1
kind: Pod
metadata: {generateName: retrying-}
spec:
  restartPolicy: OnFailure
  containers: [{name: work, image: "{{ image }}"}]
"""
# A pod with a sidecar of its own (a native one: an init container with restartPolicy Always).
SIDECAR_POD = """\
apiVersion: v1
kind: Pod
metadata: {generateName: with-sidecar-}
spec:
  restartPolicy: Never
  initContainers:
    - {name: shipper, image: "{{ image }}", restartPolicy: Always}
  containers: [{name: work, image: "{{ image }}"}]
"""
# Keeps a stale pod in place after its deletion, until the test removes it.
HOLD_FINALIZER = "test.gpuctrl.io/hold"
# A Pod in form, but not one the apiserver accepts (a container name is not a DNS label).
INVALID_POD = """\
apiVersion: v1
kind: Pod
metadata: {generateName: bad-}
spec:
  containers: [{name: Not_A_Label, image: "{{ image }}"}]
"""


def _check(
    namespace: str,
    node: str,
    *,
    check: str = "cuda",
    behavior: dict[str, Any] | None = None,
    overrides: dict[str, Any] | None = None,
    timeout: float = 30,
    owner: PodOwner | None = None,
) -> WorkloadCheck:
    document = dict(overrides or {})
    if behavior is not None:
        annotations = {**document.get("annotations", {}), BEHAVIOR_ANNOTATION: json.dumps(behavior)}
        document["annotations"] = annotations
    return WorkloadCheck(
        check=check,
        namespace=namespace,
        node_name=node,
        configmap="gpuctrl-validator-workloads",
        image="cuda-sample:vectoradd",
        image_pull_policy="IfNotPresent",
        overrides=ValidatorWorkloads.model_validate(document),
        owner=owner,
        timeout=timeout,
    )


class PodHistory:
    """Every pod created in a namespace while it runs, as first and last seen."""

    def __init__(self) -> None:
        self.created: dict[str, dict[str, Any]] = {}  # name -> the pod as first seen
        self.latest: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[str, str]] = []  # (watch event type, pod name), in order
        self.changed = asyncio.Event()

    def add(self, pod: dict[str, Any], kind: str = "ADDED") -> None:
        """Record ``pod`` as seen now, in a watch event of type ``kind``."""
        name = pod["metadata"]["name"]
        self.created.setdefault(name, pod)
        self.latest[name] = pod
        self.events.append((kind, name))
        self.changed.set()

    def workload_pods(self, check: str = "cuda") -> list[dict[str, Any]]:
        """The workload pods of ``check``, in creation order."""
        return [
            pod
            for pod in self.created.values()
            if pod["metadata"].get("labels", {}).get("gpuctrl.io/validation") == check
        ]


@pytest_asyncio.fixture(loop_scope="session")
async def pod_history(kube_api: ApiClient, namespace: str) -> AsyncIterator[PodHistory]:
    """Records the namespace's pods from now on."""
    history = PodHistory()
    core = client.CoreV1Api(kube_api)

    async def record() -> None:
        while True:  # watch again when the apiserver restarts
            try:
                listing = await core.list_namespaced_pod(namespace)
                for pod in listing.items:
                    history.add(core.api_client.sanitize_for_serialization(pod))
                async with watch.Watch() as stream:
                    async for event in stream.stream(
                        core.list_namespaced_pod,
                        namespace,
                        resource_version=listing.metadata.resource_version,
                    ):
                        history.add(event["raw_object"], event["type"])
            except (aiohttp.ClientError, ApiException):
                await asyncio.sleep(0.2)

    task = asyncio.create_task(record())
    yield history
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _workload_pods_left(kube_api: ApiClient, namespace: str, check: str) -> list[str]:
    """Workload pods of ``check`` that still exist and are not being deleted."""
    pods = await client.CoreV1Api(kube_api).list_namespaced_pod(
        namespace, label_selector=workload_selector(check)
    )
    return [pod.metadata.name for pod in pods.items if pod.metadata.deletion_timestamp is None]


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]


@pytest.mark.gpu_nodes(count=1)
async def test_cuda_check_passes_writes_status_and_records_event(
    control_plane: ControlPlane,
    kube_api: ApiClient,
    namespace: str,
    gpu_nodes: SimulatedKubelet,
    workload_templates: str,
    tmp_path: Path,
) -> None:
    node = gpu_nodes.nodes[0].name
    argv = [
        "validate", "cuda", "--node", node, "--namespace", namespace,
        "--kubeconfig", str(control_plane.kubeconfig), "--output-dir", str(tmp_path),
        "--timeout", "30",
    ]  # fmt: skip

    code = await asyncio.to_thread(main, argv)

    assert code == 0
    assert status_path(tmp_path, "cuda").exists()
    assert await _workload_pods_left(kube_api, namespace, "cuda") == []
    events = await client.CoreV1Api(kube_api).list_namespaced_event(
        "default", field_selector=f"involvedObject.name={node}"
    )
    outcomes = [(e.involved_object.kind, e.reason, e.type, e.message) for e in events.items]
    assert outcomes == [("Node", "ValidationPassed", "Normal", "cuda validation passed")]


@pytest.mark.gpu_nodes(count=1)
async def test_cli_takes_timeout_and_image_from_overrides_and_records_a_warning_on_failure(
    control_plane: ControlPlane,
    kube_api: ApiClient,
    namespace: str,
    gpu_nodes: SimulatedKubelet,
    workload_templates: str,
    pod_history: PodHistory,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    node = gpu_nodes.nodes[0].name
    behavior = json.dumps({"cuda-validation": {"neverExits": True}})
    overrides = {"timeoutSeconds": 2, "annotations": {BEHAVIOR_ANNOTATION: behavior}}
    argv = [
        "validate", "cuda", "--node", node, "--namespace", namespace,
        "--kubeconfig", str(control_plane.kubeconfig), "--output-dir", str(tmp_path),
        "--overrides", json.dumps(overrides),
    ]  # fmt: skip

    # Far less than the default timeout (300 s): only the overrides' 2 s can end it in time.
    code = await asyncio.wait_for(asyncio.to_thread(main, argv), 60)

    assert code == 1
    assert "Timeout: no verdict on workload pod" in capsys.readouterr().err
    assert not status_path(tmp_path, "cuda").exists()
    [pod] = pod_history.workload_pods()
    images = {c["image"] for c in _containers(pod)}
    assert images == {ValidatorWorkloads().image}
    events = await client.CoreV1Api(kube_api).list_namespaced_event(
        "default", field_selector=f"involvedObject.name={node}"
    )
    [event] = events.items
    assert (event.involved_object.kind, event.reason, event.type) == (
        "Node",
        "ValidationFailed",
        "Warning",
    )
    assert event.message.startswith(f"no verdict on workload pod {pod['metadata']['name']}")


@pytest.mark.gpu_nodes(count=1)
async def test_plugin_check_passes_on_a_gpu(
    kube_api: ApiClient, namespace: str, gpu_nodes: SimulatedKubelet, workload_templates: str
) -> None:
    check = _check(namespace, gpu_nodes.nodes[0].name, check="plugin")

    assert await run_workload_check(kube_api, check, QUICK) == Passed()


# How Istio's injector leaves a workload pod of check {check}: its init containers, containers
# and phase when the agent has its verdict (and deletes the pod).
MESHES = [
    pytest.param(
        "classic",
        {},
        ["{check}-validation", "istio-init"],
        ["{check}-validation-done", "istio-proxy"],
        "Running",  # the proxy never exits
        id="classic-sidecar",
    ),
    pytest.param(
        "native",
        {},
        ["istio-init", "istio-proxy", "{check}-validation"],
        ["{check}-validation-done"],
        "Succeeded",  # the kubelet stopped the proxy
        id="native-sidecar",
    ),
    pytest.param(
        "classic",
        {"labels": {"sidecar.istio.io/inject": "false"}},
        ["{check}-validation"],
        ["{check}-validation-done"],
        "Succeeded",
        id="opted-out",
    ),
]


@pytest.mark.parametrize("check", ["cuda", "plugin"])
@pytest.mark.parametrize(
    ("mesh_injector", "overrides", "init_containers", "containers", "phase"),
    MESHES,
    indirect=["mesh_injector"],
)
@pytest.mark.gpu_nodes(count=1)
async def test_istio_sidecar_never_holds_the_check(
    kube_api: ApiClient,
    namespace: str,
    gpu_nodes: SimulatedKubelet,
    workload_templates: str,
    mesh_injector: MeshInjector,
    pod_history: PodHistory,
    check: str,
    overrides: dict[str, Any],
    init_containers: list[str],
    containers: list[str],
    phase: str,
) -> None:
    node = gpu_nodes.nodes[0].name

    result = await run_workload_check(
        kube_api, _check(namespace, node, check=check, overrides=overrides), QUICK
    )

    assert result == Passed()
    [pod] = pod_history.workload_pods(check)  # one pod: passed at once, no retry
    spec = pod["spec"]
    assert [c["name"] for c in spec["initContainers"]] == [
        n.format(check=check) for n in init_containers
    ]
    assert [c["name"] for c in spec["containers"]] == [n.format(check=check) for n in containers]
    sidecars = [c["name"] for c in spec["initContainers"] if c.get("restartPolicy") == "Always"]
    assert sidecars == (["istio-proxy"] if mesh_injector.native_sidecar and not overrides else [])
    assert bool(mesh_injector.injected) == (not overrides)
    assert pod_history.latest[pod["metadata"]["name"]]["status"]["phase"] == phase
    assert await _workload_pods_left(kube_api, namespace, check) == []


@pytest.mark.gpu_nodes(count=1)
async def test_sidecar_of_the_template_is_never_waited_for_and_may_restart(
    kube_api: ApiClient,
    namespace: str,
    gpu_nodes: SimulatedKubelet,
    pod_history: PodHistory,
) -> None:
    await client.CoreV1Api(kube_api).create_namespaced_config_map(
        namespace, {"metadata": {"name": "with-sidecar"}, "data": {"cuda.yaml": SIDECAR_POD}}
    )
    # The sidecar fails after 0.05 s every time (restarted twice by 0.75 s: more often than
    # max_restarts lets a container) while the work runs from 0.1 s to 1.3 s.
    behavior = {"shipper": {"exitCode": 1, "runSeconds": 0.05}, "work": {"runSeconds": 1.2}}
    check = dataclasses.replace(
        _check(namespace, gpu_nodes.nodes[0].name, behavior=behavior), configmap="with-sidecar"
    )

    result = await run_workload_check(kube_api, check, RetryPolicy(max_restarts=1))

    assert result == Passed()
    [pod] = pod_history.workload_pods()
    shipper = pod_history.latest[pod["metadata"]["name"]]["status"]["initContainerStatuses"][0]
    assert shipper["restartCount"] > 1, shipper


@pytest.mark.gpu_nodes(count=1)
async def test_pod_deleted_from_outside_is_replaced_then_passes(
    kube_api: ApiClient,
    namespace: str,
    gpu_nodes: SimulatedKubelet,
    workload_templates: str,
    pod_history: PodHistory,
) -> None:
    check = _check(
        namespace, gpu_nodes.nodes[0].name, behavior={"cuda-validation": {"runSeconds": 1.5}}
    )
    run = asyncio.create_task(run_workload_check(kube_api, check, QUICK))
    first = await _wait_for(pod_history, lambda: _running_workload_pod(pod_history))

    await client.CoreV1Api(kube_api).delete_namespaced_pod(first, namespace)
    result = await asyncio.wait_for(run, 30)

    assert result == Passed()
    names = [pod["metadata"]["name"] for pod in pod_history.workload_pods()]
    assert len(names) == 2
    assert names[0] == first
    assert await _workload_pods_left(kube_api, namespace, "cuda") == []


@pytest.mark.gpu_nodes(count=1)
async def test_pod_evicted_by_its_node_is_deleted_and_replaced_then_passes(
    kube_api: ApiClient,
    namespace: str,
    gpu_nodes: SimulatedKubelet,
    workload_templates: str,
    pod_history: PodHistory,
) -> None:
    # The first pod's work never ends, so its simulated kubelet has nothing more to report and
    # leaves the status the test writes alone; the replacement runs as usual.
    first_uid: list[str] = []

    def first_pod(pod: Mapping[str, Any]) -> bool:
        first_uid[:] = first_uid or [pod["metadata"]["uid"]]
        return bool(pod["metadata"]["uid"] == first_uid[0])

    gpu_nodes.set_behavior(
        behavior=ContainerBehavior(never_exits=True), match=first_pod, container="cuda-validation"
    )
    run = asyncio.create_task(
        run_workload_check(kube_api, _check(namespace, gpu_nodes.nodes[0].name), QUICK)
    )
    first = await _wait_for(pod_history, lambda: _running_workload_pod(pod_history))

    evicted = {"phase": "Failed", "reason": "Evicted", "message": "The node was low on memory."}
    core = client.CoreV1Api(kube_api)
    await core.patch_namespaced_pod_status(first, namespace, {"status": evicted})
    result = await asyncio.wait_for(run, 30)

    assert result == Passed()
    names = [pod["metadata"]["name"] for pod in pod_history.workload_pods()]
    assert len(names) == 2
    assert names[0] == first
    assert pod_history.latest[first]["status"]["reason"] == "Evicted"
    assert await _workload_pods_left(kube_api, namespace, "cuda") == []
    with pytest.raises(ApiException) as gone:
        await core.read_namespaced_pod(first, namespace)
    assert gone.value.status == 404


@pytest.mark.gpu_nodes(count=1)
async def test_pod_that_keeps_disappearing_fails_after_bounded_replacements(
    kube_api: ApiClient,
    namespace: str,
    gpu_nodes: SimulatedKubelet,
    workload_templates: str,
    pod_history: PodHistory,
) -> None:
    check = _check(
        namespace, gpu_nodes.nodes[0].name, behavior={"cuda-validation": {"neverExits": True}}
    )
    retry = RetryPolicy(max_recreations=2, backoff=0.1, watch_seconds=10)
    run = asyncio.create_task(run_workload_check(kube_api, check, retry))
    core = client.CoreV1Api(kube_api)
    deleted: set[str] = set()
    for _ in range(3):  # the first pod and both replacements
        name = await _wait_for(pod_history, lambda: _running_workload_pod(pod_history, deleted))
        deleted.add(name)
        await core.delete_namespaced_pod(name, namespace)

    result = await asyncio.wait_for(run, 30)

    assert isinstance(result, Failed)
    assert result.reason == "Disappeared"
    assert "3 cuda workload pods disappeared" in result.message
    assert len(pod_history.workload_pods()) == 3


@pytest.mark.gpu_nodes(count=1)
async def test_watch_survives_an_apiserver_restart(
    control_plane: ControlPlane,
    kube_api: ApiClient,
    namespace: str,
    gpu_nodes: SimulatedKubelet,
    workload_templates: str,
    pod_history: PodHistory,
) -> None:
    check = _check(
        namespace, gpu_nodes.nodes[0].name, behavior={"cuda-validation": {"runSeconds": 3}}
    )
    run = asyncio.create_task(run_workload_check(kube_api, check, QUICK))
    first = await _wait_for(pod_history, lambda: _running_workload_pod(pod_history))

    await control_plane.restart_apiserver()  # every open watch breaks
    result = await asyncio.wait_for(run, 30)

    assert result == Passed()
    assert [p["metadata"]["name"] for p in pod_history.workload_pods()] == [first]


@pytest.mark.gpu_nodes(count=1)
async def test_container_exiting_1_fails_with_its_exit_code(
    kube_api: ApiClient, namespace: str, gpu_nodes: SimulatedKubelet, workload_templates: str
) -> None:
    log = "".join(f"vectorAdd line {i}\n" for i in range(1, 31))
    behavior = {"cuda-validation": {"exitCode": 1, "log": log}}
    check = _check(namespace, gpu_nodes.nodes[0].name, behavior=behavior)

    result = await run_workload_check(kube_api, check, QUICK)

    assert isinstance(result, Failed)
    assert result.container == "cuda-validation"
    assert "container cuda-validation exited with code 1" in result.message
    last_lines = "".join(f"vectorAdd line {i}\n" for i in range(11, 31)).rstrip()
    assert result.message.endswith(f"last lines of the log of cuda-validation:\n{last_lines}")
    assert "vectorAdd line 10\n" not in result.message
    assert await _workload_pods_left(kube_api, namespace, "cuda") == []


@pytest.mark.gpu_nodes(count=1)
async def test_crash_looping_container_fails_quoting_its_previous_runs_log(
    kube_api: ApiClient, namespace: str, gpu_nodes: SimulatedKubelet, workload_templates: str
) -> None:
    await client.CoreV1Api(kube_api).create_namespaced_config_map(
        namespace, {"metadata": {"name": "retrying"}, "data": {"cuda.yaml": RETRYING_POD}}
    )
    behavior = {"work": {"exitCode": 2, "runSeconds": 0.05, "log": "out of memory\n"}}
    check = dataclasses.replace(
        _check(namespace, gpu_nodes.nodes[0].name, behavior=behavior), configmap="retrying"
    )

    result = await run_workload_check(kube_api, check, RetryPolicy(max_restarts=2))

    assert isinstance(result, Failed)
    assert result.reason == "CrashLoop"
    assert "container work exited with code 2" in result.message
    assert result.message.endswith("last lines of the log of work:\nout of memory")
    assert await _workload_pods_left(kube_api, namespace, "cuda") == []


@pytest.mark.gpu_nodes(count=1)
async def test_image_pull_error_fails_with_that_reason(
    kube_api: ApiClient, namespace: str, gpu_nodes: SimulatedKubelet, workload_templates: str
) -> None:
    behavior = {"cuda-validation": {"imagePullFails": True}}
    check = _check(namespace, gpu_nodes.nodes[0].name, behavior=behavior)

    result = await run_workload_check(kube_api, check, QUICK)

    assert isinstance(result, Failed)
    assert result.reason in ("ErrImagePull", "ImagePullBackOff")
    assert "image cuda-sample:vectoradd cannot be pulled" in result.message


@pytest.mark.gpu_nodes(count=1)
async def test_timeout_fails_saying_what_the_pod_waits_for(
    kube_api: ApiClient, namespace: str, gpu_nodes: SimulatedKubelet, workload_templates: str
) -> None:
    behavior = {"cuda-validation": {"neverExits": True}}
    check = _check(namespace, gpu_nodes.nodes[0].name, behavior=behavior, timeout=2)

    result = await run_workload_check(kube_api, check, QUICK)

    assert isinstance(result, Failed)
    assert result.reason == "Timeout"
    assert "cuda-validation: running" in result.message
    assert await _workload_pods_left(kube_api, namespace, "cuda") == []


@pytest.mark.gpu_nodes(count=2)
async def test_all_stale_pods_of_the_check_on_the_node_are_removed_first(
    kube_api: ApiClient,
    namespace: str,
    gpu_nodes: SimulatedKubelet,
    workload_templates: str,
    pod_history: PodHistory,
) -> None:
    node, other_node = (n.name for n in gpu_nodes.nodes)
    core = client.CoreV1Api(kube_api)
    held = await _stale_pod(core, namespace, node, "cuda", finalizers=[HOLD_FINALIZER])
    stale = [
        held,
        await _stale_pod(core, namespace, node, "cuda"),
        await _stale_pod(core, namespace, node, "cuda"),
    ]
    kept = [
        await _stale_pod(core, namespace, other_node, "cuda"),
        await _stale_pod(core, namespace, node, "plugin"),
    ]
    release = asyncio.create_task(_release_when_deleted(core, pod_history, namespace, held))

    result = await run_workload_check(kube_api, _check(namespace, node), QUICK)
    await asyncio.wait_for(release, 5)

    assert result == Passed()
    existing = {pod.metadata.name for pod in (await core.list_namespaced_pod(namespace)).items}
    assert not existing & set(stale)
    assert set(kept) <= existing
    earlier = {*stale, *kept}
    [workload] = [p for p in pod_history.workload_pods() if p["metadata"]["name"] not in earlier]
    events = pod_history.events
    held_gone = events.index(("DELETED", held))
    assert events.index(("ADDED", workload["metadata"]["name"])) > held_gone, events


async def _release_when_deleted(
    core: client.CoreV1Api, history: PodHistory, namespace: str, name: str
) -> None:
    """Once pod ``name`` is being deleted, hold it a little longer, then drop its finalizer."""
    await _wait_for(
        history, lambda: history.latest.get(name, {}).get("metadata", {}).get("deletionTimestamp")
    )
    await asyncio.sleep(1.5)
    remove = [{"op": "remove", "path": "/metadata/finalizers"}]
    await core.patch_namespaced_pod(name, namespace, remove)


@pytest.mark.gpu_nodes(count=1)
async def test_overrides_reach_every_container_and_init_container(
    kube_api: ApiClient,
    namespace: str,
    gpu_nodes: SimulatedKubelet,
    workload_templates: str,
    pod_history: PodHistory,
) -> None:
    resources = {"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"memory": "96Mi"}}
    overrides = {
        "labels": {"sidecar.istio.io/inject": "false"},
        "annotations": {"team": "gpu"},
        "resources": resources,
        "securityContext": {"runAsUser": 2000, "runAsNonRoot": True},
        "tolerations": [{"key": "dedicated", "operator": "Exists"}],
        "runtimeClassName": "nvidia-legacy",
    }
    owner = await _agent_pod(client.CoreV1Api(kube_api), namespace, gpu_nodes.nodes[0].name)
    check = _check(namespace, gpu_nodes.nodes[0].name, overrides=overrides, owner=owner)

    assert await run_workload_check(kube_api, check, QUICK) == Passed()

    [pod] = pod_history.workload_pods()
    for container in _containers(pod):
        assert container["resources"] == {
            "requests": {"cpu": "50m", "memory": "96Mi"},
            "limits": {"memory": "96Mi"},
        }, container["name"]
    assert pod["metadata"]["labels"]["sidecar.istio.io/inject"] == "false"
    assert pod["metadata"]["annotations"]["team"] == "gpu"
    # As created, before any admission webhook sees it: what PodPolicies target.
    assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == "validator-workloads"
    assert pod["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpuctrl"
    assert pod["spec"]["securityContext"] == {"runAsUser": 2000, "runAsNonRoot": True}
    assert {"key": "dedicated", "operator": "Exists"} in pod["spec"]["tolerations"]
    assert pod["spec"]["runtimeClassName"] == "nvidia-legacy"
    [reference] = pod["metadata"]["ownerReferences"]
    assert (reference["kind"], reference["name"], reference["uid"]) == (
        "Pod",
        owner.name,
        owner.uid,
    )


@pytest.mark.parametrize(
    ("data", "complaint"),
    [
        pytest.param(None, "the ConfigMap does not exist", id="no-configmap"),
        pytest.param({"plugin.yaml": "kind: Pod"}, "the ConfigMap has no such key", id="no-key"),
        pytest.param({"cuda.yaml": "kind: Pod\nspec: [\n"}, "line 3: not YAML", id="not-yaml"),
        pytest.param(
            {"cuda.yaml": "apiVersion: v1\nkind: Pod\n{% if %}\n"},
            "line 3: Jinja2 syntax error",
            id="jinja2-syntax",
        ),
        pytest.param(
            {"cuda.yaml": "apiVersion: v1\nkind: Pod\nmetadata: {name: '{{ gpu }}'}\n"},
            "line 3: unknown template variable(s) gpu",
            id="unknown-variable",
        ),
        pytest.param(
            {"cuda.yaml": "apiVersion: v1\nkind: ConfigMap\ndata: {}\n"},
            "line 2: not a Pod",
            id="not-a-pod",
        ),
        pytest.param(
            {"cuda.yaml": INVALID_POD},
            "the apiserver rejects the pod: ",
            id="invalid-pod",
        ),
        pytest.param(
            {"cuda.yaml": "apiVersion: v1\nkind: Pod\nmetadata: {name: '{{ 1 // 0 }}'}\n"},
            "line 3: cannot render: ZeroDivisionError",
            id="division-by-zero",
        ),
        pytest.param(
            {"cuda.yaml": "apiVersion: v1\nkind: Pod\n{% include 'plugin.yaml' %}\n"},
            "line 3: {% include %} is not allowed",
            id="include",
        ),
        pytest.param(
            {"cuda.yaml": "apiVersion: v1\nkind: Pod\nmetadata: {name: '{{ image|sh }}'}\n"},
            "line 3: unknown filter 'sh'",
            id="unknown-filter",
        ),
        pytest.param(
            {
                "cuda.yaml": "apiVersion: v1\nkind: Pod\nmetadata:\n"
                "  name: \"{{ cycler.__init__.__globals__.os.popen('id').read() }}\"\n"
            },
            "line 4: calls are not allowed",
            id="escape-to-a-shell",
        ),
        pytest.param(
            {
                "cuda.yaml": "apiVersion: v1\nkind: Pod\nmetadata:\n"
                "  name: '{{ image[\"__mro__\"] }}'\n"
            },
            "line 4: cannot render: 'str object' has no attribute '__mro__'",
            id="dunder-item",
        ),
    ],
)
@pytest.mark.gpu_nodes(count=1)
async def test_template_error_exits_2_naming_configmap_key_and_line_and_creates_no_pod(
    control_plane: ControlPlane,
    kube_api: ApiClient,
    namespace: str,
    gpu_nodes: SimulatedKubelet,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    data: dict[str, str] | None,
    complaint: str,
) -> None:
    core = client.CoreV1Api(kube_api)
    if data is not None:
        await core.create_namespaced_config_map(
            namespace, {"metadata": {"name": "my-templates"}, "data": data}
        )
    argv = [
        "validate", "cuda", "--node", gpu_nodes.nodes[0].name, "--namespace", namespace,
        "--kubeconfig", str(control_plane.kubeconfig), "--output-dir", str(tmp_path),
        "--templates-configmap", "my-templates",
    ]  # fmt: skip

    code = await asyncio.to_thread(main, argv)

    assert code == 2
    err = capsys.readouterr().err
    assert f"ConfigMap {namespace}/my-templates, key cuda.yaml" in err
    assert complaint in err
    if "apiserver" in complaint:
        assert 'spec.containers[0].name: Invalid value: "Not_A_Label"' in err
    assert (await core.list_namespaced_pod(namespace)).items == []
    assert not status_path(tmp_path, "cuda").exists()
    assert "Traceback" not in err


@pytest.mark.gpu_nodes(count=1)
async def test_invalid_label_in_the_overrides_exits_2_naming_the_overrides_field(
    control_plane: ControlPlane,
    kube_api: ApiClient,
    namespace: str,
    gpu_nodes: SimulatedKubelet,
    workload_templates: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [
        "validate", "cuda", "--node", gpu_nodes.nodes[0].name, "--namespace", namespace,
        "--kubeconfig", str(control_plane.kubeconfig), "--output-dir", str(tmp_path),
        "--overrides", json.dumps({"labels": {"team": "gpu team"}}),
    ]  # fmt: skip

    code = await asyncio.to_thread(main, argv)

    assert code == 2
    err = capsys.readouterr().err
    assert "--overrides: labels[team]: 'gpu team' is not a valid label value" in err
    assert "ConfigMap" not in err
    assert (await client.CoreV1Api(kube_api).list_namespaced_pod(namespace)).items == []


@pytest.mark.gpu_nodes(count=1)
async def test_overrides_only_the_apiserver_rejects_are_blamed_not_the_template(
    kube_api: ApiClient, namespace: str, gpu_nodes: SimulatedKubelet, workload_templates: str
) -> None:
    # A security context the schema leaves open but the apiserver refuses.
    check = _check(
        namespace, gpu_nodes.nodes[0].name, overrides={"securityContext": {"runAsUser": -1}}
    )

    with pytest.raises(InvalidOverrides) as caught:
        await run_workload_check(kube_api, check, QUICK)

    message = str(caught.value)
    assert message.startswith("securityContext: the apiserver rejects the pod: ")
    assert "spec.securityContext.runAsUser" in message
    assert (await client.CoreV1Api(kube_api).list_namespaced_pod(namespace)).items == []


@pytest.mark.gpu_nodes(count=50)
async def test_fifty_nodes_validate_at_once(
    control_plane: ControlPlane,
    kube_api: ApiClient,
    namespace: str,
    gpu_nodes: SimulatedKubelet,
    workload_templates: str,
) -> None:
    async def validate(node: str) -> Passed | Failed:
        async with await new_api_client(control_plane.kubeconfig) as api:  # one agent, one client
            return await run_workload_check(api, _check(namespace, node, timeout=60), QUICK)

    results = await asyncio.gather(*(validate(node.name) for node in gpu_nodes.nodes))

    assert results == [Passed()] * 50
    assert await _workload_pods_left(kube_api, namespace, "cuda") == []


async def _wait_for(history: PodHistory, find: Any) -> Any:
    """Wait (up to 20 s) until ``find()`` returns something, re-checking on every pod change."""
    async with asyncio.timeout(20):
        while (found := find()) is None:
            history.changed.clear()
            await history.changed.wait()
    return found


def _running_workload_pod(
    history: PodHistory, skip: frozenset[str] | set[str] = frozenset()
) -> str | None:
    """A workload pod whose init container is running (mid-run), if there is one."""
    for pod in history.workload_pods():
        name = pod["metadata"]["name"]
        latest = history.latest[name]
        if name not in skip and latest.get("status", {}).get("phase") in ("Pending", "Running"):
            statuses = latest["status"].get("initContainerStatuses") or []
            if any("running" in (s.get("state") or {}) for s in statuses):
                return name
    return None


async def _stale_pod(
    core: client.CoreV1Api,
    namespace: str,
    node: str,
    check: str,
    finalizers: list[str] | None = None,
) -> str:
    """A workload pod left over by an earlier run: labelled as one, never finishing."""
    pod = await core.create_namespaced_pod(
        namespace,
        {
            "metadata": {
                "generateName": f"stale-{check}-",
                "finalizers": finalizers or [],
                "labels": {
                    "app.kubernetes.io/managed-by": "gpuctrl",
                    "gpuctrl.io/validation": check,
                },
                "annotations": {BEHAVIOR_ANNOTATION: json.dumps({"work": {"neverExits": True}})},
            },
            "spec": {
                "nodeName": node,
                "restartPolicy": "Never",
                "containers": [{"name": "work", "image": "cuda-sample:vectoradd"}],
            },
        },
    )
    return pod.metadata.name


async def _agent_pod(core: client.CoreV1Api, namespace: str, node: str) -> PodOwner:
    """A pod standing for the validator DaemonSet's pod the agent runs in."""
    pod = await core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"generateName": "gpuctrl-validator-"},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "sleep", "image": "gpuctrl:latest"}],
            },
        },
    )
    return PodOwner(pod.metadata.name, pod.metadata.uid)
