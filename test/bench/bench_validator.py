"""Benchmark: many nodes running the cuda workload check at once against one apiserver.

Run: ``.venv/bin/python test/bench/bench_validator.py`` (``--help`` for sizes). Starts the local
control plane and a simulated kubelet with the largest ``--nodes`` count of GPU nodes, then
for each count runs that many checks concurrently - one agent, one ApiClient per node, as
the validator DaemonSet would - and prints the wall time and the per-check latencies.
Needs the control plane binaries (``make envtest``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from kubernetes_asyncio import client

from api.v1alpha1 import ValidatorWorkloads
from gpuctrl.runtime import new_api_client
from gpuctrl.testing import (
    ControlPlane,
    SimulatedKubelet,
    eventually,
    simulated_gpu_nodes,
)
from gpuctrl.validator import (
    Passed,
    RetryPolicy,
    WorkloadCheck,
    builtin_template,
    run_workload_check,
)


async def one_check(plane: ControlPlane, namespace: str, node: str) -> float:
    """Seconds one agent takes to validate ``node``; raises if the check does not pass."""
    check = WorkloadCheck(
        check="cuda",
        namespace=namespace,
        node_name=node,
        configmap="gpuctrl-validator-workloads",
        image="cuda-sample:vectoradd",
        image_pull_policy="IfNotPresent",
        overrides=ValidatorWorkloads(),
        owner=None,
        timeout=300,
    )
    started = time.perf_counter()
    async with await new_api_client(plane.kubeconfig) as api:
        result = await run_workload_check(api, check, RetryPolicy())
    if result != Passed():
        raise RuntimeError(f"{node}: {result}")
    return time.perf_counter() - started


async def prepare(plane: ControlPlane, namespace: str) -> None:
    async with await new_api_client(plane.kubeconfig) as api:
        await client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
        await client.NodeV1Api(api).create_runtime_class(
            {"metadata": {"name": "nvidia"}, "handler": "nvidia"}
        )
        data = {key: builtin_template(key) for key in ("cuda.yaml", "plugin.yaml")}
        await client.CoreV1Api(api).create_namespaced_config_map(
            namespace, {"metadata": {"name": "gpuctrl-validator-workloads"}, "data": data}
        )
        core = client.CoreV1Api(api)

        async def service_account_ready() -> None:  # pods are refused until it is
            accounts = await core.list_namespaced_service_account(namespace)
            assert any(a.metadata.name == "default" for a in accounts.items)

        await eventually(service_account_ready)


async def main(counts: list[int]) -> None:
    async with ControlPlane(controller_manager=True, scheduler=True) as plane:
        await prepare(plane, "bench")
        nodes = simulated_gpu_nodes("bench", count=max(counts))
        async with SimulatedKubelet(plane.kubeconfig, nodes):
            print(f"{'nodes':>6} {'wall s':>8} {'p50 s':>7} {'p95 s':>7} {'max s':>7}")
            for count in counts:
                started = time.perf_counter()
                latencies = await asyncio.gather(
                    *(one_check(plane, "bench", node.name) for node in nodes[:count])
                )
                wall = time.perf_counter() - started
                ordered = sorted(latencies)
                p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
                print(
                    f"{count:>6} {wall:>8.2f} {statistics.median(ordered):>7.2f} "
                    f"{p95:>7.2f} {ordered[-1]:>7.2f}"
                )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--nodes", type=int, nargs="+", default=[1, 10, 50, 100], help="node counts to run"
    )
    asyncio.run(main(parser.parse_args().nodes))
