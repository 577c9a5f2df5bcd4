"""One measured process of bench_controller.py: gpuctrl or kopf doing one job, printing JSON.

    python bench_controller_child.py JOB FRAMEWORK KUBECONFIG NAMESPACE COUNT

JOB is ``sync`` (time until COUNT ConfigMaps of NAMESPACE were each handled once), ``live``
(print READY, then the wall-clock time each of COUNT new ConfigMaps was first handled),
``memory`` (cache NAMESPACE's ConfigMaps and every Node until COUNT objects are held, then
report RSS) or ``configmaps`` (the same for NAMESPACE's ConfigMaps alone). gpuctrl only:
``nodes`` / ``nodes-metadata`` (cache every Node, full or metadata-only, report RSS),
``stages`` (``sync``, timing each stage of the first list: decode, transform, store, freeze,
dispatch, workers) and ``busy`` (COUNT keys reconciling without pause, 1 ms of CPU each, for
10 s: the worst ``/healthz`` latency seen from another thread and the worst delay of a Lease
renewal past its 2 s period). FRAMEWORK is ``gpuctrl``, ``kopf`` (an ``@kopf.on.event``
handler, its cheapest path; for ``memory`` and ``configmaps`` it keeps each event's object in
a dict, as a cache would) or ``raw`` (``sync`` only: one list of NAMESPACE's ConfigMaps with
kubernetes-asyncio's own kubeconfig loader and API class, its body decoded with
``json.loads``, from the watch cache as an informer's first list: the floor).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

BUSY_SECONDS = 10.0


def rss_kib(field: str) -> int:
    """``VmRSS`` (now) or ``VmHWM`` (peak) of this process, in KiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


class Tally:
    """Counts distinct names handled; remembers when each was first handled."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.first_seen: dict[str, float] = {}
        self.done = asyncio.Event()

    def saw(self, name: str) -> None:
        if name not in self.first_seen:
            self.first_seen[name] = time.time()
            if len(self.first_seen) >= self.count:
                self.done.set()


class Synced(asyncio.Event):
    """A runnable the manager starts once its caches synced: it sets itself."""

    needs_leader = False

    async def start(self, stop: asyncio.Event) -> None:
        self.set()
        await stop.wait()


async def run_gpuctrl(job: str, kubeconfig: str, namespace: str, tally: Tally) -> dict[str, Any]:
    from gpuctrl import runtime as rt

    configmaps = rt.Resource("v1", "ConfigMap", "configmaps")
    nodes = rt.Resource("v1", "Node", "nodes", namespaced=False)
    stages = instrument() if job == "stages" else None
    started = time.perf_counter()
    if job == "busy":
        return await run_busy(kubeconfig, namespace, tally.count)
    manager = await rt.Manager.create(
        kubeconfig, metrics_bind_address=None, health_probe_bind_address=None
    )
    if job in ("memory", "configmaps"):
        manager.cache.informer(configmaps, namespace=namespace)
        if job == "memory":
            manager.cache.informer(nodes)
    elif job.startswith("nodes"):
        manager.cache.informer(nodes, metadata_only=job == "nodes-metadata")
    else:

        async def reconcile(request: rt.Request) -> None:
            tally.saw(request.name)

        manager.add_controller("bench", reconcile, for_=configmaps, namespace=namespace)
        if stages is not None:
            informer = manager.cache.informer(configmaps, namespace=namespace)
            informer.transform = timed(stages, "transform", informer.transform)
    synced = Synced()
    manager.add(synced)
    if job.startswith("nodes"):  # not timed: a full collection after the imports takes ~50 ms
        gc.collect()
    base_rss_kib = rss_kib("VmRSS")  # before anything is listed
    stop = asyncio.Event()
    running = asyncio.create_task(manager.start(stop))
    if job == "live":
        await synced.wait()
        print("READY", flush=True)
    if job in ("memory", "configmaps"):
        await synced.wait()
        held = len(manager.cache.list(configmaps, namespace))
        if job == "memory":
            held += len(manager.cache.list(nodes))
        result = memory_figures(held)
    elif job.startswith("nodes"):
        await synced.wait()
        result = memory_figures(len(manager.cache.list(nodes, metadata_only=job != "nodes")))
        result["base_rss_kib"] = base_rss_kib
        store = manager.cache.informer(nodes, metadata_only=job != "nodes").store
        result["stored_bytes"] = stored_bytes(store) / max(len(store), 1)
    else:
        await tally.done.wait()
        result = {"seconds": time.perf_counter() - started}
        if stages is not None:
            stages["done"] = time.perf_counter()
            result["stages"] = stage_figures(stages, started)
    stop.set()
    await running
    return result


def timed(spent: dict[str, float], stage: str, func: Callable[..., Any]) -> Callable[..., Any]:
    """``func``, adding the seconds each call takes to ``spent[stage]``."""
    clock = time.perf_counter

    def timing(*args: Any, **kwargs: Any) -> Any:
        began = clock()
        try:
            return func(*args, **kwargs)
        finally:
            spent[stage] += clock() - began

    return timing


def instrument() -> dict[str, float]:
    """Time the stages of an informer's list and of the controller (``stages`` job)."""
    from gpuctrl.runtime import _controller, _informer, _listjson, _reflector, _store

    spent: dict[str, float] = defaultdict(float)
    _listjson._scan_once = timed(spent, "decode", _listjson._scan_once)
    _listjson._scan = timed(spent, "decode", _listjson._scan)
    store = _store.Store
    store.upsert_as = timed(spent, "store", store.upsert_as)  # type: ignore[method-assign]
    _informer.freeze = timed(spent, "freeze", _informer.freeze)
    dispatch = _informer.Informer._dispatch
    _informer.Informer._dispatch = timed(spent, "dispatch", dispatch)  # type: ignore[method-assign]
    list_at = _reflector.Reflector._list_at

    async def listing(self: Any, resource_version: str) -> str:
        spent.setdefault("list started", time.perf_counter())
        try:
            return await list_at(self, resource_version)
        finally:
            spent["list ended"] = time.perf_counter()

    _reflector.Reflector._list_at = listing  # type: ignore[method-assign]
    start = _controller.Controller.start

    async def starting(self: Any, stop: asyncio.Event) -> None:
        spent["workers started"] = time.perf_counter()
        await start(self, stop)

    _controller.Controller.start = starting  # type: ignore[method-assign]
    return spent


