"""Benchmark: an informer's initial sync by a plain list against a streaming list (WatchList).

    .venv/bin/python test/bench/bench_watchlist.py [--objects 5000] [--repeat 5]

With ``--objects`` ConfigMaps of ~300 bytes in one namespace, each run fetches all of them
and decodes every object, alternating the two ways (medians of ``--repeat``):

- ``list``: one ``GET .../configmaps`` (JSON), decoded whole;
- ``watch-list``: ``GET ...?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan
  &allowWatchBookmarks=true`` (Kubernetes 1.27+, the WatchList feature client-go's reflector
  uses when enabled), each ADDED event decoded as it arrives, until the bookmark annotated
  ``k8s.io/initial-events-end``.

Prints seconds to the last object and the peak of this process's RSS growth while fetching
(the list holds the whole response at once; the stream one event at a time).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import ssl
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from bench_controller import CONFIGMAPS, NAMESPACES, configmap, create_all

from gpuctrl.runtime import Client, new_api_client
from gpuctrl.testing import ControlPlane

NAMESPACE = "bench-watchlist"
END_ANNOTATION = "k8s.io/initial-events-end"


async def plain_list(session: aiohttp.ClientSession, url: str) -> int:
    async with session.get(url) as response:
        response.raise_for_status()
        body = json.loads(await response.read())
    return len(body["items"])


async def watch_list(session: aiohttp.ClientSession, url: str) -> int:
    query = (
        "?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
    )
    count = 0
    async with session.get(url + query) as response:
        response.raise_for_status()
        async for line in response.content:
            event = json.loads(line)
            if event["type"] == "ADDED":
                count += 1
            elif event["type"] == "BOOKMARK":
                annotations = event["object"]["metadata"].get("annotations") or {}
                if annotations.get(END_ANNOTATION) == "true":
                    return count
            elif event["type"] == "ERROR":
                raise RuntimeError(f"watch-list refused: {event['object']}")
    raise RuntimeError("the stream ended before the initial-events-end bookmark")


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def main(args: argparse.Namespace) -> None:
    async with ControlPlane() as plane:
        async with await new_api_client(plane.kubeconfig) as api:
            client = Client(api)
            await client.create(NAMESPACES, {"metadata": {"name": NAMESPACE}})
            objs = [configmap(f"cm-{n}", NAMESPACE) for n in range(args.objects)]
            await create_all(client, CONFIGMAPS, objs, {})
        token = yaml.safe_load(plane.kubeconfig.read_text())["users"][0]["user"]["token"]
        context = ssl.create_default_context(cafile=str(plane.ca_file))
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        url = f"{plane.server}/api/v1/namespaces/{NAMESPACE}/configmaps"
        ways = {"list": plain_list, "watch-list": watch_list}
        seconds: dict[str, list[float]] = {name: [] for name in ways}
        growth: dict[str, list[int]] = {name: [] for name in ways}
        connector = aiohttp.TCPConnector(ssl=context)
        async with aiohttp.ClientSession(headers=headers, connector=connector) as session:
            for _ in range(args.repeat):
                for name, fetch in ways.items():
                    before = rss_kib()
                    started = time.perf_counter()
                    count = await fetch(session, url)
                    seconds[name].append(time.perf_counter() - started)
                    growth[name].append(rss_kib() - before)
                    assert count == args.objects, (name, count)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(
            f"{args.objects:,} ConfigMaps, medians of {args.repeat}, Kubernetes {plane.version}"
            f" (process peak RSS {peak / 1024:.0f} MiB)"
        )
        print(f"{'way':<11} {'seconds':>8} {'RSS growth KiB':>15}")
        for name in ways:
            median: Any = statistics.median(seconds[name])
            print(f"{name:<11} {median:>8.3f} {statistics.median(growth[name]):>15.0f}")
        ratio = statistics.median(seconds["watch-list"]) / statistics.median(seconds["list"])
        print(f"watch-list / list: {ratio:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    asyncio.run(main(parser.parse_args()))
