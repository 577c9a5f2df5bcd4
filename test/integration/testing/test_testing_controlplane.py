"""ControlPlane against its real binaries: restarts, ServiceAccount identities, teardown."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.rest import ApiException

from gpuctrl.runtime import new_api_client
from gpuctrl.testing import (
    ControlPlane,
    ControlPlaneError,
    SimulatedKubelet,
    eventually,
)
from gpuctrl.testing.envtest import ETCD_VERSION, kubernetes_version


def running(pid: int) -> bool:
    """Whether `pid` is a live (not zombie) process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def leftovers(directory: str | Path, pids: list[int]) -> list[str]:
    """What a stopped control plane left behind: its folder, live processes."""
    left = [f"folder {directory}"] if Path(directory).exists() else []
    return left + [f"process {pid}" for pid in pids if running(pid)]


async def test_restart_apiserver_keeps_data_and_the_kubelet_reconnects(
    control_plane: ControlPlane, gpu_nodes: SimulatedKubelet, kube_api: ApiClient, namespace: str
):
    core = client.CoreV1Api(kube_api)
    await core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "kept"}, "data": {"k": "v"}}
    )
    etcd_pid = control_plane.processes[0].pid
    await control_plane.restart_apiserver()
    assert control_plane.processes[0].pid == etcd_pid  # etcd kept running
    assert (await core.read_namespaced_config_map("kept", namespace)).data == {"k": "v"}
    # The kubelet's pod watch survived the restart.
    pod = {
        "metadata": {"name": "after-restart"},
        "spec": {
            "nodeName": gpu_nodes.nodes[0].name,
            "containers": [{"name": "c", "image": "busybox:1.36"}],
        },
    }
    await core.create_namespaced_pod(namespace, pod)

    async def runs() -> None:
        status = (await core.read_namespaced_pod("after-restart", namespace)).status
        assert status.phase == "Running"

    await eventually(runs)


async def test_service_account_kubeconfig_gets_only_what_rbac_grants(
    control_plane: ControlPlane, kube_api: ApiClient, namespace: str
):
    path = await control_plane.service_account_kubeconfig(namespace, "operator")
    rbac = client.RbacAuthorizationV1Api(kube_api)
    async with await new_api_client(path) as operator_api:
        operator = client.CoreV1Api(operator_api)
        with pytest.raises(ApiException) as denied:
            await operator.list_namespaced_config_map(namespace)
        assert denied.value.status == 403
        assert f"system:serviceaccount:{namespace}:operator" in denied.value.body

        await rbac.create_namespaced_role(
            namespace,
            {
                "metadata": {"name": "read-configmaps"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
            },
        )
        await rbac.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": "operator-reads-configmaps"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "read-configmaps",
                },
                "subjects": [
                    {"kind": "ServiceAccount", "name": "operator", "namespace": namespace}
                ],
            },
        )

        async def allowed() -> None:
            try:
                await operator.list_namespaced_config_map(namespace)
            except ApiException as error:
                raise AssertionError(f"still denied: {error.status}") from error

        await eventually(allowed, within=10)
        with pytest.raises(ApiException) as still_denied:
            await operator.list_namespaced_secret(namespace)
        assert still_denied.value.status == 403


INNER_TESTS = textwrap.dedent(
    """
    import json, os, pathlib

    async def test_fails(control_plane, gpu_nodes, namespace):
        info = {
            "directory": str(control_plane.directory),
            "pids": [p.pid for p in control_plane.processes],
        }
        pathlib.Path(os.environ["INNER_INFO"]).write_text(json.dumps(info))
        assert False, "this test fails on purpose"

    async def test_interrupted(control_plane, gpu_nodes, namespace):
        raise KeyboardInterrupt
    """
)


