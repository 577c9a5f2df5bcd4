"""Process-backed containers of the simulated kubelet on the real control plane (bubblewrap).

What runs is real: a shell or ``gpuctrl toolkit`` as a local process in a sandbox, with the
pod's environment, volumes (``hostPath`` from the node's own folder) and ServiceAccount.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from gpuctrl.testing import BEHAVIOR_ANNOTATION, ContainerBehavior, SimulatedKubelet, eventually

RUN_FOR_REAL = json.dumps({"main": {"process": True}})
# The toolkit user story's containerd config: a runc runtime with SystemdCgroup, as written.
CONTAINERD_CONFIG = """\
version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    SystemdCgroup = true
"""


async def _read_pod(api: ApiClient, namespace: str, name: str) -> dict[str, Any]:
    response = await client.CoreV1Api(api).read_namespaced_pod(
        name, namespace, _preload_content=False
    )
    async with response:
        return json.loads(await response.read())


async def _terminated(api: ApiClient, namespace: str, name: str) -> dict[str, Any]:
    pod = await _read_pod(api, namespace, name)
    statuses = pod.get("status", {}).get("containerStatuses") or [{}]
    terminated = statuses[0].get("state", {}).get("terminated")
    assert terminated, f"pod {name} has not finished: {pod.get('status')}"
    return dict(terminated)


async def _ready(api: ApiClient, namespace: str, name: str) -> None:
    pod = await _read_pod(api, namespace, name)
    conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
    assert conditions.get("Ready") == "True", pod.get("status")


async def _gone(api: ApiClient, namespace: str, name: str) -> None:
    pods = await client.CoreV1Api(api).list_namespaced_pod(namespace)
    assert name not in [p.metadata.name for p in pods.items]


async def _log(core: client.CoreV1Api, namespace: str, name: str) -> str:
    """The pod's log; an AssertionError (try again) while its container waits to start."""
    try:
        return str(await core.read_namespaced_pod_log(name, namespace))
    except ApiException as error:
        raise AssertionError(f"no log of {name} yet: {error.status} {error.body}") from error


def _exists(path: str) -> bool:
    return Path(path).exists()


def _shell_pod(name: str, node: str, script: str, **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "shell", "command": ["sh", "-c", script]}
    container.update(spec.pop("container", {}))
    return {
        "metadata": {"name": name, "annotations": {BEHAVIOR_ANNOTATION: RUN_FOR_REAL}},
        "spec": {
            "nodeName": node,
            "restartPolicy": spec.pop("restartPolicy", "Never"),
            "containers": [container],
            **spec,
        },
    }


