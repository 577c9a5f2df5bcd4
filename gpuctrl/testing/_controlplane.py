"""A real Kubernetes control plane on loopback: etcd, kube-apiserver and optionally
kube-controller-manager and kube-scheduler (the counterpart of controller-runtime's envtest).

Each instance lives in a fresh folder (on /dev/shm when it exists, so etcd's fsyncs cost nothing)
holding its own CA, serving certificate, service-account key, token file, kubeconfigs, etcd data
and process logs. etcd and the apiserver start together (the apiserver retries etcd until it
answers); `__aenter__` returns once /readyz answers and, with a controller-manager, once the
`default` ServiceAccount of namespace `default` has its token.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import socket
import ssl
import tempfile
import weakref
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from gpuctrl.runtime import new_api_client

from ._kubeconfig import write_kubeconfig
from ._pki import Pki, write_pki
from ._process import Process, Resources
from .envtest import ASSETS_ENV, assets_dir

__all__ = ["ControlPlane", "ControlPlaneError", "default_assets_dir"]

_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
_FOLDER_PREFIX = "gpuctrl-cp-"
_READY_TIMEOUT_SECONDS = 60.0
_POLL_SECONDS = 0.05
_STOP_GRACE_SECONDS = 2.0
_TOKEN_SECONDS = 24 * 3600
_SERVICE_CIDR = "10.0.0.0/24"
# Every request's metadata, once, when its response is complete.
_AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted, Panic]
rules:
- level: Metadata
"""


class ControlPlaneError(RuntimeError):
    """The control plane could not be started: binaries missing, or a process died or hung."""


def default_assets_dir() -> Path:
    """The folder holding the binaries: ``$GPUCTRL_ENVTEST_ASSETS``, else
    ``~/.cache/gpuctrl/envtest/<release>`` of the release `envtest.kubernetes_version` names
    (``$GPUCTRL_K8S_VERSION`` or the default)."""
    return assets_dir()


