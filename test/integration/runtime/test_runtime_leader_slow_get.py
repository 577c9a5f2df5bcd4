"""A standby dates a holder's renewal from when its GET returned, not from when it sent it (as
client-go's observedTime): a slow Lease GET that spans the holder's last renewal must not let
the standby take the Lease while the old holder, within its renew deadline, still writes
(issue 22). The standby runs on a hand-stepped FakeClock behind a proxy that holds its GET."""

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from tcp_proxy import FreezableProxy, through, upstream_of

from gpuctrl.runtime import LEASES, Client, LeaderElection, LeaderElector, new_api_client
from gpuctrl.testing import ControlPlane, FakeClock, eventually

LEASE = "slow-get"
GET_TAKES = 9.0  # fake seconds: more than lease duration minus renew deadline (15 - 10)


def stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def test_a_renewal_seen_by_a_slow_get_counts_from_when_the_response_came(
    control_plane: ControlPlane, client: Client, namespace: str, tmp_path: Path
) -> None:
    spec = {"holderIdentity": "old", "leaseDurationSeconds": 15, "acquireTime": stamp()}
    meta = {"name": LEASE, "namespace": namespace}
    lease = await client.create(LEASES, {"metadata": meta, "spec": {**spec, "renewTime": stamp()}})
    election = LeaderElection(LEASE, namespace, identity="standby")  # 15 s, 10 s, 2 s
    clock = FakeClock()
    async with FreezableProxy(*upstream_of(control_plane.kubeconfig)) as proxy:
        kubeconfig = through(control_plane.kubeconfig, proxy.port, tmp_path / "proxied")
        async with await new_api_client(kubeconfig) as api:
            standby = LeaderElector(Client(api), election, clock=clock)
            proxy.hold()
            acquiring = asyncio.create_task(standby.acquire(asyncio.Event()))
            try:
                await asyncio.wait_for(proxy.held.wait(), 10)  # its first GET is on its way
                clock.advance(GET_TAKES)
                lease["spec"]["renewTime"] = stamp()  # the holder's last renewal, mid-GET ...
                await client.replace(LEASES, lease)
                proxy.let_go()  # ... which the GET's response carries
                renewed = clock.now()
                while not acquiring.done():  # every try, each at the time it is due
                    await eventually(lambda: acquiring.done() or clock.next_deadline is not None)
                    if (deadline := clock.next_deadline) is not None:
                        clock.advance(deadline - clock.now())
                assert acquiring.result() is True
            finally:
                acquiring.cancel()
    # the old holder may write until its renew deadline; client-go waits a lease duration
    assert clock.now() >= renewed + election.renew_deadline
    assert clock.now() >= renewed + election.lease_duration
    assert (await client.get(LEASES, LEASE, namespace))["spec"]["holderIdentity"] == "standby"