@pytest.mark.gpu_nodes(count=1)
async def test_process_sees_env_volumes_and_read_only_mounts_and_its_log_is_served(
    gpu_nodes: SimulatedKubelet, kube_api: ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_api)
    node = gpu_nodes.nodes[0]
    assert node.root is not None
    (node.root / "etc/gpu").mkdir(parents=True)
    (node.root / "etc/gpu/site.conf").write_text("seeded by the test\n")
    await core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "settings"}, "data": {"greeting": "hello", "a.txt": "A"}}
    )
    await core.create_namespaced_secret(
        namespace, {"metadata": {"name": "creds"}, "stringData": {"password": "s3cret"}}
    )
    script = (
        'echo "greeting=$GREETING password=$PASSWORD node=$NODE pod=$POD ns=$NS ip=$IP '
        'derived=$DERIVED args=$0"; '
        "cat /host-etc/site.conf /settings/a.txt; echo; "
        "touch /host-etc/written 2>/dev/null && echo ro-violated || echo ro-refused; "
        "touch /state/written && echo rw-written; "
        "test -e /var/log && echo host-visible || echo host-hidden; "
        "cat /creds/password; echo; "
        "touch /settings/x 2>/dev/null && echo cm-writable || echo cm-read-only; "
        "cd /var/run/secrets/kubernetes.io/serviceaccount; "
        'test -s token && test -s ca.crt && echo "token-present ns=$(cat namespace)"'
    )
    env = [
        {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "greeting"}}},  # noqa: E501
        {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "DERIVED", "value": "$(GREETING)-world"},
    ]  # fmt: skip
    pod = _shell_pod(
        "inspector",
        node.name,
        script,
        container={
            "env": env,
            "args": ["$(NODE)"],
            "volumeMounts": [
                {"name": "host-etc", "mountPath": "/host-etc", "readOnly": True},
                {"name": "state", "mountPath": "/state"},
                {"name": "settings", "mountPath": "/settings"},
                {"name": "creds", "mountPath": "/creds"},
            ],
        },
        volumes=[
            {"name": "host-etc", "hostPath": {"path": "/etc/gpu", "type": "Directory"}},
            {"name": "state", "hostPath": {"path": "/var/lib/state", "type": "DirectoryOrCreate"}},
            {"name": "settings", "configMap": {"name": "settings"}},
            {"name": "creds", "secret": {"secretName": "creds", "defaultMode": 0o400}},
        ],
    )
    await core.create_namespaced_pod(namespace, pod)

    terminated = await eventually(lambda: _terminated(kube_api, namespace, "inspector"))

    assert terminated["exitCode"] == 0
    log = await core.read_namespaced_pod_log("inspector", namespace)
    status = (await _read_pod(kube_api, namespace, "inspector"))["status"]
    lines = log.splitlines()
    assert lines[0] == (
        f"greeting=hello password=s3cret node={node.name} pod=inspector ns={namespace} "
        f"ip={status['podIP']} derived=hello-world args={node.name}"
    )
    assert lines[1:] == [
        "seeded by the test",
        "A",
        "ro-refused",
        "rw-written",
        "host-hidden",
        "s3cret",
        "cm-read-only",
        f"token-present ns={namespace}",
    ]
    assert (node.root / "var/lib/state/written").exists()
    assert not (node.root / "etc/gpu/written").exists()
    assert not _exists("/host-etc"), "a mount point was made on the real disk"


@pytest.mark.gpu_nodes(count=1)
async def test_exit_code_is_the_containers_and_a_missing_key_is_a_config_error(
    gpu_nodes: SimulatedKubelet, kube_api: ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_api)
    node = gpu_nodes.nodes[0].name
    await core.create_namespaced_pod(namespace, _shell_pod("fails", node, "echo bye >&2; exit 3"))
    missing = {"configMapKeyRef": {"name": "absent", "key": "k"}}
    broken = _shell_pod(
        "unconfigured", node, "true", container={"env": [{"name": "X", "valueFrom": missing}]}
    )
    await core.create_namespaced_pod(namespace, broken)

    terminated = await eventually(lambda: _terminated(kube_api, namespace, "fails"))

    assert (terminated["exitCode"], terminated["reason"]) == (3, "Error")
    assert await core.read_namespaced_pod_log("fails", namespace) == "bye\n"

    async def config_error() -> None:
        pod = await _read_pod(kube_api, namespace, "unconfigured")
        waiting = pod["status"]["containerStatuses"][0]["state"]["waiting"]
        assert waiting["reason"] == "CreateContainerConfigError"
        assert waiting["message"] == 'configmap "absent" not found'

    await eventually(config_error)
    # As a kubelet does, it tries again: once the ConfigMap is there the container runs.
    await core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "absent"}, "data": {"k": "v"}}
    )
    terminated = await eventually(lambda: _terminated(kube_api, namespace, "unconfigured"))
    assert terminated["exitCode"] == 0


