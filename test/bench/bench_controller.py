"""Benchmark: gpuctrl.runtime against kopf on a local control plane (issue 5, section 7 b, c).

    .venv/bin/python test/bench/bench_controller.py [--objects 5000]

(b) N ConfigMaps exist before start: seconds until a no-op reconciler handled each once; then,
    with the controller running, N ConfigMaps are created: per-event latency p50/p99 (create
    request sent -> first handled).
(c) a process caching N ConfigMaps and N Nodes: RSS, peak RSS, and memory per cached object
    (RSS slope between 0 and 2N cached objects).

Every figure comes from a fresh process (bench_controller_child.py). kopf (an ``@kopf.on.event``
handler, its cheapest path) is installed with pip when missing; it is not a test dependency.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gpuctrl.runtime import Client, Resource, new_api_client
from gpuctrl.testing import ControlPlane

CHILD = Path(__file__).with_name("bench_controller_child.py")
CONFIGMAPS = Resource("v1", "ConfigMap", "configmaps")
NODES = Resource("v1", "Node", "nodes", namespaced=False)
NAMESPACES = Resource("v1", "Namespace", "namespaces", namespaced=False)
FRAMEWORKS = ("gpuctrl", "kopf")


def ensure_kopf() -> None:
    """Install kopf into this interpreter's environment if it is missing (benchmark only)."""
    if importlib.util.find_spec("kopf") is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "kopf"], check=True)


def configmap(name: str, namespace: str) -> dict[str, Any]:
    """A small, typical ConfigMap (a few keys, a label, ~300 bytes)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "bench"}},
        "data": {"mode": "fast", "replicas": "3", "config.yaml": f"name: {name}\nlevel: info\n"},
    }


def node(name: str) -> dict[str, Any]:
    """A Node with a realistic status (capacity, conditions, addresses, images), whose IDs,
    address and image sizes differ from node to node as real ones do (stores deflate Nodes)."""
    digest = hashlib.sha256(name.encode()).hexdigest()
    number = int(digest[:8], 16)
    condition_types = ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
    stamp = "2024-01-01T00:00:00Z"
    resources = {"cpu": "64", "memory": "527952348Ki", "pods": "110", "nvidia.com/gpu": "8"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "bench": "mem",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "p4d.24xlarge",
                "nvidia.com/gpu.present": "true",
            },
        },
        "spec": {"podCIDR": "10.0.0.0/24", "providerID": f"aws:///us-east-1a/i-{name}"},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": t,
                    "status": "True" if t == "Ready" else "False",
                    "reason": f"Kubelet{t}",
                    "message": f"kubelet reports {t}",
                    "lastHeartbeatTime": stamp,
                    "lastTransitionTime": stamp,
                }
                for t in condition_types
            ],
            "addresses": [
                {"type": "InternalIP", "address": f"10.{number % 256}.{number // 256 % 256}.1"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "machineID": digest[:32],
                "systemUUID": digest[32:],
                "bootID": hashlib.sha256(digest.encode()).hexdigest()[:32],
                "kernelVersion": "5.15.0",
                "osImage": "Ubuntu 22.04",
                "containerRuntimeVersion": "containerd://1.7.0",
                "kubeletVersion": "v1.20.2",
                "kubeProxyVersion": "v1.20.2",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": [
                {
                    "names": [f"registry.example/image-{(number >> i) % 50}:v1"],
                    "sizeBytes": 100_000_000 + (number >> (2 * i)) % 1_000_000,
                }
                for i in range(5)
            ],
        },
    }


async def create_all(
    client: Client, resource: Resource, objs: list[dict[str, Any]], sent: dict[str, float]
) -> None:
    """Create ``objs`` 16 at a time, recording in ``sent`` when each request went out."""
    gate = asyncio.Semaphore(16)

    async def create(obj: dict[str, Any]) -> None:
        async with gate:
            sent[obj["metadata"]["name"]] = time.time()
            await client.create(resource, obj)

    await asyncio.gather(*(create(o) for o in objs))


async def child(job: str, framework: str, kubeconfig: Path, namespace: str, count: int) -> Any:
    """Run one measurement process; return its JSON (the process object too for ``live``)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(CHILD),
        job,
        framework,
        str(kubeconfig),
        namespace,
        str(count),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    if job == "live":
        return process
    return await finish(process)


async def finish(process: asyncio.subprocess.Process) -> Any:
    """The JSON the child printed last."""
    stdout, _ = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"benchmark child failed ({process.returncode})")
    return json.loads(stdout.decode().strip().splitlines()[-1])


async def live_latency(
    client: Client, framework: str, kubeconfig: Path, count: int
) -> dict[str, float]:
    """Create ``count`` ConfigMaps under a running controller; latency percentiles in ms."""
    namespace = f"bench-live-{framework}"
    await client.create(NAMESPACES, {"metadata": {"name": namespace}})
    process = await child("live", framework, kubeconfig, namespace, count)
    assert process.stdout is not None
    while (await process.stdout.readline()).strip() != b"READY":
        pass
    sent: dict[str, float] = {}
    objs = [configmap(f"live-{i}", namespace) for i in range(count)]
    started = time.perf_counter()
    await create_all(client, CONFIGMAPS, objs, sent)
    created = time.perf_counter() - started
    result = await finish(process)
    latencies = sorted(1000 * (result["first_seen"][n] - sent[n]) for n in sent)
    quantiles = statistics.quantiles(latencies, n=100)
    return {"p50_ms": quantiles[49], "p99_ms": quantiles[98], "create_seconds": created}