def stage_figures(spent: dict[str, float], started: float) -> dict[str, float]:
    """Milliseconds per stage, from `instrument`'s records."""
    listed = spent["list ended"] - spent["list started"]
    cpu = ("decode", "transform", "store", "freeze", "dispatch")
    figures = {
        "setup": spent["list started"] - started,
        "list": listed,
        **{stage: spent[stage] for stage in cpu},
        "list rest": listed - sum(spent[stage] for stage in cpu),
        "synced -> workers": spent["workers started"] - spent["list ended"],
        "workers": spent["done"] - spent["workers started"],
    }
    return {stage: 1000 * seconds for stage, seconds in figures.items()}


async def run_raw(kubeconfig: str, namespace: str) -> dict[str, Any]:
    """One list with kubernetes-asyncio alone, decoded with ``json.loads``: the floor."""
    from kubernetes_asyncio import client, config

    started = time.perf_counter()
    configuration = client.Configuration()
    await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    async with client.ApiClient(configuration) as api:
        response = await client.CoreV1Api(api).list_namespaced_config_map(
            namespace, resource_version="0", _preload_content=False
        )
        items = json.loads(await response.read())["items"]
        seconds = time.perf_counter() - started
    return {"seconds": seconds, "objects": len(items)}


PROBER = """
import json, sys, time, urllib.request
url, seconds = sys.argv[1], float(sys.argv[2])
latencies, end = [], time.monotonic() + seconds
while time.monotonic() < end:
    sent = time.monotonic()
    with urllib.request.urlopen(url, timeout=30) as response:
        response.read()
    latencies.append(time.monotonic() - sent)
    time.sleep(0.05)
print(json.dumps(latencies))
"""