class ControlPlane:
    """etcd and kube-apiserver (RBAC on), optionally controller-manager and scheduler.

    ``audit`` makes the apiserver log every request's metadata (user, user agent, verb,
    resource, response code) as JSON lines to `audit_log`, e.g. to count a client's writes.
    ``admission_plugins`` are enabled besides the apiserver's default ones (e.g.
    ``OwnerReferencesPermissionEnforcement``, on by default in OpenShift).

    Use as ``async with ControlPlane(...) as cp:``; `cp.kubeconfig` authenticates as an admin in
    `system:masters`. Leaving the block kills every process and removes the folder; so does a
    failure while starting, garbage collection and interpreter exit.
    """

    def __init__(
        self,
        *,
        controller_manager: bool = False,
        scheduler: bool = False,
        assets_dir: Path | None = None,
        audit: bool = False,
        admission_plugins: Sequence[str] = (),
    ) -> None:
        self.controller_manager = controller_manager
        self.scheduler = scheduler
        self.audit = audit
        self.admission_plugins = tuple(admission_plugins)
        self.assets_dir = assets_dir or default_assets_dir()
        self._apiserver: Process | None = None
        self._resources: Resources | None = None
        self._finalizer: weakref.finalize[[], ControlPlane] | None = None

    # Set by __aenter__.
    directory: Path
    kubeconfig: Path
    server: str
    ca_file: Path
    version: str  # the apiserver's gitVersion, as /version says (v1.34.4)
    _pki: Pki
    _binaries: dict[str, Path]
    _admin_token: str
    _etcd_url: str
    _apiserver_port: int

    async def __aenter__(self) -> Self:
        _remove_abandoned_folders()
        binaries = _check_binaries(self.assets_dir)
        self.directory = Path(
            tempfile.mkdtemp(prefix=f"{_FOLDER_PREFIX}{os.getpid()}-", dir=_temp_root())
        )
        self._resources = Resources(self.directory)
        self._finalizer = weakref.finalize(self, self._resources.close)
        try:
            await self._start(binaries)
        except BaseException:
            self._finalizer()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Nothing of the cluster is kept, so SIGKILL is as good as a graceful stop, and instant.
        assert self._finalizer is not None
        self._finalizer()

    @property
    def audit_log(self) -> Path:
        """The apiserver's audit log (JSON lines; only written with ``audit=True``)."""
        return self.directory / "audit.log"

    @property
    def processes(self) -> list[Process]:
        """The running processes, etcd first."""
        return list(self._resources.processes) if self._resources else []

    async def restart_apiserver(self) -> None:
        """Stop kube-apiserver and start it again on the same port; etcd keeps running.

        Returns once /readyz answers. Kubeconfigs and tokens stay valid.
        """
        assert self._apiserver is not None
        assert self._resources is not None
        await self._apiserver.stop(_STOP_GRACE_SECONDS)
        self._resources.processes.remove(self._apiserver)
        self._apiserver = self._spawn("kube-apiserver", self._apiserver_argv())
        await self._wait_ready()

    async def service_account_kubeconfig(self, namespace: str, name: str) -> Path:
        """A kubeconfig authenticating as ServiceAccount `namespace/name`, created if missing.

        The token comes from the TokenRequest API (valid 24 h), so no token controller is needed.
        The namespace must exist.
        """
        async with await new_api_client(self.kubeconfig) as api:
            core = client.CoreV1Api(api)
            account = client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name))
            try:
                await core.create_namespaced_service_account(namespace, account)
            except ApiException as error:
                if error.status != 409:
                    raise
            # No audiences: the apiserver's own, so the token authenticates to it.
            spec = client.V1TokenRequestSpec(audiences=[], expiration_seconds=_TOKEN_SECONDS)
            request = client.AuthenticationV1TokenRequest(spec=spec)
            response = await core.create_namespaced_service_account_token(name, namespace, request)
        path = self.directory / f"sa-{namespace}-{name}.kubeconfig"
        user = f"system:serviceaccount:{namespace}:{name}"
        token = response.status.token
        return write_kubeconfig(
            path, server=self.server, ca_file=self.ca_file, user=user, token=token
        )

    async def _start(self, binaries: dict[str, Path]) -> None:
        self._binaries = binaries
        self._pki = write_pki(self.directory)
        self.ca_file = self._pki.ca_file
        self._admin_token = secrets.token_urlsafe(32)
        tokens = f"{self._admin_token},admin,admin,system:masters\n"
        (self.directory / "tokens.csv").write_text(tokens)
        etcd_port, peer_port, self._apiserver_port = _free_ports(3)
        self._etcd_url = f"http://127.0.0.1:{etcd_port}"
        self.server = f"https://127.0.0.1:{self._apiserver_port}"
        self.kubeconfig = write_kubeconfig(
            self.directory / "admin.kubeconfig",
            server=self.server,
            ca_file=self.ca_file,
            user="admin",
            token=self._admin_token,
        )
        self._spawn("etcd", self._etcd_argv(peer_port))
        self._apiserver = self._spawn("kube-apiserver", self._apiserver_argv())
        await self._wait_ready()
        if self.controller_manager:
            self._spawn("kube-controller-manager", self._controller_manager_argv())
        if self.scheduler:
            argv = [f"--kubeconfig={self.kubeconfig}", "--leader-elect=false"]
            self._spawn("kube-scheduler", [*argv, "--secure-port=0"])
        if self.controller_manager:
            await self._wait_default_service_account()

    def _spawn(self, name: str, args: list[str]) -> Process:
        assert self._resources is not None
        argv = [str(self._binaries[name]), *args]
        process = Process(name, argv, self.directory / f"{name}.log")
        self._resources.processes.append(process)
        return process

    def _etcd_argv(self, peer_port: int) -> list[str]:
        return [
            f"--data-dir={self.directory / 'etcd'}",
            f"--listen-client-urls={self._etcd_url}",
            f"--advertise-client-urls={self._etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-cluster=default=http://127.0.0.1:{peer_port}",
            "--log-level=warn",
            "--logger=zap",
        ]

    def _apiserver_argv(self) -> list[str]:
        disabled = [] if self.controller_manager else ["--disable-admission-plugins=ServiceAccount"]
        plugins = ",".join(self.admission_plugins)
        enabled = [f"--enable-admission-plugins={plugins}"] if plugins else []
        return [
            f"--etcd-servers={self._etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self._apiserver_port}",
            f"--tls-cert-file={self._pki.serving_cert_file}",
            f"--tls-private-key-file={self._pki.serving_key_file}",
            f"--token-auth-file={self.directory / 'tokens.csv'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={self._pki.service_account_pub_file}",
            f"--service-account-signing-key-file={self._pki.service_account_key_file}",
            "--authorization-mode=RBAC",
            f"--service-cluster-ip-range={_SERVICE_CIDR}",
            "--allow-privileged=true",
            "--profiling=false",
            # Simulated nodes' kubelet endpoints are on loopback, at their InternalDNS address.
            "--kubelet-preferred-address-types=InternalDNS,InternalIP,Hostname",
            *disabled,
            *enabled,
            *self._audit_argv(),
        ]

    def _audit_argv(self) -> list[str]:
        if not self.audit:
            return []
        policy = self.directory / "audit-policy.yaml"
        policy.write_text(_AUDIT_POLICY)
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",
        ]

    def _controller_manager_argv(self) -> list[str]:
        return [
            f"--kubeconfig={self.kubeconfig}",
            "--controllers=*,-nodelifecycle",
            "--leader-elect=false",
            f"--service-account-private-key-file={self._pki.service_account_key_file}",
            f"--root-ca-file={self._pki.ca_file}",
            "--bind-address=127.0.0.1",
            "--secure-port=0",
        ]

    async def _wait_ready(self) -> None:
        """Wait for /readyz and for the `default` namespace, which the apiserver makes later."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        timeout = aiohttp.ClientTimeout(total=2)
        headers = {"Authorization": f"Bearer {self._admin_token}"}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _READY_TIMEOUT_SECONDS
        async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
            while True:
                self._check_alive()
                if await _answers(session, f"{self.server}/readyz", context) and await _answers(
                    session, f"{self.server}/api/v1/namespaces/default", context
                ):
                    async with session.get(f"{self.server}/version", ssl=context) as response:
                        self.version = str((await response.json())["gitVersion"])
                    return
                if loop.time() > deadline:
                    raise self._error(f"kube-apiserver not ready after {_READY_TIMEOUT_SECONDS}s")
                await asyncio.sleep(_POLL_SECONDS)

    async def _wait_default_service_account(self) -> None:
        """Pods need the `default` ServiceAccount and its token (ServiceAccount admission)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _READY_TIMEOUT_SECONDS
        async with await new_api_client(self.kubeconfig) as api:
            core = client.CoreV1Api(api)
            while True:
                self._check_alive()
                with contextlib.suppress(ApiException):
                    await core.read_namespaced_service_account("default", "default")
                    return
                if loop.time() > deadline:
                    raise self._error("kube-controller-manager made no default ServiceAccount")
                await asyncio.sleep(_POLL_SECONDS)

    def _check_alive(self) -> None:
        for process in self.processes:
            if process.exit_code is not None:
                raise self._error(f"{process.name} exited with status {process.exit_code}")

    def _error(self, message: str) -> ControlPlaneError:
        logs = "\n".join(
            f"--- {process.name} log (last lines) ---\n{process.log_tail()}"
            for process in self.processes
        )
        return ControlPlaneError(f"{message}\n{logs}")