@pytest.mark.gpu_nodes(count=1)
async def test_service_account_token_reaches_the_apiserver_as_the_pod(
    gpu_nodes: SimulatedKubelet, kube_api: ApiClient, namespace: str
) -> None:
    core, rbac = client.CoreV1Api(kube_api), client.RbacAuthorizationV1Api(kube_api)
    await core.create_namespaced_service_account(namespace, {"metadata": {"name": "agent"}})
    await rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "read-pods"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
        },
    )
    await rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "agent-reads-pods"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "read-pods",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "agent", "namespace": namespace}],
        },
    )  # fmt: skip
    user = f"system:serviceaccount:{namespace}:agent"

    async def bound() -> None:  # the RBAC authorizer's cache has seen the binding
        review = {
            "spec": {
                "user": user,
                "resourceAttributes": {"namespace": namespace, "verb": "get", "resource": "pods"},
            }
        }
        answer = await client.AuthorizationV1Api(kube_api).create_subject_access_review(review)
        assert answer.status.allowed

    await eventually(bound)
    # gpuctrl's own client, inside the sandbox, configured as in a real pod: in-cluster, from
    # the kube-api-access volume ServiceAccount admission added and $KUBERNETES_SERVICE_HOST.
    program = (
        "import asyncio, os\n"
        "from gpuctrl.runtime import Client, Forbidden, Resource, new_api_client\n"
        "async def main():\n"
        "    api = await new_api_client()\n"
        "    pods = Resource('v1', 'Pod', 'pods')\n"
        "    me = await Client(api).get(pods, os.environ['POD'], os.environ['NS'])\n"
        "    print('read', me['metadata']['name'])\n"
        "    try:\n"
        "        await Client(api).list(Resource('v1', 'Secret', 'secrets'), os.environ['NS'])\n"
        "    except Forbidden:\n"
        "        print('secrets forbidden')\n"
        "    await api.close()\n"
        "asyncio.run(main())\n"
    )
    env = [
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]
    pod = _shell_pod("caller", gpu_nodes.nodes[0].name, "", serviceAccountName="agent")
    pod["spec"]["containers"][0].update(command=["python", "-c", program], env=env)
    await core.create_namespaced_pod(namespace, pod)

    terminated = await eventually(lambda: _terminated(kube_api, namespace, "caller"), within=60)

    log = await core.read_namespaced_pod_log("caller", namespace)
    assert terminated["exitCode"] == 0, log
    assert log == "read caller\nsecrets forbidden\n"


@pytest.mark.gpu_nodes(count=1)
async def test_deletion_sends_sigterm_and_waits_the_grace_period(
    gpu_nodes: SimulatedKubelet, kube_api: ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_api)
    node = gpu_nodes.nodes[0]
    assert node.root is not None
    script = (
        "trap 'echo got TERM; sleep 1; echo cleaned > /out/cleaned; exit 0' TERM; "
        "echo up > /out/up; while true; do sleep 0.1; done"
    )
    mounts = {"volumeMounts": [{"name": "out", "mountPath": "/out"}]}
    volumes = [{"name": "out", "hostPath": {"path": "/out"}}]
    for name, grace in (("graceful", 10), ("hurried", 0.2)):
        pod = _shell_pod(name, node.name, script.replace("/out", f"/out/{name}"), container=mounts)
        pod["spec"].update(restartPolicy="Always", volumes=volumes)
        pod["spec"]["terminationGracePeriodSeconds"] = 10
        (node.root / "out" / name).mkdir(parents=True)
        await core.create_namespaced_pod(namespace, pod)
        await eventually(lambda name=name: _ready(kube_api, namespace, name))
        # Written once the trap is set (a SIGTERM before it would be lost: PID 1).
        await eventually((node.root / "out" / name / "up").exists)
        await core.delete_namespaced_pod(name, namespace, grace_period_seconds=int(grace))
        await eventually(lambda name=name: _gone(kube_api, namespace, name), within=20)

    # The handler ran to its end within the grace period; with none left it was killed.
    assert (node.root / "out/graceful/cleaned").read_text() == "cleaned\n"
    assert not (node.root / "out/hurried/cleaned").exists()
    # What the processes wrote outlives their pods, as a kubelet's /var/log/pods does.
    assert gpu_nodes.process_logs(namespace, "graceful") == {"main/0": "got TERM\n"}