async def measure(count: int) -> dict[str, dict[str, Any]]:
    figures: dict[str, dict[str, Any]] = {f: {} for f in FRAMEWORKS}
    async with ControlPlane() as plane, await new_api_client(plane.kubeconfig) as api:
        client = Client(api)
        await client.create(NAMESPACES, {"metadata": {"name": "bench-pre"}})
        for framework in FRAMEWORKS:
            empty = await child("memory", framework, plane.kubeconfig, "bench-pre", 0)
            figures[framework]["empty_rss_kib"] = empty["rss_kib"]
        print(f"creating {count} ConfigMaps and {count} Nodes ...", file=sys.stderr)
        await create_all(
            client, CONFIGMAPS, [configmap(f"cm-{i}", "bench-pre") for i in range(count)], {}
        )
        await create_all(client, NODES, [node(f"node-{i}") for i in range(count)], {})
        started = time.perf_counter()
        await client.request("GET", CONFIGMAPS.path("bench-pre"), query={"resourceVersion": "0"})
        floor = time.perf_counter() - started
        for framework in FRAMEWORKS:
            full = await child("memory", framework, plane.kubeconfig, "bench-pre", 2 * count)
            figures[framework].update(
                objects=full["objects"],
                rss_kib=full["rss_kib"],
                peak_rss_kib=full["peak_rss_kib"],
                per_object_bytes=1024
                * (full["rss_kib"] - figures[framework]["empty_rss_kib"])
                / full["objects"],
            )
            synced = await child("sync", framework, plane.kubeconfig, "bench-pre", count)
            figures[framework]["sync_seconds"] = synced["seconds"]
            figures[framework]["sync_peak_rss_kib"] = synced["peak_rss_kib"]
            figures[framework].update(
                await live_latency(client, framework, plane.kubeconfig, count)
            )
        figures["floor"] = {"list_seconds": floor}
        figures["gpuctrl"].update(await gpuctrl_only(plane.kubeconfig, count))
    return figures


async def gpuctrl_only(kubeconfig: Path, count: int) -> dict[str, Any]:
    """Node memory full vs metadata-only, and probe/Lease timing under ``count`` busy keys."""
    figures: dict[str, Any] = {}
    for job in ("nodes", "nodes-metadata"):
        held = await child(job, "gpuctrl", kubeconfig, "bench-pre", count)
        per_node = 1024 * (held["rss_kib"] - held["base_rss_kib"]) / max(held["objects"], 1)
        figures[f"{job}_bytes"] = per_node
        figures[f"{job}_stored_bytes"] = held["stored_bytes"]
    figures.update(await child("busy", "gpuctrl", kubeconfig, "bench-pre", count))
    return figures


def report(figures: dict[str, dict[str, Any]], count: int) -> None:
    g, k = figures["gpuctrl"], figures["kopf"]
    rows = [
        (f"(b) {count} existing ConfigMaps, all handled once (s)", "sync_seconds", "{:.2f}"),
        ("(b) live create -> handled, p50 (ms)", "p50_ms", "{:.1f}"),
        ("(b) live create -> handled, p99 (ms)", "p99_ms", "{:.1f}"),
        (f"(c) RSS caching {count} ConfigMaps + {count} Nodes (MiB)", "rss_kib", "{:.0f}"),
        ("(c) peak RSS, same process (MiB)", "peak_rss_kib", "{:.0f}"),
        ("(c) RSS with nothing cached (MiB)", "empty_rss_kib", "{:.0f}"),
        ("(c) memory per cached object (bytes)", "per_object_bytes", "{:.0f}"),
        (f"(b) peak RSS while handling {count} ConfigMaps (MiB)", "sync_peak_rss_kib", "{:.0f}"),
    ]
    print(f"{'figure':58} {'gpuctrl':>9} {'kopf':>9} {'kopf/gpuctrl':>13}")
    for label, key, fmt in rows:
        scale = 1 / 1024 if key.endswith("_kib") else 1
        ours, theirs = g[key] * scale, k[key] * scale
        ratio = theirs / ours if ours else float("inf")
        print(f"{label:58} {fmt.format(ours):>9} {fmt.format(theirs):>9} {ratio:>12.1f}x")
    print(
        f"gpuctrl only: per cached Node {g['nodes_bytes']:.0f} bytes of RSS full, "
        f"{g['nodes-metadata_bytes']:.0f} metadata-only (held in the store: "
        f"{g['nodes_stored_bytes']:.0f} and {g['nodes-metadata_stored_bytes']:.0f} bytes); "
        f"with {count} busy keys "
        f"(1 ms each): worst /healthz {g['healthz_worst_ms']:.0f} ms over "
        f"{g['healthz_probes']} probes, worst Lease renewal delay "
        f"{g['renewal_worst_delay_s']:.2f} s ({g['renewals']} renewals), "
        f"{g['reconciles_per_s']:.0f} reconciles/s"
    )
    floor = figures["floor"]["list_seconds"]
    print(f"floor: one raw list of {count} ConfigMaps from the watch cache: {floor:.2f} s")
    print(
        f"live creates took {g['create_seconds']:.1f} s (gpuctrl run), "
        f"{k['create_seconds']:.1f} s (kopf run)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=5000, help="objects per kind")
    args = parser.parse_args()
    ensure_kopf()
    figures = asyncio.run(measure(args.objects))
    report(figures, args.objects)


if __name__ == "__main__":
    main()
