"""A manager with leader election (default timings), run as its own process by
test_runtime_leader_election.py: ``python leader_candidate.py KUBECONFIG NAMESPACE IDENTITY``.

Prints ``SYNCED`` once its cache synced, ``LEADING`` when it starts its controller, and
``STOPPED`` after a clean shutdown; its controller annotates each ConfigMap it reconciles with
``handled-by: IDENTITY`` unless another candidate did.
"""

import asyncio
import sys

from gpuctrl import runtime as rt

CONFIGMAPS = rt.Resource("v1", "ConfigMap", "configmaps")


class Announce:
    """Prints ``word`` when the manager starts it."""

    def __init__(self, word: str, needs_leader: bool) -> None:
        self.word = word
        self.needs_leader = needs_leader

    async def start(self, stop: asyncio.Event) -> None:
        print(self.word, flush=True)
        await stop.wait()


async def main(kubeconfig: str, namespace: str, identity: str) -> None:
    rt.configure_logging(json_lines=True)
    election = rt.LeaderElection("candidates", namespace, identity=identity)
    manager = await rt.Manager.create(
        kubeconfig,
        metrics_bind_address=None,
        health_probe_bind_address=None,
        leader_election=election,
    )

    async def reconcile(request: rt.Request) -> None:
        cm = manager.cache.get(CONFIGMAPS, request.name, request.namespace)
        if cm is None or "handled-by" in (cm["metadata"].get("annotations") or {}):
            return
        annotations = {"handled-by": identity}
        patch = {"metadata": {"annotations": annotations}}
        await manager.client.merge_patch(CONFIGMAPS, request.name, patch, request.namespace)

    manager.add_controller("candidates", reconcile, for_=CONFIGMAPS, namespace=namespace)
    manager.add(Announce("SYNCED", needs_leader=False))
    manager.add(Announce("LEADING", needs_leader=True))
    await manager.run()
    print("STOPPED", flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