@pytest.mark.gpu_nodes(count=1)
async def test_sidecars_of_a_finished_pod_get_sigterm_last_declared_first(
    gpu_nodes: SimulatedKubelet, kube_api: ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_api)
    node = gpu_nodes.nodes[0]
    assert node.root is not None
    (node.root / "out").mkdir()
    mounts = [{"name": "out", "mountPath": "/out"}]
    sidecars = [
        {
            "name": name,
            "image": "shell",
            "restartPolicy": "Always",
            "command": ["sh", "-c", f"trap 'echo {name} >> /out/stopped; exit {code}' TERM; "
                        f"touch /out/{name}-up; while true; do sleep 0.1; done"],
            "volumeMounts": mounts,
        }
        for name, code in (("first", 3), ("second", 4))
    ]  # fmt: skip
    # The job waits until both handlers are set: a SIGTERM before would be lost (PID 1).
    script = "while ! test -e /out/first-up -a -e /out/second-up; do sleep 0.1; done"
    pod = _shell_pod("finishing", node.name, script, container={"volumeMounts": mounts})
    pod["spec"].update(
        initContainers=sidecars, volumes=[{"name": "out", "hostPath": {"path": "/out"}}]
    )
    behaviors = {"first": {"process": True}, "second": {"process": True}, "main": {"process": True}}
    pod["metadata"]["annotations"][BEHAVIOR_ANNOTATION] = json.dumps(behaviors)
    await core.create_namespaced_pod(namespace, pod)

    async def stopped() -> list[dict[str, Any]]:
        status = (await _read_pod(kube_api, namespace, "finishing")).get("status", {})
        assert status.get("phase") == "Succeeded", status
        statuses = status["initContainerStatuses"]
        assert all("terminated" in s["state"] for s in statuses), statuses
        return list(statuses)

    first, second = await eventually(stopped, within=20)

    assert (node.root / "out/stopped").read_text() == "second\nfirst\n"
    # Each exit code is its process's own.
    assert first["state"]["terminated"]["exitCode"] == 3
    assert second["state"]["terminated"]["exitCode"] == 4


@pytest.mark.gpu_nodes(count=1)
async def test_gpuctrl_toolkit_daemonset_installs_cleans_up_on_delete_and_survives_power_cut(
    gpu_nodes: SimulatedKubelet, kube_api: ApiClient, namespace: str
) -> None:
    node = gpu_nodes.nodes[0]
    assert node.root is not None
    config = node.root / "etc/containerd/config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(CONTAINERD_CONFIG)
    gpu_nodes.set_behavior(behavior=ContainerBehavior(process=True), image="*/gpuctrl:*")
    args = [
        "toolkit", "run", "--host-root", "/host", "--config", "/etc/containerd/config.toml",
        "--state-dir", "/run/gpuctrl/toolkit", "--runtime-dir", "/usr/local/nvidia/toolkit",
        "--restart-mode", "none",
    ]  # fmt: skip
    labels = {"app": "toolkit"}
    daemonset = {
        "metadata": {"name": "toolkit"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 30,
                    "containers": [
                        {
                            "name": "toolkit",
                            "image": "ghcr.io/gpuctrl/gpuctrl:test",
                            "command": ["gpuctrl"],
                            "args": args,
                            "volumeMounts": [{"name": "host", "mountPath": "/host"}],
                        }
                    ],
                    "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
                },
            },
        },
    }
    apps, core = client.AppsV1Api(kube_api), client.CoreV1Api(kube_api)
    await apps.create_namespaced_daemon_set(namespace, daemonset)

    async def installed() -> str:
        pods = (await core.list_namespaced_pod(namespace, label_selector="app=toolkit")).items
        assert len(pods) == 1
        name = str(pods[0].metadata.name)
        log = await _log(core, namespace, name)
        assert "installed; waiting for a stop signal" in log
        assert "runtimes.nvidia]" in config.read_text()
        return name

    first = await eventually(installed, within=60)
    await eventually(lambda: _ready(kube_api, namespace, first))

    # A power cut: no handler runs, so nothing is cleaned up; the node comes back and the
    # toolkit runs again (its journal knows the install is there).
    await gpu_nodes.restart_node(node.name)
    assert "runtimes.nvidia]" in config.read_text()

    async def restarted() -> None:
        pod = await _read_pod(kube_api, namespace, first)
        assert pod["status"]["containerStatuses"][0]["restartCount"] == 1
        await _ready(kube_api, namespace, first)
        # PID 1 drops a SIGTERM that comes before its handler is set, as in a real container.
        log = await _log(core, namespace, first)
        assert "already configured" in log
        assert "waiting for a stop signal" in log

    await eventually(restarted, within=60)
    assert (node.root / "run/gpuctrl/toolkit").is_dir()

    # Deleting the DaemonSet deletes the pod: SIGTERM, the toolkit cleans up and exits.
    await apps.delete_namespaced_daemon_set("toolkit", namespace)
    await eventually(lambda: _gone(kube_api, namespace, first), within=60)
    assert config.read_text() == CONTAINERD_CONFIG


