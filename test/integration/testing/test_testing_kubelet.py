"""The simulated kubelet against the real control plane: nodes, DaemonSets, pod lifecycles."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from gpuctrl.testing import (
    BEHAVIOR_ANNOTATION,
    ContainerBehavior,
    SimulatedKubelet,
    SimulatedNode,
    eventually,
)

GPU_LABEL = "feature.node.kubernetes.io/pci-10de.present"


def pod_manifest(name: str, restart_policy: str, **extra: Any) -> dict[str, Any]:
    containers = extra.pop("containers", [{"name": "main", "image": "busybox:1.36"}])
    return {
        "metadata": {"name": name, **extra.pop("metadata", {})},
        "spec": {"restartPolicy": restart_policy, "containers": containers, **extra},
    }


async def read_pod(api: ApiClient, namespace: str, name: str) -> dict[str, Any]:
    response = await client.CoreV1Api(api).read_namespaced_pod(
        name, namespace, _preload_content=False
    )
    async with response:
        return json.loads(await response.read())


def container_statuses(pod: dict[str, Any]) -> list[dict[str, Any]]:
    statuses = pod.get("status", {}).get("containerStatuses")
    assert statuses, f"the kubelet has not reported on pod {pod['metadata']['name']} yet"
    return statuses


async def create_pod_on(
    api: ApiClient, namespace: str, node: str, manifest: dict[str, Any]
) -> None:
    manifest["spec"]["nodeName"] = node
    await client.CoreV1Api(api).create_namespaced_pod(namespace, manifest)


async def test_nodes_look_like_ready_gpu_nodes(gpu_nodes: SimulatedKubelet, kube_api: ApiClient):
    core = client.CoreV1Api(kube_api)
    for spec in gpu_nodes.nodes:
        node = await core.read_node(spec.name)
        labels = node.metadata.labels
        assert labels[GPU_LABEL] == "true"
        assert labels["feature.node.kubernetes.io/system-os_release.ID"] == spec.os_id
        assert labels["feature.node.kubernetes.io/system-os_release.VERSION_ID"] == spec.os_version
        assert labels["feature.node.kubernetes.io/kernel-version.full"] == spec.kernel_version
        assert not node.spec.taints
        assert node.status.capacity["nvidia.com/gpu"] == "1"
        assert node.status.allocatable["nvidia.com/gpu"] == "1"
        assert node.status.node_info.container_runtime_version.startswith("containerd://1.7.")
        assert node.status.node_info.os_image == spec.os_image
        ready = {c.type: c.status for c in node.status.conditions}["Ready"]
        assert ready == "True"
        lease = await client.CoordinationV1Api(kube_api).read_namespaced_lease(
            spec.name, "kube-node-lease"
        )
        assert lease.spec.holder_identity == spec.name
    assert {(n.os_id, n.os_version) for n in gpu_nodes.nodes} == {
        ("ubuntu", "22.04"),
        ("ubuntu", "24.04"),
    }


@pytest.mark.gpu_nodes(count=3)
async def test_daemonset_runs_one_ready_pod_per_matching_node(
    gpu_nodes: SimulatedKubelet, kube_api: ApiClient, namespace: str
):
    # A node without GPUs (and without the NFD label) must get no pod.
    cpu_node = SimulatedNode(f"{gpu_nodes.nodes[0].name}-cpu", gpus=0)
    await gpu_nodes.add_nodes([cpu_node])
    gpu_names = {n.name for n in gpu_nodes.nodes if n.gpus}
    labels = {"app": "probe"}
    daemonset = {
        "metadata": {"name": "probe"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {GPU_LABEL: "true"},
                    "initContainers": [{"name": "wait", "image": "busybox:1.36"}],
                    "containers": [{"name": "probe", "image": "busybox:1.36"}],
                },
            },
        },
    }
    await client.AppsV1Api(kube_api).create_namespaced_daemon_set(namespace, daemonset)
    core = client.CoreV1Api(kube_api)

    async def pods_ready() -> list[Any]:
        pods = (await core.list_namespaced_pod(namespace, label_selector="app=probe")).items
        ours = [p for p in pods if p.spec.node_name in gpu_names | {cpu_node.name}]
        assert sorted(p.spec.node_name for p in ours) == sorted(gpu_names)
        for pod in ours:
            assert pod.status.phase == "Running"
            conditions = {c.type: c.status for c in pod.status.conditions}
            assert conditions == {
                "PodScheduled": "True",
                "Initialized": "True",
                "ContainersReady": "True",
                "Ready": "True",
            }
        return ours

    pods = await eventually(pods_ready, within=60)
    for pod in pods:
        assert pod.status.init_container_statuses[0].state.terminated.reason == "Completed"
        assert pod.status.container_statuses[0].state.running.started_at is not None
        assert pod.status.pod_ip
        assert pod.status.host_ip
    # Bound by the real scheduler: the DaemonSet controller in 1.20 sets node affinity, not
    # nodeName; the scheduler binds and reports it.
    assert all(p.spec.affinity.node_affinity for p in pods)

    async def scheduled_events() -> None:
        events = (await core.list_namespaced_event(namespace)).items
        scheduled = {e.involved_object.name for e in events if e.reason == "Scheduled"}
        assert scheduled >= {p.metadata.name for p in pods}

    await eventually(scheduled_events, within=10)

    async def daemonset_ready() -> None:
        ds = await client.AppsV1Api(kube_api).read_namespaced_daemon_set("probe", namespace)
        assert ds.status.number_ready == len(gpu_names)

    await eventually(daemonset_ready, within=30)


async def test_never_exiting_container_keeps_running_and_exit_1_fails_pod(
    gpu_nodes: SimulatedKubelet, kube_api: ApiClient, namespace: str
):
    node = gpu_nodes.nodes[0].name
    annotation = json.dumps({"sidecar": {"neverExits": True}, "main": {"exitCode": 0}})
    containers = [
        {"name": "main", "image": "busybox:1.36"},
        {"name": "sidecar", "image": "istio/proxyv2:1.20"},
    ]
    await create_pod_on(
        kube_api,
        namespace,
        node,
        pod_manifest(
            "meshed-job",
            "Never",
            containers=containers,
            metadata={"annotations": {BEHAVIOR_ANNOTATION: annotation}},
        ),
    )
    gpu_nodes.set_behavior(
        match={"fail": "yes"}, container="main", behavior=ContainerBehavior(exit_code=1)
    )
    await create_pod_on(
        kube_api,
        namespace,
        node,
        pod_manifest("failing", "Never", metadata={"labels": {"fail": "yes"}}),
    )

    async def failed() -> dict[str, Any]:
        pod = await read_pod(kube_api, namespace, "failing")
        assert pod["status"]["phase"] == "Failed"
        return pod

    pod = await eventually(failed)
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 1
    assert terminated["reason"] == "Error"
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0

    meshed = await read_pod(kube_api, namespace, "meshed-job")
    statuses = {s["name"]: s for s in meshed["status"]["containerStatuses"]}
    assert meshed["status"]["phase"] == "Running"
    assert statuses["main"]["state"]["terminated"]["exitCode"] == 0
    assert "running" in statuses["sidecar"]["state"]


async def test_native_sidecar_restarts_beside_a_job_then_is_stopped_when_it_succeeds(
    gpu_nodes: SimulatedKubelet, kube_api: ApiClient, namespace: str
):
    # proxy runs 0.05-1.05 s, exits 0 and runs again from 1.25 s; setup 0.1-0.2 s; main
    # 0.25-1.75 s, then the pod has succeeded and its proxy is stopped.
    annotation = json.dumps(
        {"proxy": {"runSeconds": 1}, "setup": {"runSeconds": 0.1}, "main": {"runSeconds": 1.5}}
    )
    init = [
        {"name": "proxy", "image": "istio/proxyv2:1.20", "restartPolicy": "Always"},
        {"name": "setup", "image": "busybox:1.36"},
    ]
    manifest = pod_manifest(
        "native-meshed-job",
        "Never",
        initContainers=init,
        metadata={"annotations": {BEHAVIOR_ANNOTATION: annotation}},
    )
    await create_pod_on(kube_api, namespace, gpu_nodes.nodes[0].name, manifest)

    await eventually(lambda: _phase_is(kube_api, namespace, "native-meshed-job", "Succeeded"))

    # The apiserver took every status: the restart of a sidecar in a Never pod among them.
    pod = await read_pod(kube_api, namespace, "native-meshed-job")
    proxy, setup = pod["status"]["initContainerStatuses"]
    assert proxy["restartCount"] == 1, proxy
    assert proxy["lastState"]["terminated"]["exitCode"] == 0, proxy
    assert proxy["state"]["terminated"]["exitCode"] == 0, proxy
    assert setup["state"]["terminated"]["exitCode"] == 0, setup
    assert container_statuses(pod)[0]["state"]["terminated"]["exitCode"] == 0


async def test_on_failure_restarts_and_unpullable_image_backs_off(
    gpu_nodes: SimulatedKubelet, kube_api: ApiClient, namespace: str
):
    node = gpu_nodes.nodes[1].name
    crash = json.dumps({"main": {"exitCode": 3, "runSeconds": 0.05}})
    unpullable = json.dumps({"main": {"imagePullFails": True}})
    for name, annotation in (("crashing", crash), ("unpullable", unpullable)):
        metadata = {"annotations": {BEHAVIOR_ANNOTATION: annotation}}
        await create_pod_on(
            kube_api, namespace, node, pod_manifest(name, "OnFailure", metadata=metadata)
        )

    async def restarted() -> None:
        pod = await read_pod(kube_api, namespace, "crashing")
        status = container_statuses(pod)[0]
        assert status["restartCount"] >= 2
        assert status["lastState"]["terminated"]["exitCode"] == 3
        assert pod["status"]["phase"] == "Running"

    async def backing_off() -> None:
        pod = await read_pod(kube_api, namespace, "unpullable")
        waiting = container_statuses(pod)[0]["state"]["waiting"]
        assert waiting["reason"] == "ImagePullBackOff"
        assert pod["status"]["phase"] == "Pending"

    await eventually(restarted)
    await eventually(backing_off)


async def test_container_logs_are_served_through_the_apiserver(
    gpu_nodes: SimulatedKubelet, kube_api: ApiClient, namespace: str
):
    node = gpu_nodes.nodes[0].name
    log = "".join(f"line {i}\n" for i in range(1, 6))
    crash = json.dumps({"main": {"exitCode": 3, "runSeconds": 0.05, "log": log}})
    metadata = {"annotations": {BEHAVIOR_ANNOTATION: crash}}
    await create_pod_on(
        kube_api, namespace, node, pod_manifest("talker", "OnFailure", metadata=metadata)
    )
    await create_pod_on(kube_api, namespace, node, pod_manifest("quiet", "Always"))
    core = client.CoreV1Api(kube_api)

    async def restarted() -> None:
        pod = await read_pod(kube_api, namespace, "talker")
        assert container_statuses(pod)[0]["restartCount"] >= 1

    await eventually(restarted)
    await eventually(lambda: _phase_is(kube_api, namespace, "quiet", "Running"))

    assert await core.read_namespaced_pod_log("talker", namespace) == log
    tail = await core.read_namespaced_pod_log("talker", namespace, tail_lines=2, previous=True)
    assert tail == "line 4\nline 5\n"
    assert await core.read_namespaced_pod_log("quiet", namespace) == ""
    with pytest.raises(ApiException) as refused:
        await core.read_namespaced_pod_log("quiet", namespace, previous=True)
    assert refused.value.status == 400
    message = json.loads(refused.value.body)["message"]
    assert message == 'previous terminated container "main" in pod "quiet" not found'


async def test_invalid_behavior_annotation_is_reported_in_pod_status(
    gpu_nodes: SimulatedKubelet, kube_api: ApiClient, namespace: str
):
    metadata = {"annotations": {BEHAVIOR_ANNOTATION: '{"mian": {"exitCode": 1}}'}}
    await create_pod_on(
        kube_api,
        namespace,
        gpu_nodes.nodes[0].name,
        pod_manifest("typo", "Never", metadata=metadata),
    )

    async def reported() -> None:
        pod = await read_pod(kube_api, namespace, "typo")
        waiting = container_statuses(pod)[0]["state"]["waiting"]
        assert waiting["reason"] == "CreateContainerConfigError"
        assert "mian" in waiting["message"]

    await eventually(reported)


async def test_deleted_pod_is_finalized(
    gpu_nodes: SimulatedKubelet, kube_api: ApiClient, namespace: str
):
    core = client.CoreV1Api(kube_api)
    await create_pod_on(
        kube_api, namespace, gpu_nodes.nodes[0].name, pod_manifest("doomed", "Always")
    )
    await eventually(lambda: _phase_is(kube_api, namespace, "doomed", "Running"))
    await core.delete_namespaced_pod("doomed", namespace)  # default grace period: 30 s

    async def gone() -> None:
        names = [p.metadata.name for p in (await core.list_namespaced_pod(namespace)).items]
        assert "doomed" not in names

    await eventually(gone, within=10)


async def _phase_is(api: ApiClient, namespace: str, name: str, phase: str) -> None:
    pod = await read_pod(api, namespace, name)
    assert pod["status"].get("phase") == phase


async def test_removed_nodes_are_deleted(control_plane, kube_api: ApiClient):
    core = client.CoreV1Api(kube_api)
    nodes = [
        SimulatedNode("removal-check-a"),
        SimulatedNode("removal-check-b", os_id="rhel", os_version="9.4"),
    ]
    async with SimulatedKubelet(control_plane.kubeconfig, nodes) as kubelet:
        await kubelet.remove_nodes(["removal-check-a"])
        names = {n.metadata.name for n in (await core.list_node()).items}
        assert "removal-check-a" not in names
        assert "removal-check-b" in names
    names = {n.metadata.name for n in (await core.list_node()).items}
    assert not names & {"removal-check-a", "removal-check-b"}
