"""Benchmark: gpuctrl's admission webhook against an aiohttp floor and kopf (issue 11, section 4).

    .venv/bin/python test/bench/bench_webhook.py [--rate 500] [--seconds 30]

Each server runs in its own process on loopback HTTPS (one self-signed certificate for all):

- ``floor``: a bare aiohttp handler answering ``allowed: true`` with no work;
- ``gpuctrl``: `gpuctrl.runtime.webhook.WebhookServer` with the PodPolicy handler and 5 policies;
- ``kopf``: kopf's admission server running an equivalent ``@kopf.on.mutate`` handler (kopf is
  installed with pip when missing; it needs a cluster to log in to, so a local control plane
  is started for it, and left to settle before any server is measured).

The load generator (a lean HTTP/1.1 client on asyncio streams) sends AdmissionReviews of a pod
with 3 containers open-loop at ``--rate`` per second over kept-alive connections (as the
apiserver does); latency is measured from each request's scheduled send time, so a server
that falls behind is charged for the queue.
An error is a failed request, a non-200 answer, or an answer without the expected patch.
Besides latency, each server's CPU time per request (from /proc) is reported: on a shared
machine it moves much less with the load than latency does.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpuctrl.testing import ControlPlane
from gpuctrl.testing._pki import self_signed_pair

SERVERS = ("floor", "gpuctrl", "kopf")
NAMESPACE = "gpuctrl"

# Five PodPolicies, all targeting the validator's workload pods.
POLICIES: list[dict[str, Any]] = [
    {"metadata": {"name": "p1-istio"}, "spec": {"meshes": ["istio"]}},
    {"metadata": {"name": "p2-linkerd"}, "spec": {"meshes": ["linkerd", "consul"]}},
    {"metadata": {"name": "p3-labels"}, "spec": {"labels": {"team.example.com/owner": "gpu"}}},
    {"metadata": {"name": "p4-annotations"}, "spec": {"annotations": {"example.com/cost": "gpu"}}},
    {
        "metadata": {"name": "p5-resources"},
        "spec": {"resources": {"requests": {"cpu": "50m"}, "limits": {"memory": "256Mi"}}},
    },
]


def pod() -> dict[str, Any]:
    """A validator workload pod with 3 containers (one init container), ~1.5 KB."""

    def container(name: str) -> dict[str, Any]:
        return {
            "name": name,
            "image": f"nvcr.io/nvidia/cloud-native/gpu-operator-validator:v24.9.0-{name}",
            "command": ["sh", "-c", f"{name} && sleep 1"],
            "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
            "resources": {"limits": {"nvidia.com/gpu": "1"}},
            "securityContext": {"allowPrivilegeEscalation": False},
        }

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "cuda-validation-",
            "namespace": NAMESPACE,
            "labels": {
                "app.kubernetes.io/managed-by": "gpuctrl",
                "app.kubernetes.io/component": "validator-workloads",
                "app": "nvidia-cuda-validator",
            },
        },
        "spec": {
            "restartPolicy": "Never",
            "nodeName": "gpu-node-1",
            "runtimeClassName": "nvidia",
            "initContainers": [container("toolkit-check")],
            "containers": [container("cuda-validation"), container("metrics")],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        },
    }


def review(uid: int) -> bytes:
    request = {
        "uid": f"bench-{uid}",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "name": "",
        "namespace": NAMESPACE,
        "operation": "CREATE",
        "userInfo": {"username": "system:serviceaccount:gpuctrl:gpuctrl-validator"},
        "object": pod(),
        "oldObject": None,
        "dryRun": False,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
    }
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return json.dumps(body).encode()


# --- the servers (child processes) -------------------------------------------------------


async def serve_floor(port: int, cert_dir: Path) -> None:
    from aiohttp import web

    async def handle(request: web.Request) -> web.Response:
        body = await request.json()
        response = {"uid": body["request"]["uid"], "allowed": True}
        return web.json_response(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        )

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_dir / "tls.crt", cert_dir / "tls.key")
    app = web.Application()
    app.router.add_post("/mutate", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=context).start()
    print("ready", flush=True)
    await asyncio.Event().wait()


async def serve_gpuctrl(port: int, cert_dir: Path) -> None:
    from api.v1alpha1 import PodPolicy
    from gpuctrl.runtime.webhook import WebhookServer
    from webhooks._handler import MUTATE_PATH, PodPolicyHandler, PolicySet

    policies = PolicySet()
    for policy in POLICIES:
        policies.on_add(PodPolicy.model_validate(policy).model_dump(by_alias=True))
    server = WebhookServer(cert_dir, host="127.0.0.1", port=port, shutdown_delay=0)
    server.register(MUTATE_PATH, PodPolicyHandler(policies, NAMESPACE))
    task = asyncio.create_task(server.start(asyncio.Event()))
    await server.wait_listening()
    print("ready", flush=True)
    await task


def serve_kopf(port: int, cert_dir: Path) -> None:
    import kopf

    @kopf.on.startup()
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.admission.server = kopf.WebhookServer(
            addr="127.0.0.1",
            port=port,
            certfile=str(cert_dir / "tls.crt"),
            pkeyfile=str(cert_dir / "tls.key"),
        )
        settings.posting.enabled = False
        print("ready", flush=True)

    @kopf.on.mutate("pods", id="mutate", operation="CREATE")
    def mutate(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        # The same work as gpuctrl's PodPolicies: labels, annotations, resources per container.
        labels = dict(body.metadata.labels)
        if labels.get("app.kubernetes.io/component") != "validator-workloads":
            return
        patch.metadata.labels["sidecar.istio.io/inject"] = "false"
        patch.metadata.labels["team.example.com/owner"] = "gpu"
        patch.metadata.annotations["linkerd.io/inject"] = "disabled"
        patch.metadata.annotations["consul.hashicorp.com/connect-inject"] = "false"
        patch.metadata.annotations["example.com/cost"] = "gpu"
        for kind in ("initContainers", "containers"):
            containers = [dict(c) for c in body.spec.get(kind, [])]
            for container in containers:
                resources = dict(container.get("resources") or {})
                resources["requests"] = {**resources.get("requests", {}), "cpu": "50m"}
                resources["limits"] = {**resources.get("limits", {}), "memory": "256Mi"}
                container["resources"] = resources
            if containers:
                patch.spec[kind] = containers

    kopf.run(standalone=True, clusterwide=True)


# --- the load generator ------------------------------------------------------------------


class Pool:
    """Kept-alive HTTPS/1.1 connections on raw asyncio streams: a lean client, so that the
    load generator costs the shared CPUs as little as it can. One request per connection at a
    time (as the apiserver's client does); a new connection when all are busy, up to
    ``limit``."""

    def __init__(self, port: int, path: str, cert: bytes, limit: int = 64) -> None:
        self._port = port
        self._head = (
            f"POST {path}?timeout=10s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Content-Type: application/json\r\nAccept: application/json\r\n"
        ).encode()
        self._context = ssl.create_default_context(cadata=cert.decode())
        self._idle: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = (
            asyncio.Queue()
        )
        self._all: list[asyncio.StreamWriter] = []
        self._opening = 0
        self._limit = limit

    async def post(self, body: bytes) -> tuple[int, bytes]:
        if self._idle.empty() and len(self._all) + self._opening < self._limit:
            self._opening += 1
            try:
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", self._port, ssl=self._context
                )
            finally:
                self._opening -= 1
            self._all.append(writer)
        else:
            reader, writer = await self._idle.get()
        try:
            writer.write(self._head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
            status = int((await reader.readline()).split()[1])
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            data = await reader.readexactly(length)
        except BaseException:
            self._all.remove(writer)  # half-read: never reuse it
            writer.close()
            raise
        self._idle.put_nowait((reader, writer))
        return status, data

    async def close(self) -> None:
        for writer in self._all:
            writer.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process ``pid`` has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def load(
    port: int,
    path: str,
    cert: bytes,
    rate: int,
    seconds: float,
    expect_patch: bool,
    server_pid: int,
) -> dict[str, Any]:
    bodies = [review(i) for i in range(64)]
    latencies: list[float] = []
    errors: list[str] = []
    pool = Pool(port, path, cert)

    async def one(i: int, scheduled: float, record: bool) -> None:
        try:
            async with asyncio.timeout(10):
                status, text = await pool.post(bodies[i % len(bodies)])
            ok = status == 200
            if ok:
                answer = json.loads(text)["response"]
                ok = answer["allowed"] is True and (("patch" in answer) == expect_patch)
            if not ok:
                errors.append(f"{status}: {text[:200]!r}")
        except Exception as error:
            errors.append(repr(error))
        if record:
            latencies.append(time.perf_counter() - scheduled)

    async def run(count: int, record: bool) -> None:
        tasks = []
        start = time.perf_counter()
        for i in range(count):
            scheduled = start + i / rate
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i, scheduled, record)))
        await asyncio.gather(*tasks)

    try:
        await run(rate * 2, record=False)  # warm-up: connections, caches
        errors.clear()
        started, cpu_started = time.perf_counter(), cpu_seconds(server_pid)
        await run(int(rate * seconds), record=True)
        elapsed, cpu = time.perf_counter() - started, cpu_seconds(server_pid) - cpu_started
    finally:
        await pool.close()
    latencies.sort()
    return {
        "requests": len(latencies),
        "achieved_rps": round(len(latencies) / elapsed, 1),
        "p50_ms": round(1000 * statistics.median(latencies), 2),
        "p99_ms": round(1000 * latencies[int(0.99 * (len(latencies) - 1))], 2),
        "max_ms": round(1000 * latencies[-1], 2),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "server_cpu_ms_per_request": round(1000 * cpu / len(latencies), 3),
    }


def ensure_kopf() -> None:
    """Install kopf into this interpreter's environment if it is missing (benchmark only)."""
    if importlib.util.find_spec("kopf") is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "kopf"], check=True)