async def run_inner_pytest(tmp_path: Path) -> tuple[int, dict[str, Any]]:
    """Run INNER_TESTS in a pytest of their own; its exit code and what test_fails saw."""
    (tmp_path / "test_inner.py").write_text(INNER_TESTS)
    # How a project built on gpuctrl opts in to its fixtures (docs/testing.md's one line).
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["gpuctrl.testing.pytest_plugin"]\n')
    info = tmp_path / "info.json"
    options = [
        "asyncio_mode=auto",
        "asyncio_default_fixture_loop_scope=session",
        "asyncio_default_test_loop_scope=session",
        "filterwarnings=error",
    ]
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        *[arg for option in options for arg in ("-o", option)],
        str(tmp_path / "test_inner.py"),
        cwd=tmp_path,
        env={**os.environ, "INNER_INFO": str(info)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await process.communicate()
    assert info.exists(), output.decode()
    return process.returncode or 0, json.loads(info.read_text())


async def test_fixture_teardown_leaves_nothing_behind_after_a_failure_and_an_interrupt(
    tmp_path: Path,
):
    code, info = await run_inner_pytest(tmp_path)
    assert code == pytest.ExitCode.INTERRUPTED
    assert len(info["pids"]) == 4  # etcd, apiserver, controller-manager, scheduler
    assert leftovers(info["directory"], info["pids"]) == []


async def test_bare_plane_admits_pods_and_dies_with_its_sigkilled_owner(
    tmp_path: Path,
):
    script = textwrap.dedent(
        """
        import asyncio, json, sys
        from kubernetes_asyncio import client
        from gpuctrl.runtime import new_api_client
        from gpuctrl.testing import ControlPlane

        async def main():
            async with ControlPlane() as plane:
                # No controller-manager, so no `default` ServiceAccount: pods are still admitted.
                async with await new_api_client(plane.kubeconfig) as api:
                    container = {"name": "c", "image": "busybox"}
                    pod = {"metadata": {"name": "p"}, "spec": {"containers": [container]}}
                    await client.CoreV1Api(api).create_namespaced_pod("default", pod)
                info = {"directory": str(plane.directory), "pids": [p.pid for p in plane.processes]}
                print(json.dumps(info), flush=True)
                await asyncio.sleep(600)

        asyncio.run(main())
        """
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None
    assert process.stderr is not None
    line = await asyncio.wait_for(process.stdout.readline(), 60)
    assert line, (await process.stderr.read()).decode()
    info = json.loads(line)
    process.send_signal(signal.SIGKILL)
    await process.wait()

    async def processes_gone() -> None:
        # Nobody could remove the folder; the kernel killed the processes (parent-death signal).
        assert leftovers(info["directory"], info["pids"]) == [f"folder {info['directory']}"]

    await eventually(processes_gone, within=10)
    with pytest.raises(ControlPlaneError):
        async with ControlPlane(assets_dir=tmp_path):  # the next start, even a failed one ...
            pass
    assert leftovers(info["directory"], info["pids"]) == []  # ... removes the folder


async def test_the_suite_talks_to_the_release_it_claims(
    control_plane: ControlPlane, kube_api: ApiClient
) -> None:
    """The shared control plane is the release docs/development.md and $GPUCTRL_K8S_VERSION
    name, and each of its components says so."""
    info = await client.VersionApi(kube_api).get_code()
    assert info.git_version == f"v{kubernetes_version()}" == control_plane.version
    assert (info.major, info.minor) == ("1", kubernetes_version().split(".")[1])
    for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        process = await asyncio.create_subprocess_exec(
            str(control_plane.assets_dir / name), "--version", stdout=asyncio.subprocess.PIPE
        )
        said, _ = await process.communicate()
        assert said.decode().strip() == f"Kubernetes v{kubernetes_version()}"
    etcd = await asyncio.create_subprocess_exec(
        str(control_plane.assets_dir / "etcd"), "--version", stdout=asyncio.subprocess.PIPE
    )
    said, _ = await etcd.communicate()
    assert f"etcd Version: {ETCD_VERSION}\n" in said.decode()


async def test_admission_plugins_are_enabled_beside_the_defaults() -> None:
    # AlwaysPullImages is off by default and visible in what it admits; without a
    # controller-manager ServiceAccount admission stays off, so the pod is admitted at all.
    container = {"name": "c", "image": "busybox", "imagePullPolicy": "IfNotPresent"}
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [container]}}
    async with (
        ControlPlane(admission_plugins=["AlwaysPullImages"]) as plane,
        await new_api_client(plane.kubeconfig) as api,
    ):
        created = await client.CoreV1Api(api).create_namespaced_pod("default", pod)
    assert created.spec.containers[0].image_pull_policy == "Always"
