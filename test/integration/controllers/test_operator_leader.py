"""`gpuctrl manager` processes electing a leader on a real cluster: one reconciles, a standby
takes over after SIGKILL within lease duration + retry period, SIGTERM releases the Lease and
exits 0, and a leader that loses its Lease exits 1."""

from __future__ import annotations

import asyncio
import signal
import time
from datetime import UTC, datetime

import pytest
from operator_helpers import DAEMON_SETS, POLICIES, ManagerProcess, daemonsets, policy, status_of

from gpuctrl.runtime import Client, Resource
from gpuctrl.testing import ControlPlane, SimulatedKubelet, eventually, simulated_gpu_nodes

pytestmark = pytest.mark.asyncio(loop_scope="session")

NAMESPACE = "operands"
LEASES = Resource("coordination.k8s.io/v1", "Lease", "leases")
FAILOVER_LIMIT = 15 + 2 + 3  # lease duration + retry period, and the standby's start-up slack


async def _holder(client: Client) -> str | None:
    lease = await client.get(LEASES, "gpuctrl-manager", NAMESPACE)
    holder: str | None = lease["spec"].get("holderIdentity")
    return holder


async def test_leader_election_failover_release_and_loss(
    cluster: ControlPlane, client: Client
) -> None:
    processes: list[ManagerProcess] = []
    nodes = simulated_gpu_nodes("leader", count=2)
    async with SimulatedKubelet(cluster.kubeconfig, nodes):
        try:
            first = await ManagerProcess.start(cluster.kubeconfig, NAMESPACE)
            processes.append(first)
            await first.wait_leading(60)  # it also created the operands namespace
            await client.create(POLICIES, policy("elected"))
            second = await ManagerProcess.start(cluster.kubeconfig, NAMESPACE)
            processes.append(second)

            async def ready() -> None:
                assert (await status_of(client, "elected")).get("state") == "ready"

            await eventually(ready, within=90)
            assert not second.leading.is_set()

            first.process.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            await second.wait_leading(FAILOVER_LIMIT)
            failover = time.monotonic() - killed
            assert failover <= FAILOVER_LIMIT
            await client.delete(DAEMON_SETS, "gpuctrl-toolkit", NAMESPACE)

            async def restored() -> None:
                assert "gpuctrl-toolkit" in await daemonsets(client, NAMESPACE)

            await eventually(restored, within=15)  # the new leader reconciles

            third = await ManagerProcess.start(cluster.kubeconfig, NAMESPACE)
            processes.append(third)
            await asyncio.sleep(3)  # synced and campaigning
            second.process.send_signal(signal.SIGTERM)
            assert await second.exit_code() == 0
            assert "released lease" in "".join(second.lines)
            await third.wait_leading(10)  # released: no need to wait for the lease to expire

            lease = await client.get(LEASES, "gpuctrl-manager", NAMESPACE)
            stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            lease["spec"].update(holderIdentity="intruder", renewTime=stamp, acquireTime=stamp)
            await client.replace(LEASES, lease)
            assert await third.exit_code(15) == 1
            assert "lost" in "".join(third.lines)
            assert "Traceback" not in "".join(third.lines), "".join(third.lines)
            assert await _holder(client) == "intruder"
        finally:
            for process in processes:
                process.kill()
            await client.delete(POLICIES, "elected")