@pytest.mark.gpu_nodes(count=1)
async def test_restart_node_kills_without_handlers_and_runs_the_pod_again(
    gpu_nodes: SimulatedKubelet, kube_api: ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_api)
    node = gpu_nodes.nodes[0]
    assert node.root is not None
    script = (
        "trap 'echo handled >> /out/events; exit 0' TERM; "
        "echo up >> /out/events; while true; do sleep 0.1; done"
    )
    pod = _shell_pod(
        "survivor",
        node.name,
        script,
        container={"volumeMounts": [{"name": "out", "mountPath": "/out"}]},
        restartPolicy="Always",
        volumes=[{"name": "out", "hostPath": {"path": "/out"}}],
    )
    await core.create_namespaced_pod(namespace, pod)
    once = _shell_pod(
        "once",
        node.name,
        "echo ran >> /out/once",
        container={"volumeMounts": [{"name": "out", "mountPath": "/out"}]},
        volumes=[{"name": "out", "hostPath": {"path": "/out"}}],
    )
    await core.create_namespaced_pod(namespace, once)
    await eventually(lambda: _terminated(kube_api, namespace, "once"))
    events = node.root / "out/events"
    await eventually(lambda: events.exists() and events.read_text() == "up\n")

    await gpu_nodes.restart_node(node.name)

    async def running_again() -> None:
        status = (await _read_pod(kube_api, namespace, "survivor"))["status"]
        assert status["containerStatuses"][0]["restartCount"] == 1
        assert "running" in status["containerStatuses"][0]["state"]
        assert events.read_text() == "up\nup\n"  # no "handled": the handler never ran

    await eventually(running_again)
    # A pod that had finished before the power cut stays finished.
    assert (node.root / "out/once").read_text() == "ran\n"
    assert (await _terminated(kube_api, namespace, "once"))["exitCode"] == 0


@pytest.mark.gpu_nodes(count=1)
async def test_exec_readiness_probe_decides_ready(
    gpu_nodes: SimulatedKubelet, kube_api: ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_api)
    script = "sleep 1; touch /tmp/ready; while true; do sleep 0.1; done"
    probe = {"exec": {"command": ["test", "-e", "/tmp/ready"]}, "periodSeconds": 1}
    pod = _shell_pod("probed", gpu_nodes.nodes[0].name, script, container={"readinessProbe": probe})
    pod["spec"]["restartPolicy"] = "Always"
    await core.create_namespaced_pod(namespace, pod)

    async def running_unready() -> None:
        status = (await _read_pod(kube_api, namespace, "probed")).get("status", {})
        [container] = status.get("containerStatuses") or [{"state": {}}]
        assert "running" in container["state"]
        assert container["ready"] is False

    await eventually(running_unready)
    # The probe sees the container's own /tmp (its namespaces, not the host's).
    await eventually(lambda: _ready(kube_api, namespace, "probed"), within=15)
    await asyncio.sleep(0)


