"""`make run` end to end: local cluster, CRDs, rendered operands running, clean Ctrl-C."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient

from gpuctrl.runtime import ApiError, Client, new_api_client
from gpuctrl.testing import ControlPlane, eventually

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 180.0


@asynccontextmanager
async def running_make_run(
    kubeconfig: Path | None = None, namespace: str | None = None
) -> AsyncIterator[tuple[asyncio.subprocess.Process, Path, str]]:
    """`hack/run.py` (what `make run` runs) up to its 'running' line.

    Yields the process, the kubeconfig it printed and everything it printed; kills it on exit.
    """
    env = {key: value for key, value in os.environ.items() if key != "KUBECONFIG"}
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    if namespace is not None:
        env["GPUCTRL_NAMESPACE"] = namespace
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "hack" / "run.py"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
    )
    assert process.stdout is not None
    printed: Path | None = None
    output: list[str] = []
    try:
        async with asyncio.timeout(START_TIMEOUT):
            while not output or not output[-1].startswith("running"):
                line = (await process.stdout.readline()).decode()
                assert line, "make run exited before it was running:\n" + "".join(output)
                output.append(line)
                if line.startswith("kubeconfig: "):
                    printed = Path(line.split(": ", 1)[1].strip())
        assert printed is not None, "".join(output)
        yield process, printed, "".join(output)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def _interrupt(process: asyncio.subprocess.Process) -> None:
    process.send_signal(signal.SIGINT)
    async with asyncio.timeout(30):
        assert await process.wait() == 0


async def test_make_run_brings_up_operands_and_stops_cleanly() -> None:
    async with running_make_run() as (process, kubeconfig, _):
        await _operands_run_then_interrupt(process, kubeconfig)
    folder = kubeconfig.parent
    assert not folder.exists(), f"{folder} was left behind"
    assert not _pids_mentioning(str(folder)), "control plane processes were left running"


async def _operands_run_then_interrupt(
    process: asyncio.subprocess.Process, kubeconfig: Path
) -> None:
    async with await new_api_client(kubeconfig) as api:
        apps = client.AppsV1Api(api)
        core = client.CoreV1Api(api)

        async def operands_running() -> None:
            sets = (await apps.list_namespaced_daemon_set("gpuctrl")).items
            names = {ds.metadata.name for ds in sets}
            assert {"gpuctrl-driver-ubuntu22.04", "gpuctrl-driver-ubuntu24.04"} <= names
            assert "gpuctrl-toolkit" in names
            for ds in sets:
                assert ds.status.desired_number_scheduled > 0, ds.metadata.name
                assert ds.status.number_ready == ds.status.desired_number_scheduled, (
                    ds.metadata.name
                )
            pods = (await core.list_namespaced_pod("gpuctrl")).items
            assert pods
            assert all(pod.status.phase == "Running" for pod in pods)

        await eventually(operands_running, within=90)
    await _interrupt(process)


async def test_make_run_with_kubeconfig_uses_that_cluster() -> None:
    async with ControlPlane() as plane:
        async with await new_api_client(plane.kubeconfig) as api:
            await _create_cluster_policy(api)
            async with running_make_run(plane.kubeconfig, namespace="operands") as (
                process,
                printed,
                output,
            ):
                assert printed == plane.kubeconfig
                assert "starting a local control plane" not in output
                apps = client.AppsV1Api(api)
                sets = (await apps.list_namespaced_daemon_set("operands")).items
                assert "gpuctrl-toolkit" in {ds.metadata.name for ds in sets}
                await _interrupt(process)
        assert plane.processes, "make run must not stop a cluster it did not start"


async def _create_cluster_policy(api: ApiClient) -> None:
    """A ClusterPolicy in a cluster whose CRDs make run has not installed yet: apply both."""
    crd_client = Client(api)
    for path in sorted((ROOT / "config" / "crd").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
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