async def run_busy(kubeconfig: str, namespace: str, count: int) -> dict[str, Any]:
    """``count`` keys that never stop reconciling; probe and Lease timing meanwhile."""
    from gpuctrl import runtime as rt
    from gpuctrl.runtime._leader import LeaderElector

    renewals: list[float] = []
    take_or_renew = LeaderElector._take_or_renew

    async def timed(self: LeaderElector) -> bool:
        held = await take_or_renew(self)
        if held:
            renewals.append(time.monotonic())
        return held

    LeaderElector._take_or_renew = timed  # type: ignore[method-assign]
    manager = await rt.Manager.create(
        kubeconfig,
        metrics_bind_address=None,
        health_probe_bind_address="127.0.0.1:0",
        leader_election=rt.LeaderElection("bench-busy", namespace),
    )
    reconciles = 0

    async def busy(request: rt.Request) -> None:
        nonlocal reconciles
        reconciles += 1
        deadline = time.perf_counter() + 0.001
        while time.perf_counter() < deadline:  # 1 ms of CPU, no await
            pass
        controller.queue.add(request)

    configmaps = rt.Resource("v1", "ConfigMap", "configmaps")
    controller = manager.add_controller("busy", busy, for_=configmaps, namespace=namespace)
    leading = Synced()
    leading.needs_leader = True
    manager.add(leading)
    stop = asyncio.Event()
    running = asyncio.create_task(manager.start(stop))
    await leading.wait()
    for i in range(count):
        controller.queue.add(rt.Request(namespace, f"busy-{i}"))
    url = f"http://127.0.0.1:{manager.health_probe_port}/healthz"
    renewals.clear()
    started = time.monotonic()
    # Probed from another process, as a kubelet probes: a thread of this one would wait for
    # the GIL the busy reconciles hold, and measure that instead of the manager's answer.
    prober = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PROBER, url, str(BUSY_SECONDS), stdout=asyncio.subprocess.PIPE
    )
    output, _ = await prober.communicate()
    latencies: list[float] = json.loads(output)
    gaps = [b - a for a, b in zip([started, *renewals], renewals, strict=False)]
    stop.set()
    await running
    return {
        "healthz_worst_ms": 1000 * max(latencies),
        "healthz_probes": len(latencies),
        "renewal_worst_delay_s": max(gaps) - 2.0 if gaps else BUSY_SECONDS,
        "renewals": len(renewals),
        "reconciles_per_s": reconciles / BUSY_SECONDS,
    }


async def run_kopf(job: str, kubeconfig: str, namespace: str, tally: Tally) -> dict[str, Any]:
    import kopf

    os.environ["KUBECONFIG"] = kubeconfig
    registry = kopf.OperatorRegistry()
    cache: dict[str, Any] = {}

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> Any:
        return kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.enabled = False

    def handler(name: str) -> Callable[..., None]:
        def on_event(event: dict[str, Any], **_: Any) -> None:
            obj = event["object"]
            if job in ("memory", "configmaps"):
                cache[obj["metadata"]["uid"]] = obj
                tally.saw(obj["metadata"]["uid"])
            elif obj["metadata"].get("namespace") == namespace:
                tally.saw(obj["metadata"]["name"])

        return on_event

    kopf.on.event("configmaps", registry=registry)(handler("configmaps"))
    if job == "memory":
        kopf.on.event("nodes", registry=registry)(handler("nodes"))
    stop_flag: asyncio.Event = asyncio.Event()
    ready_flag: asyncio.Event = asyncio.Event()
    started = time.perf_counter()
    operator = asyncio.create_task(
        kopf.operator(
            registry=registry,
            standalone=True,
            namespaces=[namespace],
            stop_flag=stop_flag,
            ready_flag=ready_flag,
        )
    )
    if job == "live":
        await ready_flag.wait()
        await asyncio.sleep(1.0)  # kopf's watches start after ready: let them connect
        print("READY", flush=True)
    if job in ("memory", "configmaps") and tally.count == 0:
        await ready_flag.wait()
        await asyncio.sleep(2.0)
    else:
        await tally.done.wait()
    if job in ("memory", "configmaps"):
        await asyncio.sleep(1.0)  # let per-object workers settle
        result = memory_figures(len(cache))
    else:
        result = {"seconds": time.perf_counter() - started}
    stop_flag.set()
    await operator
    return result


def stored_bytes(store: Any) -> int:
    """Bytes a store holds for its objects: keys and entries (JSON and resourceVersion)."""
    return sum(sys.getsizeof(key) + sys.getsizeof(entry) for key, entry in store._objects.items())


def memory_figures(held: int) -> dict[str, Any]:
    gc.collect()
    return {"objects": held, "rss_kib": rss_kib("VmRSS"), "peak_rss_kib": rss_kib("VmHWM")}


async def main(job: str, framework: str, kubeconfig: str, namespace: str, count: str) -> None:
    tally = Tally(int(count))
    if framework == "raw":
        result = await run_raw(kubeconfig, namespace)
    else:
        run = run_gpuctrl if framework == "gpuctrl" else run_kopf
        result = await run(job, kubeconfig, namespace, tally)
    if job == "live":
        result["first_seen"] = tally.first_seen
    result["peak_rss_kib"] = rss_kib("VmHWM")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    asyncio.run(main(*sys.argv[1:6]))