def start_server(
    name: str, port: int, cert_dir: Path, env: dict[str, str]
) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--serve",
            name,
            "--port",
            str(port),
            "--cert-dir",
            str(cert_dir),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if line.strip() != "ready":
        process.kill()
        raise RuntimeError(f"the {name} server did not start")
    time.sleep(1.0 if name == "kopf" else 0.2)  # kopf binds after its startup handler
    return process


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    ensure_kopf()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        cert_dir = Path(folder)
        cert, key = self_signed_pair("bench-webhook", ["127.0.0.1"])
        (cert_dir / "tls.crt").write_bytes(cert)
        (cert_dir / "tls.key").write_bytes(key)
        async with ControlPlane() as plane:
            await asyncio.sleep(15)  # let the freshly started apiserver and etcd settle
            env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig)}
            for name in args.servers:
                port = free_port()
                process = start_server(name, port, cert_dir, env)
                try:
                    path = {"floor": "/mutate", "gpuctrl": "/mutate-v1-pod", "kopf": "/mutate"}[
                        name
                    ]
                    print(f"{name}: {args.rate} req/s for {args.seconds} s ...", file=sys.stderr)
                    load_before = round(os.getloadavg()[0], 1)
                    results[name] = await load(
                        port, path, cert, args.rate, args.seconds, name != "floor", process.pid
                    )
                    results[name]["load_average_1min_before"] = load_before
                finally:
                    process.terminate()
                    process.wait(10)
                print(f"{name}: {results[name]}", file=sys.stderr)
    results["load_average_1min_at_end"] = round(os.getloadavg()[0], 1)
    floor, ours = results.get("floor"), results.get("gpuctrl")
    kopf = results.get("kopf")
    for figure in ("p99_ms", "server_cpu_ms_per_request"):
        if floor and ours:
            results[f"gpuctrl_vs_floor_{figure}"] = round(ours[figure] / floor[figure], 2)
        if ours and kopf:
            results[f"kopf_vs_gpuctrl_{figure}"] = round(kopf[figure] / ours[figure], 2)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--servers", nargs="+", choices=SERVERS, default=list(SERVERS))
    parser.add_argument("--serve", choices=SERVERS, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--cert-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve == "kopf":
        serve_kopf(args.port, args.cert_dir)
    elif args.serve:
        serve = serve_floor if args.serve == "floor" else serve_gpuctrl
        asyncio.run(serve(args.port, args.cert_dir))
    else:
        print(json.dumps(asyncio.run(bench(args)), indent=2))


if __name__ == "__main__":
    main()