@pytest.mark.gpu_nodes(count=1)
async def test_nvidia_runtime_class_puts_the_drivers_nvidia_smi_on_path(
    gpu_nodes: SimulatedKubelet, kube_api: ApiClient, namespace: str
) -> None:
    """A container of a pod under a RuntimeClass with an NVIDIA handler that asks for devices
    finds the node's nvidia-smi, as NVIDIA's runtime injects it; one that asks for none
    (``void``), or a pod under another handler, does not."""
    core = client.CoreV1Api(kube_api)
    node = gpu_nodes.nodes[0]
    assert node.root is not None
    smi = node.root / "usr/bin/nvidia-smi"
    smi.parent.mkdir(parents=True)
    smi.write_text("#!/bin/sh\necho driver 550 from the node\n")
    smi.chmod(0o755)
    node_api = client.NodeV1Api(kube_api)
    for name, handler in (("nvidia", "nvidia"), ("other", "runc")):
        await node_api.create_runtime_class({"metadata": {"name": name}, "handler": handler})
    # Found on PATH, runs, and is read-only (as root, test -w fails only on a read-only mount).
    script = 'smi=$(command -v nvidia-smi) && "$smi" && ! test -w "$smi" || echo no-smi'
    cases = {
        "asks": ("nvidia", "all", "driver 550 from the node"),
        "void": ("nvidia", "void", "no-smi"),
        "other": ("other", "all", "no-smi"),
    }
    try:
        for name, (runtime_class, devices, _) in cases.items():
            env = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": devices}]
            pod = _shell_pod(
                name, node.name, script, runtimeClassName=runtime_class, container={"env": env}
            )
            await core.create_namespaced_pod(namespace, pod)
        for name, (*_, expected) in cases.items():
            await eventually(lambda name=name: _terminated(kube_api, namespace, name), within=60)
            assert (await _log(core, namespace, name)).strip() == expected, name
    finally:
        for name in ("nvidia", "other"):
            await node_api.delete_runtime_class(name)


@pytest.mark.gpu_nodes(count=1)
async def test_startup_probe_holds_started_and_ready_then_kills_a_container_that_never_starts(
    gpu_nodes: SimulatedKubelet, kube_api: ApiClient, namespace: str, tmp_path: Path
) -> None:
    """A container is neither started nor ready until its exec startup probe passes (run in
    the container, from an image's files shown at their paths); one whose probe keeps failing
    is killed at its failure threshold and restarted."""
    core = client.CoreV1Api(kube_api)
    image = tmp_path / "image"
    loader = image / "usr/local/bin/load-module"
    loader.parent.mkdir(parents=True)
    loader.write_text(
        "#!/bin/sh\nsleep 2\nmkdir -p /sys/module/nvidia\n: > /sys/module/nvidia/refcnt\n"
    )
    loader.chmod(0o755)
    behavior = json.dumps({"main": {"process": True, "imageFiles": str(image)}})
    node = gpu_nodes.nodes[0].name
    script = "load-module; while true; do sleep 0.1; done"
    loads = {"exec": {"command": ["test", "-e", "/sys/module/nvidia/refcnt"]},
             "periodSeconds": 1, "failureThreshold": 30}  # fmt: skip
    never = {"exec": {"command": ["false"]}, "periodSeconds": 1, "failureThreshold": 2}
    for name, probe in (("loads", loads), ("never", never)):
        pod = _shell_pod(
            name, node, script, restartPolicy="Always", container={"startupProbe": probe}
        )
        pod["metadata"]["annotations"][BEHAVIOR_ANNOTATION] = behavior
        await core.create_namespaced_pod(namespace, pod)

    async def status(name: str) -> dict[str, Any]:
        pod = await _read_pod(kube_api, namespace, name)
        [container] = pod.get("status", {}).get("containerStatuses") or [{"state": {}}]
        return dict(container)

    async def loading() -> None:
        container = await status("loads")
        assert "running" in container["state"], container
        assert (container["started"], container["ready"]) == (False, False)

    await eventually(loading)
    await eventually(lambda: _ready(kube_api, namespace, "loads"), within=20)
    assert (await status("loads"))["restartCount"] == 0

    async def killed() -> None:
        container = await status("never")
        assert container["restartCount"] >= 1, container
        assert container["lastState"]["terminated"]["exitCode"] == 137
        assert container["started"] is False

    await eventually(killed, within=30)
