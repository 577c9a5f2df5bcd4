"""Leader election between manager processes, with the default timings (15 s, 10 s, 2 s)."""

import asyncio
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import pytest_asyncio
from runtime_helpers import CONFIGMAPS, configmap

from gpuctrl.runtime import (
    LEASES,
    Client,
    LeaderElection,
    LeaderElectionLost,
    Manager,
    Request,
)
from gpuctrl.testing import ControlPlane, eventually

pytestmark = pytest.mark.slow

CANDIDATE = Path(__file__).with_name("leader_candidate.py")


class Candidate:
    """A manager process; ``lines`` is what it printed on stdout so far."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.lines: list[str] = []
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.process.stdout is not None
        async for line in self.process.stdout:
            self.lines.append(line.decode().strip())

    async def printed(self, word: str, within: float) -> None:
        await eventually(lambda: word in self.lines, within=within)

    async def finish(self) -> tuple[int, str]:
        """Wait for the exit; return the exit status and stderr."""
        assert self.process.stderr is not None
        stderr = await self.process.stderr.read()
        status = await self.process.wait()
        await self._reader
        return status, stderr.decode()

    async def stopped_cleanly(self) -> None:
        """Assert that the process exited 0 after a clean shutdown that released the lease."""
        status, stderr = await self.finish()
        assert status == 0, stderr
        assert self.lines[-1] == "STOPPED"
        assert "released lease" in stderr
        for bad in ("Unclosed", "Traceback", "ResourceWarning"):
            assert bad not in stderr


@pytest_asyncio.fixture(loop_scope="session")
async def spawn(
    control_plane: ControlPlane, namespace: str
) -> AsyncIterator[Callable[[str], Awaitable[Candidate]]]:
    started: list[Candidate] = []

    async def start(identity: str) -> Candidate:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(CANDIDATE),
            str(control_plane.kubeconfig),
            namespace,
            identity,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        candidate = Candidate(process)
        started.append(candidate)
        return candidate

    yield start
    for candidate in started:
        if candidate.process.returncode is None:
            candidate.process.kill()
        await candidate.finish()


async def holder(client: Client, namespace: str) -> str | None:
    lease = await client.get(LEASES, "candidates", namespace)
    identity: str | None = lease["spec"].get("holderIdentity")
    return identity


async def handled_by(client: Client, namespace: str, name: str) -> str | None:
    cm = await client.get(CONFIGMAPS, name, namespace)
    value: str | None = (cm["metadata"].get("annotations") or {}).get("handled-by")
    return value


async def handled_by_is(client: Client, namespace: str, name: str, identity: str) -> bool:
    return await handled_by(client, namespace, name) == identity


async def test_one_leader_then_takeover_after_kill_and_after_clean_shutdown(
    spawn: Callable[[str], Awaitable[Candidate]], client: Client, namespace: str
) -> None:
    start = spawn
    a = await start("a")
    await a.printed("LEADING", within=30)
    b = await start("b")
    await b.printed("SYNCED", within=30)
    await client.create(CONFIGMAPS, configmap("one", namespace))
    await eventually(lambda: handled_by_is(client, namespace, "one", "a"))
    await asyncio.sleep(2.5)  # b has campaigned at least once by now
    assert "LEADING" not in b.lines
    assert await holder(client, namespace) == "a"

    a.process.send_signal(signal.SIGKILL)  # no release: b must wait for the lease to expire
    killed = time.monotonic()
    await b.printed("LEADING", within=25)
    assert time.monotonic() - killed <= 20
    assert await holder(client, namespace) == "b"
    await client.create(CONFIGMAPS, configmap("two", namespace))
    await eventually(lambda: handled_by_is(client, namespace, "two", "b"))
    assert await handled_by(client, namespace, "one") == "a"

    c = await start("c")
    await c.printed("SYNCED", within=30)
    b.process.send_signal(signal.SIGTERM)  # a clean shutdown releases the lease
    stopped = time.monotonic()
    await c.printed("LEADING", within=10)
    assert time.monotonic() - stopped <= 5
    await b.stopped_cleanly()
    c.process.send_signal(signal.SIGINT)  # Ctrl-C shuts down just as cleanly
    await c.stopped_cleanly()


async def test_losing_the_lease_stops_controllers_at_once(
    control_plane: ControlPlane, client: Client, namespace: str
) -> None:
    cancelled = asyncio.Event()
    started = asyncio.Event()

    async def long_reconcile(request: Request) -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    election = LeaderElection(
        "stolen", namespace, identity="victim", lease_duration=3, renew_deadline=2, retry_period=0.5
    )
    manager = await Manager.create(
        control_plane.kubeconfig,
        metrics_bind_address=None,
        health_probe_bind_address=None,
        leader_election=election,
    )
    manager.add_controller("victim", long_reconcile, for_=CONFIGMAPS, namespace=namespace)
    await client.create(CONFIGMAPS, configmap("work", namespace))
    run = asyncio.create_task(manager.start(asyncio.Event()))
    await asyncio.wait_for(started.wait(), 30)
    lease = await client.get(LEASES, "stolen", namespace)
    lease["spec"]["holderIdentity"] = "thief"
    await client.replace(LEASES, lease)
    with pytest.raises(LeaderElectionLost):
        await asyncio.wait_for(run, 10)
    assert cancelled.is_set()
    assert not manager.is_leader
