"""Benchmark: a controller's first sync and cache memory, gpuctrl beside its peers (issue 24).

    .venv/bin/python test/bench/bench_sync.py [--objects 5000 50000] [--repeat 3]
        [--kopf-up-to 5000] [--nodes 1000]

For each ``--objects`` count (ascending; the ConfigMaps of ~300 bytes are added to one
namespace as the counts grow), each peer runs in a fresh process, ``--repeat`` times in turn
(the order rotating each round), and the medians are printed:

- first sync: seconds from the start of the program (after imports) until a no-op reconciler
  took each existing ConfigMap once from a work queue fed by a shared informer: gpuctrl, the
  same with client-go v0.34.4 (``test/bench/clientgo/``, built on first use) and kopf (an
  ``@kopf.on.event`` handler; only up to ``--kopf-up-to`` objects: it takes ten times longer);
  the floor is one raw kubernetes-asyncio list of the same objects from the watch cache,
  decoded with ``json.loads`` (``raw``);
- stages: one more gpuctrl run, instrumented, says where its time goes (decode, transform,
  store, freeze, dispatch of events to handlers and the queue, workers);
- memory: RSS per cached ConfigMap, (RSS caching the namespace - RSS caching an empty one) /
  count, for gpuctrl, client-go and kopf; and the bytes gpuctrl's store holds per Node
  (``--nodes`` Nodes of a realistic status), full and metadata-only.

The machine's load average is printed with the figures: read the ratios of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench_controller import CHILD, CONFIGMAPS, NAMESPACES, NODES, configmap, create_all, node
from bench_controller import ensure_kopf as install_kopf
from clientgo_build import ensure_clientgo

from gpuctrl.runtime import Client, new_api_client
from gpuctrl.testing import ControlPlane

NAMESPACE = "bench-sync"
EMPTY = "bench-sync-empty"
PEERS = ("raw", "gpuctrl", "client-go", "kopf")


class Runner:
    """Starts one peer's fresh process per measurement and returns its JSON."""

    def __init__(self, kubeconfig: Path, clientgo: Path) -> None:
        self.kubeconfig = kubeconfig
        self.clientgo = clientgo

    async def run(self, peer: str, job: str, namespace: str, count: int) -> dict[str, Any]:
        if peer == "client-go":
            argv = [str(self.clientgo), job]
        else:
            argv = [sys.executable, str(CHILD), job, peer]
        process = await asyncio.create_subprocess_exec(
            *argv,
            str(self.kubeconfig),
            namespace,
            str(count),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await process.communicate()
        if process.returncode != 0:
            raise RuntimeError(f"{peer} {job} failed ({process.returncode}): {stderr.decode()}")
        result: dict[str, Any] = json.loads(stdout.decode().strip().splitlines()[-1])
        return result


async def first_syncs(
    runner: Runner, count: int, repeat: int, peers: list[str]
) -> dict[str, list[float]]:
    """Seconds of ``repeat`` fresh first syncs per peer, the order rotating each round."""
    seconds: dict[str, list[float]] = {peer: [] for peer in peers}
    for round_ in range(repeat):
        for peer in peers[round_ % len(peers) :] + peers[: round_ % len(peers)]:
            result = await runner.run(peer, "sync", NAMESPACE, count)
            if peer == "raw" and result["objects"] != count:
                raise RuntimeError(f"the raw list held {result['objects']} of {count} objects")
            seconds[peer].append(result["seconds"])
    return seconds


async def memory_per_configmap(
    runner: Runner, count: int, repeat: int, peers: list[str]
) -> dict[str, float]:
    """Bytes of RSS per cached ConfigMap: medians of the full and the empty namespace."""
    figures: dict[str, float] = {}
    for peer in peers:
        full, empty = [], []
        for _ in range(repeat):
            full.append((await runner.run(peer, "configmaps", NAMESPACE, count))["rss_kib"])
            empty.append((await runner.run(peer, "configmaps", EMPTY, 0))["rss_kib"])
        figures[peer] = 1024 * (statistics.median(full) - statistics.median(empty)) / count
    return figures


async def node_store(runner: Runner, nodes: int) -> dict[str, float]:
    """Bytes gpuctrl's store holds per Node, full and metadata-only."""
    figures = {}
    for job in ("nodes", "nodes-metadata"):
        held = await runner.run("gpuctrl", job, NAMESPACE, nodes)
        figures[job] = held["stored_bytes"]
    return figures


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    clientgo = ensure_clientgo()
    figures: dict[str, Any] = {"sync": {}, "stages": {}, "memory": {}, "load": []}
    async with ControlPlane() as plane, await new_api_client(plane.kubeconfig) as api:
        client = Client(api)
        runner = Runner(plane.kubeconfig, clientgo)
        for name in (NAMESPACE, EMPTY):
            await client.create(NAMESPACES, {"metadata": {"name": name}})
        created = 0
        for count in sorted(args.objects):
            print(f"creating ConfigMaps {created} to {count} ...", file=sys.stderr, flush=True)
            objs = [configmap(f"cm-{i}", NAMESPACE) for i in range(created, count)]
            await create_all(client, CONFIGMAPS, objs, {})
            created = count
            peers = [p for p in PEERS if p != "kopf" or count <= args.kopf_up_to]
            figures["load"].append(os.getloadavg()[0])
            figures["sync"][count] = await first_syncs(runner, count, args.repeat, peers)
            staged = await runner.run("gpuctrl", "stages", NAMESPACE, count)
            figures["stages"][count] = staged["stages"]
            figures["memory"][count] = await memory_per_configmap(
                runner, count, args.repeat, [p for p in peers if p != "raw"]
            )
            figures["load"].append(os.getloadavg()[0])
        print(f"creating {args.nodes} Nodes ...", file=sys.stderr, flush=True)
        await create_all(client, NODES, [node(f"node-{i}") for i in range(args.nodes)], {})
        figures["nodes"] = await node_store(runner, args.nodes)
        figures["version"] = plane.version
    return figures


def report(figures: dict[str, Any], args: argparse.Namespace) -> None:
    counts = sorted(figures["sync"])
    low, high = min(figures["load"]), max(figures["load"])
    print(
        f"Kubernetes {figures['version']}, medians of {args.repeat} fresh processes per figure, "
        f"load average {low:.1f}-{high:.1f} during the run"
    )
    print("\nfirst sync: program start -> every ConfigMap reconciled once (s)")
    header = f"{'peer':<12}" + "".join(f"{c:>12,}" for c in counts)
    if len(counts) > 1:
        header += f"{'us/object at each':>26}"
    print(header)
    medians = {c: {p: statistics.median(s) for p, s in figures["sync"][c].items()} for c in counts}
    for peer in PEERS:
        row = f"{peer:<12}"
        per_object = []
        for count in counts:
            value = medians[count].get(peer)
            row += f"{value:>12.3f}" if value is not None else f"{'-':>12}"
            if value is not None:
                per_object.append(f"{1e6 * value / count:.1f}")
        if len(counts) > 1:
            row += f"{' / '.join(per_object):>26}"
        print(row)
    for label, ours, theirs in (
        ("gpuctrl / raw list (target <= 1.25x)", "gpuctrl", "raw"),
        ("gpuctrl / client-go (goal <= 2x)", "gpuctrl", "client-go"),
        ("gpuctrl / kopf", "gpuctrl", "kopf"),
    ):
        ratios = [
            f"{medians[c][ours] / medians[c][theirs]:.2f}x" if theirs in medians[c] else "-"
            for c in counts
        ]
        print(f"{label:<40}" + "".join(f"{r:>10}" for r in ratios))
    for count in counts:
        stages = figures["stages"][count]
        print(f"\ngpuctrl's stages at {count:,} (one instrumented run, ms; the list's parts")
        print("overlap the network: 'list rest' is waiting for the body, loop, bookkeeping)")
        print("  " + ", ".join(f"{stage} {ms:.0f}" for stage, ms in stages.items()))
    print("\nRSS per cached ConfigMap (bytes; full namespace - empty namespace, medians)")
    print(f"{'peer':<12}" + "".join(f"{c:>12,}" for c in counts))
    for peer in ("gpuctrl", "client-go", "kopf"):
        values = [figures["memory"][c].get(peer) for c in counts]
        print(f"{peer:<12}" + "".join(f"{v:>12.0f}" if v else f"{'-':>12}" for v in values))
    nodes = figures["nodes"]
    print(
        f"\ngpuctrl's store per Node ({args.nodes} Nodes): {nodes['nodes']:.0f} bytes full, "
        f"{nodes['nodes-metadata']:.0f} metadata-only (target <= 2,048 full)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, nargs="+", default=[5000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--kopf-up-to", type=int, default=5000)
    parser.add_argument("--nodes", type=int, default=1000)
    args = parser.parse_args()
    install_kopf()
    started = time.monotonic()
    figures = asyncio.run(measure(args))
    report(figures, args)
    print(f"\n(run took {time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
