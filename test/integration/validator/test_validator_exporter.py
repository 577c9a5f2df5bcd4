"""``gpuctrl validate metrics`` as a real process: scraped over HTTP, reading a real Node from
the local apiserver as a ServiceAccount allowed only ``get nodes``, a real sysfs-shaped host
root, a real driver check (chroot into a minimal root), stopped with SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio
from driver_root_kit import install_smi, minimal_root
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient
from prometheus_client.parser import text_string_to_metric_families

from gpuctrl.testing import ControlPlane, eventually
from gpuctrl.validator import status_path, write_status

NVIDIA_VENDOR, INTEL_VENDOR = "0x10de", "0x8086"
DEVICES = "gpu_operator_node_device_plugin_devices_total"
DEVICES_SINCE = "gpu_operator_node_device_plugin_validation_last_success_ts_seconds"
DRIVER = "gpu_operator_node_driver_validation"
DRIVER_SINCE = "gpu_operator_node_driver_validation_last_success_ts_seconds"
PCI = "gpu_operator_nvidia_pci_devices_total"
GOOD_SMI = "#!/bin/sh\necho run >> /runs\necho 'GPU 0: NVIDIA H200 (UUID: GPU-1234)'\n"
BROKEN_SMI = "#!/bin/sh\necho run >> /runs\necho 'NVIDIA-SMI has failed'\nexit 9\n"


class Exporter:
    """A running ``gpuctrl validate metrics`` process and its scrapes."""

    def __init__(self, process: asyncio.subprocess.Process, port: int, node: str, log: Path):
        self.process = process
        self.port = port
        self.node = node
        self.log = log

    async def scrape(self) -> dict[str, float]:
        """GET /metrics: each sample's value by metric name (all labelled with the node)."""
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{self.port}/metrics") as response,
        ):
            assert response.status == 200
            assert response.content_type == "text/plain"
            text = await response.text()
        samples = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.startswith("gpu_operator_"):
                    assert sample.labels == {"node": self.node}, sample
                    samples[sample.name] = sample.value
        return samples

    async def stop(self) -> int:
        """SIGTERM; the exit code."""
        self.process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            return await self.process.wait()


StartExporter = Callable[..., Awaitable[Exporter]]


@pytest_asyncio.fixture(loop_scope="session")
async def start_exporter(tmp_path: Path) -> AsyncIterator[StartExporter]:
    """Starts ``python -m gpuctrl validate metrics`` on a free port with the given options and
    waits until it answers; kills what is still running afterwards."""
    started: list[Exporter] = []

    async def start(node: str, *options: str) -> Exporter:
        port = _free_port()
        log = tmp_path / f"exporter-{len(started)}.log"
        with log.open("wb") as output:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "gpuctrl", "validate", "metrics", "--port", str(port),
                "--node", node, *options, stdout=output, stderr=subprocess.STDOUT,
            )  # fmt: skip
        exporter = Exporter(process, port, node, log)
        started.append(exporter)

        async def answers() -> None:
            assert process.returncode is None, log.read_text()
            try:
                await exporter.scrape()
            except aiohttp.ClientConnectionError as error:
                raise AssertionError(f"not serving yet: {error}") from None

        await eventually(answers, within=30)
        return exporter

    yield start
    for exporter in started:
        if exporter.process.returncode is None:
            exporter.process.kill()
            await exporter.process.wait()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", 0))
        return int(probe.getsockname()[1])


def _pci_host(root: Path, vendors: dict[str, str]) -> Path:
    """A host root whose sysfs lists one PCI device per address, linked as the kernel does."""
    bus = root / "sys" / "bus" / "pci" / "devices"
    bus.mkdir(parents=True)
    for address, vendor in vendors.items():
        device = root / "sys" / "devices" / "pci0000:00" / address
        device.mkdir(parents=True)
        (device / "vendor").write_text(f"{vendor}\n")
        (bus / address).symlink_to(Path("../../../devices/pci0000:00") / address)
    return root