async def _answers(session: aiohttp.ClientSession, url: str, context: ssl.SSLContext) -> bool:
    with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
        async with session.get(url, ssl=context) as response:
            return response.status == 200
    return False


def _check_binaries(assets_dir: Path) -> dict[str, Path]:
    binaries = {name: assets_dir / name for name in _BINARIES}
    missing = [name for name, path in binaries.items() if not os.access(path, os.X_OK)]
    if missing:
        raise ControlPlaneError(
            f"control plane binaries missing in {assets_dir}: {', '.join(missing)}; "
            f"run `python -m gpuctrl.testing.envtest` (or `make envtest`) to build them, "
            f"or point ${ASSETS_ENV} at a folder holding them"
        )
    return binaries


def _free_ports(count: int) -> list[int]:
    """Ports free on loopback right now (all held open together, so they are distinct)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


def _remove_abandoned_folders() -> None:
    """Remove folders left by control planes whose Python process was SIGKILLed."""
    for folder in _temp_root().glob(f"{_FOLDER_PREFIX}*-*"):
        pid = folder.name.removeprefix(_FOLDER_PREFIX).split("-", 1)[0]
        if pid.isdigit() and not _pid_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _temp_root() -> Path:
    """$TMPDIR when set, else /dev/shm when writable (etcd fsyncs are free there), else /tmp."""
    shm = Path("/dev/shm")
    if "TMPDIR" not in os.environ and shm.is_dir() and os.access(shm, os.W_OK):
        return shm
    return Path(tempfile.gettempdir())


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
