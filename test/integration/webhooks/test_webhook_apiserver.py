"""`gpuctrl webhook` behind the real apiserver, ahead of an Istio-like injector."""

from __future__ import annotations

import asyncio
import base64
import datetime
import os
import socket
import ssl
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from endpoints_proxy import EndpointsProxy
from kubernetes_asyncio.client import ApiClient

from gpuctrl.cli import main
from gpuctrl.runtime import ApiError, Client, Resource
from gpuctrl.runtime.webhook import WebhookServer
from gpuctrl.testing import (
    ControlPlane,
    FakeClock,
    MeshInjector,
    SimulatedKubelet,
    eventually,
    write_secret_volume,
)
from webhooks._certmanager import SECRET_NAME, CertificateManager
from webhooks._configuration import (
    CONFIGURATION_NAME,
    MUTATING_WEBHOOK_CONFIGURATIONS,
    published_bundle,
    read_configuration,
)
from webhooks._handler import MUTATE_PATH, POD_POLICIES, PodPolicyHandler, PolicySet
from webhooks._pki import BUNDLE_KEY, CERT_KEY, KEY_KEY, Lifetimes, next_secret_data

MakePolicy = Callable[..., Awaitable[dict[str, Any]]]

pytestmark = pytest.mark.slow

PODS = Resource("v1", "Pod", "pods")
SECRETS = Resource("v1", "Secret", "secrets")
OPT_OUT = "sidecar.istio.io/inject"
SAMPLE = Path(__file__).parents[3] / "config" / "samples" / "podpolicy-istio.yaml"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def workload_pod(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "cuda-validation-",
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/managed-by": "gpuctrl",
                "app.kubernetes.io/component": "validator-workloads",
            },
        },
        "spec": {"restartPolicy": "Never", "containers": [{"name": "cuda", "image": "cuda"}]},
    }


async def start_webhook(
    control_plane: ControlPlane, namespace: str, port: int, *flags: str
) -> asyncio.subprocess.Process:
    """``gpuctrl webhook`` for ``namespace`` on ``port``, once it accepts TLS connections
    (``flags`` come last: a repeated flag overrides the defaults here)."""
    process = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("gpuctrl")), "webhook",
        "--kubeconfig", str(control_plane.kubeconfig),
        "--namespace", namespace,
        "--bind-address", f"127.0.0.1:{port}",
        "--webhook-url", f"https://127.0.0.1:{port}/mutate-v1-pod",
        "--health-probe-bind-address", f"127.0.0.1:{free_port()}",
        "--metrics-bind-address", f"127.0.0.1:{free_port()}",
        "--shutdown-delay", "0",  # no Service endpoints to wait for here
        *flags,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip

    async def serving() -> bool:
        return await served_certificate(port) is not None

    try:
        await eventually(serving, within=60)
    except BaseException:
        process.terminate()
        await process.wait()
        raise
    return process


async def served_certificate(port: int) -> bytes | None:
    """The DER certificate a new TLS connection to ``port`` is handed, None if none answers."""
    try:
        _, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=ssl._create_unverified_context()
        )
    except OSError:
        return None
    der: bytes = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    await writer.wait_closed()
    return der


