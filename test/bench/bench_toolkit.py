"""Benchmark: ``gpuctrl toolkit install`` start-up time and peak memory, as a fresh process.

Run: ``.venv/bin/python test/bench/bench_toolkit.py`` (``--help`` for options). Each run copies a
corpus config (containerd 1.6's default layout by default) into a temp folder and runs
``gpuctrl toolkit install`` on it in a new interpreter; prints the median and best wall time and
the peak RSS (from ``wait4``), next to a bare ``python -c pass`` and to importing
kubernetes-asyncio's client - what the agent avoids by importing its subcommand lazily.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "toolkit" / "containerd"


def measure(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one run of ``argv``; it must exit 0."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{argv} exited {process.returncode}")
    return elapsed, usage.ru_maxrss / 1024


def report(name: str, runs: list[tuple[float, float]]) -> None:
    times = [t for t, _ in runs]
    rss = max(r for _, r in runs)
    median, best = statistics.median(times) * 1000, min(times) * 1000
    print(f"{name:<34} median {median:7.1f} ms  best {best:7.1f} ms  peak RSS {rss:6.1f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--layout", default="containerd-1.6-default", help="a corpus file stem")
    args = parser.parse_args()
    source = DATA / f"{args.layout}.toml"
    python = sys.executable
    baseline = [measure([python, "-c", "pass"]) for _ in range(args.runs)]
    k8s = [measure([python, "-c", "import kubernetes_asyncio.client"]) for _ in range(args.runs)]
    runs = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="gpuctrl-bench-") as folder:
            config = Path(folder) / "config.toml"
            shutil.copyfile(source, config)
            argv = [python, "-m", "gpuctrl", "toolkit", "install", "--config", str(config)]
            argv += ["--runtime-dir", "/usr/local/nvidia/toolkit", "--set-as-default"]
            runs.append(measure([*argv, "--state-dir", str(Path(folder) / "state")]))
    print(f"{args.runs} runs each, layout {source.name}")
    report("python -c pass", baseline)
    report("import kubernetes_asyncio.client", k8s)
    report("gpuctrl toolkit install", runs)


if __name__ == "__main__":
    main()
