"""Benchmark: driver upgrades of many simulated GPU nodes, at several ``maxParallelUpgrades``.

Run: .venv/bin/python test/bench/bench_driver_upgrade.py [--nodes 100] [--parallel 1 5 0]

A local control plane (controller-manager, scheduler, audit log), ``--nodes`` simulated GPU
nodes of one OS running every operand pod, the manager in this process. For each parallelism
in turn (``maxUnavailable: 100%``, so parallelism alone limits), the driver version changes and
the bench waits until the policy is ready again with every node ``upgrade-done`` on the new
driver. Prints, per run: the wall time; the ideal (nodes / parallelism x one node's time, one
node's time being the parallelism-1 run's wall time per node; 0 is all nodes at once); their
ratio; and the manager's write requests per node upgraded (apiserver audit log, by its
User-Agent; Events and Lease renewals left out, listed by verb). Figures, not assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from gpuctrl.runtime import Client, new_api_client
from gpuctrl.testing import ControlPlane, SimulatedKubelet, simulated_gpu_nodes

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "test" / "integration" / "controllers"))
from operator_helpers import (  # noqa: E402
    NODES,
    POLICIES,
    AuditLog,
    conditions,
    install_crds,
    policy,
    running_manager,
    status_of,
)

STATE = "nvidia.com/gpu-driver-upgrade-state"
VERSIONS = ("550.90.07", "550.127.05", "550.54.15", "550.100")


async def upgraded(client: Client, count: int, version: str) -> bool:
    """Whether the policy is ready with every node upgrade-done on ``version``."""
    obj = await client.get(POLICIES, "bench")
    found = conditions(obj.get("status") or {})
    generation = obj["metadata"]["generation"]
    if (obj.get("status") or {}).get("state") != "ready":
        return False
    if any(c.get("observedGeneration") != generation for c in found.values()):
        return False
    nodes = await client.list(NODES)
    done = [n for n in nodes if (n["metadata"].get("labels") or {}).get(STATE) == "upgrade-done"]
    return len(done) == count and obj["spec"]["driver"]["version"] == version


async def run(client: Client, audit: AuditLog, count: int, parallel: int, version: str) -> Any:
    upgrade = {"maxParallelUpgrades": parallel, "maxUnavailable": "100%"}
    audit.mark()
    started = time.monotonic()
    patch = {"spec": {"driver": {"version": version, "upgradePolicy": upgrade}}}
    await client.merge_patch(POLICIES, "bench", patch)
    await asyncio.sleep(2)  # the new generation's conditions
    while not await upgraded(client, count, version):  # noqa: ASYNC110 (a bench may poll)
        await asyncio.sleep(0.5)
    return time.monotonic() - started, audit.writes()


def _verbs(writes: list[str]) -> Counter[str]:
    # "patch nodes/gpu-3" -> "patch nodes"; an eviction is a create of pods (its subresource).
    return Counter(w.split("/")[0] for w in writes if not w.split()[1].startswith("events/"))


async def main(count: int, parallels: list[int]) -> None:
    nodes = simulated_gpu_nodes("gpu", count=count, os_releases=(("ubuntu", "22.04"),))
    async with (
        ControlPlane(controller_manager=True, scheduler=True, audit=True) as plane,
        await new_api_client(plane.kubeconfig) as api,
    ):
        client = Client(api, request_timeout=120)
        await install_crds(client)
        namespaces = await client.resource("v1", "Namespace")
        await client.create(namespaces, {"metadata": {"name": "gpuctrl"}})
        async with SimulatedKubelet(plane.kubeconfig, nodes):
            await client.create(POLICIES, policy("bench", {"driver": {"version": VERSIONS[-1]}}))
            async with running_manager(plane.kubeconfig, "gpuctrl"):
                started = time.monotonic()
                while not await upgraded(client, count, VERSIONS[-1]):  # noqa: ASYNC110
                    await asyncio.sleep(1)
                print(f"{count} nodes installed in {time.monotonic() - started:.0f} s", flush=True)
                audit = AuditLog(plane.audit_log)
                per_node: float | None = None
                for parallel, version in zip(parallels, VERSIONS, strict=False):
                    seconds, writes = await run(client, audit, count, parallel, version)
                    if per_node is None:
                        per_node = seconds * max(parallel, 1) / count
                    width = parallel or count
                    ideal = -(-count // width) * per_node
                    verbs = _verbs(writes)
                    print(
                        f"maxParallelUpgrades {parallel}: {seconds:.0f} s, ideal {ideal:.0f} s "
                        f"(x{seconds / ideal:.2f}); {sum(verbs.values()) / count:.1f} writes "
                        f"per node upgraded ({dict(verbs)})",
                        flush=True,
                    )
        print((await status_of(client, "bench")).get("readyNodes"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--parallel", type=int, nargs="+", default=[1, 5, 0])
    arguments = parser.parse_args()
    asyncio.run(main(arguments.nodes, arguments.parallel))