@pytest_asyncio.fixture
async def webhook_process(
    control_plane: ControlPlane, namespace: str, tmp_path: Path, pod_policy: MakePolicy
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``gpuctrl webhook --manage-certificates --webhook-url ...`` for ``namespace``."""
    process = await start_webhook(
        control_plane, namespace, free_port(), "--manage-certificates",
        "--cert-dir", str(tmp_path / "certs"),
    )  # fmt: skip
    yield process
    process.terminate()
    await process.wait()


async def create_pod(kube_api: ApiClient, namespace: str) -> dict[str, Any]:
    created: dict[str, Any] = await Client(kube_api).create(PODS, workload_pod(namespace))
    return created


@pytest.mark.usefixtures("webhook_process")
async def test_the_policy_opts_the_workload_pod_out_of_the_mesh_before_istio_is_called(
    kube_api: ApiClient, namespace: str, pod_policy: MakePolicy
) -> None:
    async with MeshInjector(kube_api) as mesh:
        await mesh.enable(namespace)
        without = await create_pod(kube_api, namespace)
        assert MeshInjector.SIDECAR in {c["name"] for c in without["spec"]["containers"]}
        assert OPT_OUT not in without["metadata"]["labels"]
        await pod_policy(meshes=["istio"])

        async def opted_out() -> bool:
            pod = await create_pod(kube_api, namespace)
            containers = {c["name"] for c in pod["spec"]["containers"]}
            return pod["metadata"]["labels"].get(OPT_OUT) == "false" and containers == {"cuda"}

        await eventually(opted_out, within=30)
        injected = len(mesh.injected)
        pod = await create_pod(kube_api, namespace)
        assert pod["spec"].get("initContainers") is None, "Istio's webhook was never called"
        assert len(mesh.injected) == injected


@pytest.mark.usefixtures("webhook_process")
async def test_dry_run_and_pods_of_other_namespaces(
    kube_api: ApiClient, namespace: str, pod_policy: MakePolicy
) -> None:
    await pod_policy(meshes=["istio"], labels={"team": "gpu"})
    client = Client(kube_api)

    async def labelled() -> bool:
        pod = await client.request(
            "POST", PODS.path(namespace), query={"dryRun": "All"}, body=workload_pod(namespace)
        )
        return bool(pod["metadata"]["labels"].get("team") == "gpu")

    await eventually(labelled, within=30)
    assert await client.list(PODS, namespace) == [], "a dry run creates nothing"
    own = workload_pod(namespace)
    own["metadata"]["labels"]["team"] = "ml"
    pod = await client.request("POST", PODS.path(namespace), query={"dryRun": "All"}, body=own)
    assert pod["metadata"]["labels"]["team"] == "ml", "a label the pod came with is kept"
    assert pod["metadata"]["labels"]["sidecar.istio.io/inject"] == "false"
    other = "default"
    pod = await client.request(
        "POST", PODS.path(other), query={"dryRun": "All"}, body=workload_pod(other)
    )
    assert "team" not in pod["metadata"]["labels"], "only the operands' namespace is changed"


@pytest.mark.usefixtures("crds")
async def test_an_outage_blocks_only_the_operands_namespace(
    control_plane: ControlPlane, kube_api: ApiClient, namespace: str, tmp_path: Path
) -> None:
    """With the webhook down, a pod labelled managed-by gpuctrl elsewhere is admitted (the
    configuration selects the operands' namespace by its name label), and so is an operand's
    pod in the operands' namespace (failurePolicy Ignore); only the validator's workload pods,
    which a mesh sidecar would hang, are refused (Fail)."""
    process = await start_webhook(
        control_plane, namespace, free_port(), "--manage-certificates",
        "--cert-dir", str(tmp_path / "certs"),
    )  # fmt: skip
    client = Client(kube_api)

    async def configured() -> bool:
        return published_bundle(await read_configuration(client)) is not None

    await eventually(configured, within=30)
    process.terminate()
    await process.wait()
    dry_run = {"dryRun": "All"}
    try:
        other = await client.request(
            "POST", PODS.path("default"), query=dry_run, body=workload_pod("default")
        )
        assert other["metadata"]["namespace"] == "default"
        for component in ("driver", "toolkit", "validator", "device-plugin"):
            operand = workload_pod(namespace)
            operand["metadata"]["labels"]["app.kubernetes.io/component"] = component
            admitted = await client.request(
                "POST", PODS.path(namespace), query=dry_run, body=operand
            )
            assert admitted["metadata"]["namespace"] == namespace
        with pytest.raises(ApiError, match="failed calling webhook"):
            await client.request(
                "POST", PODS.path(namespace), query=dry_run, body=workload_pod(namespace)
            )
    finally:
        await client.delete(MUTATING_WEBHOOK_CONFIGURATIONS, CONFIGURATION_NAME)


async def test_certificates_rotate_while_the_apiserver_keeps_calling(
    kube_api: ApiClient, namespace: str, pod_policy: MakePolicy, tmp_path: Path
) -> None:
    """A fake clock ages the certificates: serving renewed at 20 min, the CA at 40 min, the old
    CA dropped at 60 min (all within the hour certificates are backdated by, so the real
    apiserver accepts every one of them)."""
    await pod_policy(labels={"rotation": "seen"})
    client = Client(kube_api)
    port = free_port()
    clock = FakeClock()
    server = WebhookServer(tmp_path, host="127.0.0.1", port=port, clock=clock, shutdown_delay=0)
    policies = PolicySet()
    for obj in await client.list(POD_POLICIES):
        policies.on_add(obj)
    server.register(MUTATE_PATH, PodPolicyHandler(policies, namespace))
    certificates = CertificateManager(
        client,
        namespace,
        tmp_path,
        ["127.0.0.1"],
        client_config={"url": f"https://127.0.0.1:{port}{MUTATE_PATH}"},
        on_files=server.certs.reload,
        lifetimes=Lifetimes(
            ca=datetime.timedelta(minutes=60), serving=datetime.timedelta(minutes=30)
        ),
        clock=clock,
    )
    stop = asyncio.Event()
    tasks = [asyncio.create_task(server.start(stop)), asyncio.create_task(certificates.start(stop))]
    try:
        await server.wait_listening()

        async def admitted() -> bool:
            pod = await client.request(
                "POST", PODS.path(namespace), query={"dryRun": "All"}, body=workload_pod(namespace)
            )
            return bool(pod["metadata"]["labels"].get("rotation") == "seen")

        await eventually(admitted, within=30)
        seen_cas, seen_certs = set(), set()
        for _ in range(int(70 * 60 / 30)):  # 70 minutes in 30-second passes
            await clock.step(30)
            await certificates.sync()
            assert await admitted(), f"refused at {clock.now() / 60:.1f} min"
            secret = await client.get(SECRETS, SECRET_NAME, namespace)
            seen_cas.add(secret["data"]["ca.crt"])
            seen_certs.add(server.certs.certificate)
        configuration = await read_configuration(client)
        assert published_bundle(configuration) is not None
        assert len(seen_cas) >= 2, "the CA rotated"
        assert len(seen_certs) >= 3, "the serving certificate was renewed and moved to the new CA"
        bundle = await client.get(SECRETS, SECRET_NAME, namespace)
        assert bundle["data"][BUNDLE_KEY]
    finally:
        stop.set()
        await asyncio.gather(*tasks)
        clock.close()


async def test_certificate_files_replaced_under_cert_dir_reach_new_connections(
    control_plane: ControlPlane,
    kube_api: ApiClient,
    namespace: str,
    pod_policy: MakePolicy,
    tmp_path: Path,
) -> None:
    """A Secret volume (as cert-manager fills it: ca.crt, tls.crt, tls.key) renewed under the
    same CA: new connections get the new certificate, the apiserver keeps calling."""
    await pod_policy(labels={"files": "seen"})
    lifetimes = Lifetimes(serving=datetime.timedelta(minutes=60))
    start = datetime.datetime.now(datetime.UTC)
    first = settle({}, start, lifetimes)
    renewed = settle(first, start + datetime.timedelta(minutes=41), lifetimes)
    assert renewed[CERT_KEY] != first[CERT_KEY]
    volume = tmp_path / "volume"
    write_secret_volume(volume, {k: first[k] for k in ("ca.crt", CERT_KEY, KEY_KEY)})
    port = free_port()
    process = await start_webhook(control_plane, namespace, port, "--cert-dir", str(volume))
    client = Client(kube_api)

    async def admitted() -> bool:
        pod = await client.request(
            "POST", PODS.path(namespace), query={"dryRun": "All"}, body=workload_pod(namespace)
        )
        return bool(pod["metadata"]["labels"].get("files") == "seen")

    try:
        await eventually(admitted, within=30)
        assert await served_certificate(port) == der(first[CERT_KEY])
        write_secret_volume(volume, {k: renewed[k] for k in ("ca.crt", CERT_KEY, KEY_KEY)})

        async def new_certificate() -> bool:
            return await served_certificate(port) == der(renewed[CERT_KEY])

        await eventually(new_certificate, within=10)
        assert await admitted()
    finally:
        process.terminate()
        await process.wait()


def settle(
    data: dict[str, bytes], now: datetime.datetime, lifetimes: Lifetimes
) -> dict[str, bytes]:
    while (
        following := next_secret_data(
            data, now, ["127.0.0.1"], data.get(BUNDLE_KEY, b""), lifetimes
        )
    ) is not None:
        data = following
    return data


def der(pem: bytes) -> bytes:
    return x509.load_pem_x509_certificate(pem).public_bytes(serialization.Encoding.DER)


async def test_replicas_share_the_secret_without_fighting(
    kube_api: ApiClient, namespace: str, pod_policy: MakePolicy, tmp_path: Path
) -> None:
    """Three replicas start at once and then age together past a CA rotation: every pass ends
    with all of them serving the Secret's one serving certificate."""
    client = Client(kube_api)
    clock = FakeClock()
    lifetimes = Lifetimes(ca=datetime.timedelta(minutes=60), serving=datetime.timedelta(minutes=30))
    replicas = [
        CertificateManager(
            client,
            namespace,
            tmp_path / f"replica-{i}",
            ["127.0.0.1"],
            client_config={"url": "https://127.0.0.1:1/mutate-v1-pod"},
            lifetimes=lifetimes,
            clock=clock,
        )
        for i in range(3)
    ]
    cas = set()
    for _ in range(6):
        await asyncio.gather(*(replica.sync() for replica in replicas))
        await asyncio.gather(*(replica.sync() for replica in replicas))  # losers adopt
        secret = await client.get(SECRETS, SECRET_NAME, namespace)
        cas.add(secret["data"]["ca.crt"])
        serving = base64.b64decode(secret["data"][CERT_KEY])
        for i in range(3):
            assert (tmp_path / f"replica-{i}" / "tls.crt").read_bytes() == serving
        configuration = await read_configuration(client)
        assert published_bundle(configuration) == base64.b64decode(secret["data"][BUNDLE_KEY])
        await clock.step(10 * 60)
    assert len(cas) == 2, "one CA rotation in 50 minutes"
    clock.close()


@pytest.mark.gpu_nodes(count=1)
@pytest.mark.usefixtures("webhook_process")
async def test_gpuctrl_validate_cuda_passes_in_a_meshed_namespace_with_the_istio_policy(
    control_plane: ControlPlane,
    kube_api: ApiClient,
    namespace: str,
    gpu_nodes: SimulatedKubelet,
    workload_templates: str,
    pod_policy: MakePolicy,
    tmp_path: Path,
) -> None:
    """Istio injects every pod of the namespace; the PodPolicy of config/samples/ keeps its
    never-exiting sidecar out of the validator's workload pod, so the check completes."""
    sample = yaml.safe_load(SAMPLE.read_text())
    await pod_policy(**sample["spec"])
    async with MeshInjector(kube_api) as mesh:
        await mesh.enable(namespace)

        async def policy_applied() -> bool:
            pod = await create_pod(kube_api, namespace)
            await Client(kube_api).delete(PODS, pod["metadata"]["name"], namespace)
            return pod["metadata"]["labels"].get(OPT_OUT) == "false"

        await eventually(policy_applied, within=30)
        injected = len(mesh.injected)
        argv = [
            "validate", "cuda", "--node", gpu_nodes.nodes[0].name, "--namespace", namespace,
            "--kubeconfig", str(control_plane.kubeconfig), "--output-dir", str(tmp_path),
            "--timeout", "60",
        ]  # fmt: skip
        assert await asyncio.to_thread(main, argv) == 0
        assert len(mesh.injected) == injected, "Istio's injector never saw the workload pod"


async def test_readiness_and_metrics_on_their_own_ports(
    control_plane: ControlPlane,
    kube_api: ApiClient,
    namespace: str,
    pod_policy: MakePolicy,
    tmp_path: Path,
) -> None:
    policy = await pod_policy(meshes=["istio"])
    health, metrics = free_port(), free_port()
    process = await start_webhook(
        control_plane, namespace, free_port(), "--manage-certificates",
        "--cert-dir", str(tmp_path),
        "--health-probe-bind-address", f"127.0.0.1:{health}",
        "--metrics-bind-address", f"127.0.0.1:{metrics}",
    )  # fmt: skip
    try:
        async with aiohttp.ClientSession() as session:

            async def ready() -> bool:
                async with session.get(f"http://127.0.0.1:{health}/readyz") as response:
                    return response.status == 200

            await eventually(ready, within=30)

            async def counted() -> None:
                await create_pod(kube_api, namespace)
                async with session.get(f"http://127.0.0.1:{metrics}/metrics") as response:
                    text = await response.text()
                name = policy["metadata"]["name"]
                assert f'gpuctrl_pod_policy_mutations_total{{policy="{name}"}}' in text
                assert (
                    'controller_runtime_webhook_requests_total{code="200",webhook="/mutate-v1-pod"}'
                    in text
                )

            await eventually(counted, within=30)
    finally:
        process.terminate()
        await process.wait()


async def test_a_busy_address_exits_2_with_one_line(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        process = await asyncio.create_subprocess_exec(
            str(Path(sys.executable).with_name("gpuctrl")), "webhook",
            "--kubeconfig", str(control_plane.kubeconfig), "--namespace", namespace,
            "--cert-dir", str(tmp_path), "--manage-certificates",
            "--bind-address", f"127.0.0.1:{free_port()}",
            "--health-probe-bind-address", f"127.0.0.1:{free_port()}",
            "--metrics-bind-address", f"127.0.0.1:{port}",
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        async with asyncio.timeout(60):
            _, stderr = await process.communicate()
    assert process.returncode == 2
    lines = stderr.decode().strip().splitlines()
    assert (
        lines[-1] == f"gpuctrl webhook: cannot listen on 127.0.0.1:{port}: Address already in use"
    )
    assert "Traceback" not in stderr.decode()


@pytest.mark.usefixtures("crds")
async def test_a_rolling_restart_of_the_webhook_refuses_no_admission(
    control_plane: ControlPlane, kube_api: ApiClient, namespace: str, tmp_path: Path
) -> None:
    """Issue 22: two replicas behind a Service whose endpoints follow their readiness; each is
    replaced in turn (the new one ready first, then SIGTERM to the old) while workload pods
    are created without pause (failurePolicy Fail): not one admission fails."""
    client = Client(kube_api)
    async with EndpointsProxy() as service:
        url = f"https://127.0.0.1:{service.port}/mutate-v1-pod"

        async def replica() -> tuple[asyncio.subprocess.Process, tuple[int, int]]:
            serving, probe = free_port(), free_port()
            process = await start_webhook(
                control_plane, namespace, serving, "--webhook-url", url,
                "--manage-certificates", "--cert-dir", str(tmp_path / f"certs-{serving}"),
                "--health-probe-bind-address", f"127.0.0.1:{probe}",
                "--shutdown-delay", "2",  # beyond the endpoints' 0.3 s polls
            )  # fmt: skip
            service.backends.append((serving, probe))
            await eventually(lambda: serving in service.ready, within=30)
            return process, (serving, probe)

        replicas = [await replica(), await replica()]
        await eventually(lambda: configured_for(client, url), within=30)
        outcomes: list[str] = []
        rolling = True

        async def create_pods() -> None:
            while rolling:
                try:
                    await client.request(
                        "POST", PODS.path(namespace), query={"dryRun": "All"},
                        body=workload_pod(namespace),
                    )  # fmt: skip
                    outcomes.append("admitted")
                except ApiError as error:
                    outcomes.append(f"refused: {error}")

        creating = asyncio.create_task(create_pods())
        try:
            for _ in range(2):
                old, backend = replicas.pop(0)
                replicas.append(await replica())
                old.terminate()
                await old.wait()
                service.backends.remove(backend)
            await asyncio.sleep(1)
        finally:
            rolling = False
            await creating
            for process, _ in replicas:
                process.terminate()
                await process.wait()
            await client.delete(MUTATING_WEBHOOK_CONFIGURATIONS, CONFIGURATION_NAME)
    assert outcomes.count("admitted") > 20
    assert [o for o in outcomes if o != "admitted"] == []


async def configured_for(client: Client, url: str) -> bool:
    configuration = await read_configuration(client)
    return (
        configuration is not None
        and all(w["clientConfig"].get("url") == url for w in configuration["webhooks"])
        and published_bundle(configuration) not in (None, b"")
    )
