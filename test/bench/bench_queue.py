"""Benchmark (a): work-queue add + get + done per second, one worker and many.

Run: ``.venv/bin/python test/bench/bench_queue.py`` (``--help`` for sizes). A producer adds
``--batch`` distinct ``(namespace, name)`` keys, yields to the loop, and repeats until
``--items`` keys went through; ``--workers`` tasks each loop ``get`` / ``done``. One "op" is one
key's add + get + done. Prints ops/s (best of ``--repeat``) for each worker count, with metrics
on (a named queue, as controllers have) and off. ``--batch 1`` measures the worst case: every
add wakes a waiting worker (a task switch per key).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time

from gpuctrl.runtime import QueueShutDown, WorkQueue

Key = tuple[str, str]


async def worker(queue: WorkQueue[Key]) -> int:
    get, done = queue.get, queue.done
    handled = 0
    try:
        while True:
            done(await get())
            handled += 1
    except QueueShutDown:
        return handled


async def run_once(items: int, batch: int, workers: int, metrics: bool) -> tuple[float, float]:
    """(wall seconds, CPU seconds) for ``items`` keys to be added, got and done."""
    queue: WorkQueue[Key] = WorkQueue("bench" if metrics else "", metrics=metrics)
    keys = [("default", f"configmap-{n}") for n in range(batch)]
    tasks = [asyncio.create_task(worker(queue)) for _ in range(workers)]
    await asyncio.sleep(0)
    add = queue.add
    started, cpu_started = time.perf_counter(), time.process_time()
    for _ in range(items // batch):
        for key in keys:
            add(key)
        await asyncio.sleep(0)
    await queue.shutdown_with_drain()
    handled = sum(await asyncio.gather(*tasks))
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    assert handled == items // batch * batch, (handled, items)
    return elapsed, cpu


async def main(args: argparse.Namespace) -> None:
    print(f"work queue add+get+done, {args.items:,} keys per run, batches of {args.batch}")
    print("ops/s by wall-clock time, and by this process's CPU time (steadier on a busy host)")
    print(f"{'workers':>8} {'metrics':>8} {'ops/s':>12} {'us/op':>7} {'ops/s CPU':>12}")
    gc.collect()
    done = args.items // args.batch * args.batch
    for workers in args.workers:
        for metrics in (True, False):
            runs = [await run_once(args.items, args.batch, workers, metrics)
                    for _ in range(args.repeat)]  # fmt: skip
            wall = done / min(elapsed for elapsed, _ in runs)
            cpu = done / min(cpu for _, cpu in runs)
            flag = "on" if metrics else "off"
            print(f"{workers:>8} {flag:>8} {wall:>12,.0f} {1e6 / wall:>7.2f} {cpu:>12,.0f}")


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=500_000, help="keys per run")
    parser.add_argument("--batch", type=int, default=1000, help="keys added per loop iteration")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--repeat", type=int, default=3, help="runs per case; the best counts")
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse()))
