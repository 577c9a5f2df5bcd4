"""Benchmark: seven writers of one ClusterPolicy's status, JSON patch against server-side apply.

    .venv/bin/python test/bench/bench_status.py [--writers 7] [--rounds 30] [--repeat 3]

Each writer owns one condition and flips it (True/False) ``--rounds`` times, all writers at
once, each starting every write from the copy its own last write returned (stale about the
others', as an informer cache is). Two mechanisms, side by side on the same control plane:

- ``json-patch``: `gpuctrl.runtime.StatusWriter.write` (one writer shared by all, as in the
  operator): a JSON patch replacing the writer's own entry, guarded by a ``test`` of its type;
  adding an entry is a compare-and-swap on the resourceVersion.
- ``apply``: server-side apply of ``{status: {conditions: [own entry]}}`` on ``/status`` with a
  field manager per writer (the conditions list is a list-map keyed by ``type``), the entry's
  lastTransitionTime kept by `set_condition` from the same stale copy.

Prints, per mechanism (medians over ``--repeat`` runs): requests sent per write, refused
requests (a failed guard or a conflict) per write, writes that exhausted their retries (then
tried again from a fresh read, as a controller's requeue would), write latency p50/p99 (of the
whole write, retries included), and wall time; then checks that every condition ended as its
writer last wrote it, once.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections import Counter
from typing import Any

import yaml

from api.crdgen import crd_files
from gpuctrl.runtime import (
    ApiError,
    Client,
    Conflict,
    Resource,
    StatusWriter,
    new_api_client,
    set_condition,
)
from gpuctrl.testing import ControlPlane

POLICIES = Resource("gpuctrl.io/v1alpha1", "ClusterPolicy", "clusterpolicies", namespaced=False)
CRDS = Resource(
    "apiextensions.k8s.io/v1",
    "CustomResourceDefinition",
    "customresourcedefinitions",
    namespaced=False,
)
MECHANISMS = ("json-patch", "apply")


class CountingClient(Client):
    """A `Client` that counts the requests it sends and those the server refused."""

    sent = 0
    refused = 0

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        self.sent += 1
        try:
            return await super().request(method, path, **kwargs)
        except ApiError as error:
            if error.status in (409, 422):
                self.refused += 1
            raise


async def write_json_patch(
    writer: StatusWriter, obj: dict[str, Any], condition: dict[str, Any], _name: str
) -> dict[str, Any]:
    written = await writer.write(POLICIES, obj, [condition])
    assert written is not None
    return written


async def write_apply(
    client: Client, obj: dict[str, Any], condition: dict[str, Any], name: str
) -> dict[str, Any]:
    entries = [dict(c) for c in (obj.get("status") or {}).get("conditions") or ()]
    set_condition(entries, **condition)
    entry = next(c for c in entries if c["type"] == condition["type"])
    body = {
        "apiVersion": POLICIES.api_version,
        "kind": POLICIES.kind,
        "metadata": {"name": obj["metadata"]["name"]},
        "status": {"conditions": [entry]},
    }
    written: dict[str, Any] = await client.apply(POLICIES, body, field_manager=name, sub="status")
    return written


async def run(client: CountingClient, mechanism: str, writers: int, rounds: int) -> dict[str, Any]:
    name = f"bench-{mechanism}-{time.monotonic_ns()}"
    policy = {"apiVersion": POLICIES.api_version, "kind": POLICIES.kind, "metadata": {"name": name}}
    created: dict[str, Any] = await client.create(POLICIES, policy)
    status_writer = StatusWriter(client)
    latencies: list[float] = []
    gave_up: list[str] = []
    last: dict[str, str] = {}

    async def one_writer(index: int) -> None:
        obj = created
        kind = f"Writer{index}Ready"
        for round_ in range(rounds):
            status = "True" if round_ % 2 else "False"
            condition = {"type": kind, "status": status, "reason": f"Round{round_}"}
            started = time.perf_counter()
            while True:
                try:
                    if mechanism == "apply":
                        obj = await write_apply(client, obj, condition, f"writer-{index}")
                    else:
                        obj = await write_json_patch(status_writer, obj, condition, kind)
                    break
                except Conflict:  # retries exhausted: a controller would requeue
                    gave_up.append(kind)
                    obj = await client.get(POLICIES, name)
            latencies.append(time.perf_counter() - started)
            last[kind] = f"{status}/Round{round_}"

    client.sent = client.refused = 0
    started = time.perf_counter()
    await asyncio.gather(*(one_writer(i) for i in range(writers)))
    wall = time.perf_counter() - started
    final = await client.get(POLICIES, name)
    seen = Counter(c["type"] for c in final["status"]["conditions"])
    assert all(count == 1 for count in seen.values()), f"duplicate entries: {seen}"
    ended = {c["type"]: f"{c['status']}/{c['reason']}" for c in final["status"]["conditions"]}
    assert ended == last, f"{mechanism}: lost writes: {ended} != {last}"
    writes = writers * rounds
    latencies.sort()
    return {
        "requests": (client.sent - 1) / writes,  # less the final read
        "refused": client.refused / writes,
        "gave_up": len(gave_up),
        "p50": latencies[len(latencies) // 2] * 1000,
        "p99": latencies[int(len(latencies) * 0.99)] * 1000,
        "wall": wall,
    }


async def main(args: argparse.Namespace) -> None:
    async with ControlPlane() as plane, await new_api_client(plane.kubeconfig) as api:
        client = CountingClient(api)
        for text in crd_files().values():
            await client.create(CRDS, yaml.safe_load(text))
        await asyncio.sleep(2)  # Established
        print(
            f"{args.writers} writers x {args.rounds} writes of one ClusterPolicy's status, "
            f"medians of {args.repeat} runs, Kubernetes {plane.version}"
        )
        print(
            f"{'mechanism':<11} {'req/write':>9} {'refused/write':>13} {'p50 ms':>7} "
            f"{'p99 ms':>7} {'wall s':>7}"
        )
        for mechanism in MECHANISMS:
            runs = [
                await run(client, mechanism, args.writers, args.rounds) for _ in range(args.repeat)
            ]
            row = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            print(
                f"{mechanism:<11} {row['requests']:>9.2f} {row['refused']:>13.2f} "
                f"{row['gave_up']:>7.0f} "
                f"{row['p50']:>7.1f} {row['p99']:>7.1f} {row['wall']:>7.2f}"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3)
    asyncio.run(main(parser.parse_args()))
