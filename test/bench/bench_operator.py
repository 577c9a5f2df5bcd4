"""Benchmark: `gpuctrl manager` on a local control plane with many GPU nodes (two OS versions).

Run: .venv/bin/python test/bench/bench_operator.py [--nodes 1000] [--quiet-seconds 60]

Variant measured: nodes registered as Node objects (NFD labels of Ubuntu 22.04 and 24.04) on
etcd + kube-apiserver without controller-manager, so no operand pods are created: the figures
are the operator's own work. Prints (a) seconds from starting the manager until every GPU node
carries its four deploy labels and all five DaemonSets (two drivers, toolkit, validator, device
plugin) are applied; (c) the manager's write requests during ``--quiet-seconds`` after that,
counted in the apiserver's audit log by its User-Agent (Lease renewals listed apart); (d) the
manager's peak RSS (VmHWM). (b), status latency after the last pod turns Ready, needs operand
pods and is not measured by this variant. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

from gpuctrl.runtime import Client, NotFound, Resource, new_api_client
from gpuctrl.testing import ControlPlane

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "test" / "integration" / "controllers"))
from operator_helpers import POLICIES, AuditLog, install_crds, policy  # noqa: E402

NODES = Resource("v1", "Node", "nodes", False)
DAEMON_SETS = Resource("apps/v1", "DaemonSet", "daemonsets")
NFD = "feature.node.kubernetes.io"
DEPLOY = ",".join(
    f"nvidia.com/gpu.deploy.{o}=true"
    for o in ("driver", "container-toolkit", "operator-validator", "device-plugin")
)


def node(index: int) -> dict[str, object]:
    version = ("22.04", "24.04")[index % 2]
    labels = {
        f"{NFD}/pci-10de.present": "true",
        f"{NFD}/system-os_release.ID": "ubuntu",
        f"{NFD}/system-os_release.VERSION_ID": version,
        "kubernetes.io/hostname": f"gpu-{index}",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": f"gpu-{index}", "labels": labels},
    }


async def create_nodes(client: Client, count: int) -> None:
    limit = asyncio.Semaphore(32)

    async def one(index: int) -> None:
        async with limit:
            await client.create(NODES, node(index))

    await asyncio.gather(*(one(i) for i in range(count)))


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


async def converged(client: Client, count: int) -> bool:
    try:
        labelled = await client.list(NODES, label_selector=DEPLOY)
        sets = await client.list(DAEMON_SETS, "gpuctrl")
    except NotFound:
        return False
    return len(labelled) == count and len(sets) == 5


async def main(count: int, quiet: float) -> None:
    async with ControlPlane(audit=True) as plane, await new_api_client(plane.kubeconfig) as api:
        client = Client(api, request_timeout=120)
        await install_crds(client)
        started = time.monotonic()
        await create_nodes(client, count)
        print(f"{count} nodes registered in {time.monotonic() - started:.1f} s", flush=True)
        await client.create(POLICIES, policy("bench"))
        audit = AuditLog(plane.audit_log)
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        started = time.monotonic()
        manager = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gpuctrl", "manager", "--kubeconfig", str(plane.kubeconfig),
            "--no-leader-elect", "--metrics-bind-address", "127.0.0.1:0",
            "--health-probe-bind-address", "127.0.0.1:0", "--log-format", "json",
            env=env, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        try:
            while not await converged(client, count):  # noqa: ASYNC110 (the API has no event for this)
                await asyncio.sleep(1)  # a 5,000-node list costs the apiserver too
            work = time.monotonic() - started
            print(
                f"(a) manager start -> every node labelled, every DaemonSet applied: {work:.1f} s"
            )
            await asyncio.sleep(5)  # the last status writes
            audit.mark()
            await asyncio.sleep(quiet)
            writes = audit.writes(leases=True)
            print(
                f"(c) write requests in {quiet:.0f} s after convergence: {len(writes)}"
                + (f" {json.dumps(writes[:10])}" if writes else "")
            )
            print(f"(d) manager peak RSS: {peak_rss_mib(manager.pid):.0f} MiB")
        finally:
            manager.terminate()
            await manager.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--quiet-seconds", type=float, default=60)
    options = parser.parse_args()
    asyncio.run(main(options.nodes, options.quiet_seconds))