@pytest_asyncio.fixture(loop_scope="session")
async def node_reader(
    control_plane: ControlPlane, kube_api: ApiClient, namespace: str
) -> AsyncIterator[Path]:
    """A kubeconfig of a ServiceAccount that may only ``get`` Nodes, as the exporter's."""
    rbac = client.RbacAuthorizationV1Api(kube_api)
    name = f"{namespace}-node-reader"
    await rbac.create_cluster_role(
        {"metadata": {"name": name},
         "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]}
    )  # fmt: skip
    await rbac.create_cluster_role_binding(
        {"metadata": {"name": name},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": "exporter", "namespace": namespace}]}
    )  # fmt: skip
    yield await control_plane.service_account_kubeconfig(namespace, "exporter")
    await rbac.delete_cluster_role_binding(name)
    await rbac.delete_cluster_role(name)


def _gpu_node(name: str, gpus: str) -> dict[str, object]:
    resources = {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": gpus}
    return {
        "metadata": {"name": name},
        "status": {"capacity": resources, "allocatable": resources},
    }


async def test_exporter_serves_status_files_node_gpus_and_pci_devices_until_sigterm(
    start_exporter: StartExporter,
    kube_api: ApiClient,
    namespace: str,
    node_reader: Path,
    tmp_path: Path,
) -> None:
    core = client.CoreV1Api(kube_api)
    node = f"{namespace}-gpu"
    await core.create_node(_gpu_node(node, "4"))
    host = _pci_host(
        tmp_path / "host",
        {
            "0000:17:00.0": NVIDIA_VENDOR,
            "0000:65:00.0": NVIDIA_VENDOR,
            "0000:00:00.0": INTEL_VENDOR,
        },
    )
    validations = tmp_path / "validations"
    try:
        exporter = await start_exporter(
            node, "--kubeconfig", str(node_reader), "--output-dir", str(validations),
            "--host-root", str(host), "--driver-root", str(tmp_path / "no-driver"),
            "--interval", "0.5",
        )  # fmt: skip

        async def counted() -> dict[str, float]:
            samples = await exporter.scrape()
            assert samples[DEVICES] == 4, samples
            assert samples[PCI] == 2, samples
            return samples

        samples = await eventually(counted, within=30)
        assert samples[DEVICES_SINCE] > 0
        assert samples["gpu_operator_node_metrics_ready_ts_seconds"] > 0
        assert samples["gpu_operator_node_toolkit_ready"] == 0
        assert samples[DRIVER] == 0, "no nvidia-smi in the host root"

        # Status files are read at scrape time: the very next scrape sees each change.
        write_status(validations, "toolkit", "passed\n")
        assert (await exporter.scrape())["gpu_operator_node_toolkit_ready"] == 1
        status_path(validations, "toolkit").unlink()
        assert (await exporter.scrape())["gpu_operator_node_toolkit_ready"] == 0

        await core.patch_node_status(node, {"status": {"capacity": {"nvidia.com/gpu": "2"}}})
        await eventually(lambda: _has(exporter, DEVICES, 2), within=30)

        await core.delete_node(node)
        last = await eventually(lambda: _has(exporter, DEVICES, -1), within=30)
        assert last[DEVICES_SINCE] > 0, "the last success is kept"

        assert await exporter.stop() == 0, exporter.log.read_text()
    finally:
        with contextlib.suppress(client.ApiException):
            await core.delete_node(node)


async def _has(exporter: Exporter, name: str, value: float) -> dict[str, float]:
    samples = await exporter.scrape()
    assert samples[name] == value, samples
    return samples


def _runs(driver_root: Path) -> int:
    runs = driver_root / "runs"
    return len(runs.read_text().splitlines()) if runs.exists() else 0


needs_root = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0, reason="chroot needs root"
)


async def _driver_exporter(
    start: StartExporter, control_plane: ControlPlane, driver: Path, interval: str
) -> Exporter:
    """An exporter whose driver root (``driver``, a chroot with a good nvidia-smi) is checked
    every ``interval`` seconds; its Node does not exist and its host root has no sysfs."""
    minimal_root(driver, GOOD_SMI)
    return await start(
        "absent-node", "--kubeconfig", str(control_plane.kubeconfig),
        "--output-dir", str(driver.parent / "validations"),
        "--host-root", str(driver.parent / "host"),
        "--driver-root", str(driver), "--interval", interval,
    )  # fmt: skip


@needs_root
async def test_driver_check_runs_every_interval_not_at_each_scrape(
    start_exporter: StartExporter, control_plane: ControlPlane, tmp_path: Path
) -> None:
    driver = tmp_path / "driver"
    exporter = await _driver_exporter(start_exporter, control_plane, driver, "3600")

    samples = await eventually(lambda: _has(exporter, DRIVER, 1), within=30)
    assert samples[DRIVER_SINCE] > 0
    for _ in range(10):
        assert (await exporter.scrape())[DRIVER] == 1
    assert _runs(driver) == 1, "one run at start, none per scrape"
    # A Node that does not exist cannot be read; a host root without sysfs has no PCI list.
    assert samples[DEVICES] == -1
    assert samples[PCI] == -1
    assert await exporter.stop() == 0, exporter.log.read_text()


@needs_root
async def test_driver_gauge_follows_the_check_and_keeps_its_last_success(
    start_exporter: StartExporter, control_plane: ControlPlane, tmp_path: Path
) -> None:
    driver = tmp_path / "driver"
    exporter = await _driver_exporter(start_exporter, control_plane, driver, "0.5")
    passed = await eventually(lambda: _has(exporter, DRIVER, 1), within=30)

    install_smi(driver / "usr" / "bin", BROKEN_SMI)
    failed = await eventually(lambda: _has(exporter, DRIVER, 0), within=30)
    # Passes may have run between the scrape above and the broken nvidia-smi's arrival.
    assert failed[DRIVER_SINCE] >= passed[DRIVER_SINCE] > 0

    await asyncio.sleep(1.1)
    kept = await exporter.scrape()
    assert kept[DRIVER] == 0
    assert kept[DRIVER_SINCE] == failed[DRIVER_SINCE], "a failure leaves the last success"

    install_smi(driver / "usr" / "bin", GOOD_SMI)
    again = await eventually(lambda: _has(exporter, DRIVER, 1), within=30)
    assert again[DRIVER_SINCE] > failed[DRIVER_SINCE]
    assert await exporter.stop() == 0, exporter.log.read_text()
    log = exporter.log.read_text()
    assert "driver check failed" in log
    assert "Traceback" not in log
