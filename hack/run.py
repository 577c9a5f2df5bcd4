"""`make run`: run gpuctrl against $KUBECONFIG, or against a local cluster it starts.

Without KUBECONFIG it starts a local control plane (etcd, kube-apiserver, controller-manager,
scheduler) with simulated GPU nodes of two OS versions and creates the minimal sample
ClusterPolicy and the Istio PodPolicy sample. In both cases it installs the CRDs, starts
``gpuctrl webhook`` (managed certificates, configuration on its loopback URL), renders every
ClusterPolicy's objects and applies them with server-side apply, then stays in the foreground
until Ctrl-C, when it stops everything it started. The controllers that will keep those
objects reconciled are not written yet; until then this applies the render once at start.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import yaml

from api.v1alpha1 import ClusterPolicy
from controllers.render import ClusterFacts, render
from gpuctrl.runtime import Client, new_api_client
from gpuctrl.testing import ControlPlane, SimulatedKubelet, simulated_gpu_nodes

ROOT = Path(__file__).resolve().parent.parent
FIELD_MANAGER = "gpuctrl"
OS_RELEASES = (("ubuntu", "22.04"), ("ubuntu", "24.04"))
NAMESPACE = os.environ.get("GPUCTRL_NAMESPACE", "gpuctrl")
# NVIDIA's operator labels GPU nodes so; until gpuctrl's node labeller exists the simulated
# nodes come labelled.
DEPLOY_LABELS = {
    f"nvidia.com/gpu.deploy.{operand}": "true"
    for operand in ("driver", "container-toolkit", "operator-validator", "device-plugin")
}


def _load(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


async def _apply(client: Client, obj: Mapping[str, Any]) -> None:
    resource = await client.resource(obj["apiVersion"], obj["kind"])
    await client.apply(resource, obj, field_manager=FIELD_MANAGER, force=True)


async def _install_crds(client: Client) -> None:
    for path in sorted((ROOT / "config" / "crd").glob("*.yaml")):
        for crd in _load(path):
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


async def _apply_policies(client: Client) -> int:
    """Render every ClusterPolicy against the cluster's Nodes and ConfigMaps and apply it."""
    policies = await client.request("GET", "/apis/gpuctrl.io/v1alpha1/clusterpolicies")
    count = 0
    for item in policies["items"]:
        policy = ClusterPolicy.model_validate(item)
        namespace = NAMESPACE
        await _apply(
            client,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        )
        nodes = await client.request("GET", "/api/v1/nodes")
        config_maps = await client.request("GET", f"/api/v1/namespaces/{namespace}/configmaps")
        facts = ClusterFacts.from_objects(namespace, nodes["items"], config_maps["items"])
        for obj in render(policy, facts):
            await _apply(client, obj)
            count += 1
    return count


WEBHOOK_PORT = int(os.environ.get("GPUCTRL_WEBHOOK_PORT", "9443"))


async def _start_webhook(stack: AsyncExitStack, kubeconfig: Path) -> None:
    """``gpuctrl webhook`` beside the manager: certificates of its own, and the webhook
    configuration pointing at its loopback URL (no Service network here)."""
    gpuctrl = str(Path(sys.executable).with_name("gpuctrl"))
    process = await asyncio.create_subprocess_exec(
        gpuctrl, "webhook", "--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE,
        "--bind-address", f"127.0.0.1:{WEBHOOK_PORT}", "--manage-certificates",
        "--webhook-url", f"https://127.0.0.1:{WEBHOOK_PORT}/mutate-v1-pod",
        "--metrics-bind-address", "127.0.0.1:8090", "--health-probe-bind-address", "127.0.0.1:8091",
    )  # fmt: skip

    async def stop_webhook() -> None:
        if process.returncode is None:
            process.terminate()
        await process.wait()

    stack.push_async_callback(stop_webhook)


async def _serve(kubeconfig: Path | None, stop: asyncio.Event) -> None:
    async with AsyncExitStack() as stack:
        local = kubeconfig is None
        if kubeconfig is None:
            print("starting a local control plane with simulated GPU nodes ...", flush=True)
            plane = await stack.enter_async_context(
                ControlPlane(controller_manager=True, scheduler=True)
            )
            nodes = simulated_gpu_nodes(
                "gpu-node", count=4, os_releases=OS_RELEASES, labels=DEPLOY_LABELS
            )
            await stack.enter_async_context(SimulatedKubelet(plane.kubeconfig, nodes))
            kubeconfig = plane.kubeconfig
        api = await new_api_client(kubeconfig)
        stack.push_async_callback(api.close)
        client = Client(api)
        await _install_crds(client)
        if local:
            for name in ("clusterpolicy-minimal.yaml", "podpolicy-istio.yaml"):
                for sample in _load(ROOT / "config" / "samples" / name):
                    await _apply(client, sample)
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        await _apply(client, namespace)
        await _start_webhook(stack, kubeconfig)
        applied = await _apply_policies(client)
        print(f"applied {applied} objects rendered from the ClusterPolicies", flush=True)
        kubectl = f"kubectl --kubeconfig {kubeconfig}"
        print(f"kubeconfig: {kubeconfig}", flush=True)
        print(f"look:  {kubectl} get nodes,clusterpolicies", flush=True)
        print(f"       {kubectl} -n {NAMESPACE} get ds,pods -o wide", flush=True)
        print(f"       {kubectl} get podpolicies,mutatingwebhookconfigurations", flush=True)
        print("running; Ctrl-C stops everything", flush=True)
        await stop.wait()
        print("stopping ...", flush=True)


async def main() -> int:
    """Run until SIGINT or SIGTERM; return the exit code."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    configured = os.environ.get("KUBECONFIG")
    await _serve(Path(configured) if configured else None, stop)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
