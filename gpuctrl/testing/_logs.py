"""Container logs of simulated pods, served as a kubelet serves them (``kubectl logs``).

The apiserver answers ``GET pods/{name}/log`` by proxying to the node's kubelet endpoint, here
``https://<the node's InternalDNS address>:<status.daemonEndpoints.kubeletEndpoint.Port>``
``/containerLogs/{namespace}/{pod}/{container}``. `container_log` is the pure part: what a
container's log is (its `ContainerBehavior.log`, the same text for every run; for a
process-backed container, what its process wrote in that run) and the errors a kubelet gives
instead; `LogServer` is the HTTPS endpoint on loopback, with a self-signed
certificate (the apiserver checks none unless given ``--kubelet-certificate-authority``).
"""

from __future__ import annotations

import ssl
import tempfile
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from ._nodes import KUBELET_HOST
from ._pki import self_signed_pair
from ._podsim import NOT_STARTED, PodSim

__all__ = ["LogServer", "LogUnavailable", "ProcessLog", "container_log"]


class LogUnavailable(Exception):
    """The kubelet cannot serve the log asked for; the message says why, as a kubelet's does."""


ProcessLog = Callable[[PodSim, str, int], str]
"""The output of a process-backed container (pod, container, run: its restart count)."""


def container_log(
    sim: PodSim,
    pod: str,
    container: str,
    *,
    previous: bool,
    tail_lines: int | None,
    process_log: ProcessLog | None = None,
) -> str:
    """The log of ``container`` of the pod ``sim`` (named ``pod``): of its previous run with
    ``previous``, only the last ``tail_lines`` lines when given. Raises `LogUnavailable`."""
    found = next((c for c in sim.containers if c.name == container), None)
    if found is None:
        raise LogUnavailable(f'container "{container}" in pod "{pod}" is not available')
    if previous and found.last is None:
        raise LogUnavailable(
            f'previous terminated container "{container}" in pod "{pod}" not found'
        )
    if not previous and found.state in NOT_STARTED:
        raise LogUnavailable(f'container "{container}" in pod "{pod}" is waiting to start')
    text = found.behavior.log
    if found.behavior.process and process_log is not None:
        text = process_log(sim, container, found.restart_count - previous)
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    if tail_lines is not None:
        lines = lines[-tail_lines:] if tail_lines > 0 else []
    return "".join(lines)


class LogServer:
    """The kubelet endpoint of a `SimulatedKubelet`'s nodes: serves ``/containerLogs``.

    ``find(namespace, name)`` gives the simulation of a pod the kubelet runs (None: unknown).
    `start` returns the port; `stop` must follow.
    """

    def __init__(
        self, find: Callable[[str, str], PodSim | None], process_log: ProcessLog | None = None
    ) -> None:
        self._find = find
        self._process_log = process_log
        app = web.Application()
        app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", self._logs)
        self._runner = web.AppRunner(app, access_log=None)

    async def start(self) -> int:
        """Listen on `KUBELET_HOST` at a free port, and return the port."""
        await self._runner.setup()
        site = web.TCPSite(self._runner, KUBELET_HOST, 0, ssl_context=_serving_context())
        await site.start()
        server = site._server
        assert server is not None
        port: int = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        return port

    async def stop(self) -> None:
        """Stop serving; idempotent."""
        await self._runner.cleanup()

    async def _logs(self, request: web.Request) -> web.Response:
        info = request.match_info
        sim = self._find(info["namespace"], info["pod"])
        if sim is None:
            raise web.HTTPNotFound(text=f'pod "{info["pod"]}" not found')
        query = request.query
        try:
            tail = int(query["tailLines"]) if "tailLines" in query else None
            text = container_log(
                sim,
                info["pod"],
                info["container"],
                previous=query.get("previous") == "true",
                tail_lines=tail,
                process_log=self._process_log,
            )
        except ValueError as error:
            raise web.HTTPBadRequest(text=f"tailLines: {error}") from error
        except LogUnavailable as error:
            raise web.HTTPBadRequest(text=str(error)) from error
        return web.Response(text=text)


def _serving_context() -> ssl.SSLContext:
    cert_pem, key_pem = self_signed_pair("simulated-kubelet", [KUBELET_HOST])
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory(prefix="gpuctrl-kubelet-") as folder:
        cert_file, key_file = Path(folder) / "tls.crt", Path(folder) / "tls.key"
        cert_file.write_bytes(cert_pem)
        key_file.write_bytes(key_pem)
        context.load_cert_chain(cert_file, key_file)
    return context
