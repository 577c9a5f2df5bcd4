"""The node status metrics' pure parts: the PCI and GPU counts, the gauges a scrape sees; and
``gpuctrl validate metrics``' input errors (exit 2, one line, no traceback)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from gpuctrl.cli import main
from gpuctrl.validator import (
    NodeProbes,
    NodeStatusCollector,
    count_gpu_resources,
    count_nvidia_pci_devices,
    write_status,
)

NVIDIA, INTEL, MELLANOX = "0x10de", "0x8086", "0x15b3"


def _pci_host(root: Path, vendors: dict[str, str | None]) -> Path:
    """A host root whose sysfs holds one device per address, as the kernel lays it out: the
    device in sys/devices/pci0000:00/, a relative link to it in sys/bus/pci/devices/, a
    ``vendor`` file holding the ID and a newline (None: no vendor file)."""
    bus = root / "sys" / "bus" / "pci" / "devices"
    bus.mkdir(parents=True)
    for address, vendor in vendors.items():
        device = root / "sys" / "devices" / "pci0000:00" / address
        device.mkdir(parents=True)
        if vendor is not None:
            (device / "vendor").write_text(f"{vendor}\n")
        (bus / address).symlink_to(Path("../../../devices/pci0000:00") / address)
    return root


@pytest.mark.parametrize(
    ("vendors", "expected"),
    [
        pytest.param({}, 0, id="no-devices"),
        pytest.param({"0000:17:00.0": NVIDIA}, 1, id="one-gpu"),
        pytest.param(
            {"0000:17:00.0": NVIDIA, "0000:17:00.1": NVIDIA, "0000:65:00.0": NVIDIA},
            3,
            id="gpus-and-their-audio-functions",
        ),
        pytest.param(
            {"0000:00:00.0": INTEL, "0000:3b:00.0": MELLANOX, "0000:17:00.0": NVIDIA},
            1,
            id="other-vendors-not-counted",
        ),
        pytest.param({"0000:17:00.0": "0x10DE"}, 1, id="upper-case"),
        pytest.param({"0000:17:00.0": None, "0000:18:00.0": NVIDIA}, 1, id="no-vendor-file"),
    ],
)
def test_pci_count_is_the_devices_of_nvidias_vendor_id(
    tmp_path: Path, vendors: dict[str, str | None], expected: int
) -> None:
    assert count_nvidia_pci_devices(_pci_host(tmp_path / "host", vendors)) == expected


def test_pci_count_follows_sysfs_links_and_counts_a_plain_folder_too(tmp_path: Path) -> None:
    host = _pci_host(tmp_path / "host", {"0000:17:00.0": NVIDIA})
    assert (host / "sys/bus/pci/devices/0000:17:00.0").is_symlink()
    plain = host / "sys/bus/pci/devices/0000:18:00.0"
    plain.mkdir()
    (plain / "vendor").write_text(f"{NVIDIA}\n")

    assert count_nvidia_pci_devices(host) == 2


def test_pci_count_skips_a_dangling_link(tmp_path: Path) -> None:
    """A device unplugged between the listing and the read is skipped, not an error."""
    host = _pci_host(tmp_path / "host", {"0000:17:00.0": NVIDIA})
    (host / "sys/bus/pci/devices/0000:18:00.0").symlink_to("../../../devices/gone")

    assert count_nvidia_pci_devices(host) == 1


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda host: None, id="no-sysfs"),
        pytest.param(
            lambda host: (host / "sys/bus/pci").mkdir(parents=True), id="no-devices-folder"
        ),
        pytest.param(
            lambda host: (
                (host / "sys/bus/pci").mkdir(parents=True),
                (host / "sys/bus/pci/devices").write_text("not a folder"),
            ),
            id="devices-is-a-file",
        ),
    ],
)
def test_pci_count_is_minus_one_when_the_folder_cannot_be_read(tmp_path: Path, make: Any) -> None:
    host = tmp_path / "host"
    host.mkdir()
    make(host)

    assert count_nvidia_pci_devices(host) == -1


def _node(capacity: dict[str, str] | None, allocatable: dict[str, str] | None = None) -> Any:
    status: dict[str, Any] = {}
    if capacity is not None:
        status["capacity"] = {"cpu": "8", "memory": "32Gi", "pods": "110", **capacity}
    if allocatable is not None:
        status["allocatable"] = allocatable
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "status": status}


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        pytest.param(_node({"nvidia.com/gpu": "4"}, {"nvidia.com/gpu": "4"}), 4, id="gpus"),
        pytest.param(
            _node({"nvidia.com/mig-1g.5gb": "7", "nvidia.com/mig-2g.10gb": "2"}),
            9,
            id="mig-mixed-strategy",
        ),
        pytest.param(
            _node({"nvidia.com/gpu": "1", "nvidia.com/mig-1g.5gb": "3"}),
            4,
            id="gpus-and-mig-devices",
        ),
        pytest.param(_node({"nvidia.com/gpu.shared": "8"}), 8, id="renamed-shared-resource"),
        pytest.param(
            _node({"amd.com/gpu": "2", "nvidia.com/gds": "1", "nvidia.com/migrated": "5"}),
            0,
            id="other-resources-not-counted",
        ),
        # NVIDIA counts capacity: a device the plugin reports unhealthy leaves allocatable only.
        pytest.param(
            _node({"nvidia.com/gpu": "4"}, {"nvidia.com/gpu": "3"}), 4, id="capacity-counted"
        ),
        pytest.param(_node({"nvidia.com/gpu": "0"}), 0, id="zero-gpus"),
        pytest.param(_node(None), 0, id="no-capacity"),
        pytest.param({"metadata": {"name": "n1"}}, 0, id="no-status"),
    ],
)
def test_node_gpu_count_as_nvidia_counts_it(node: Any, expected: int) -> None:
    assert count_gpu_resources(node) == expected


def _sample(registry: CollectorRegistry, name: str) -> float | None:
    return registry.get_sample_value(name, {"node": "n1"})


@pytest.fixture
def scraped(tmp_path: Path) -> tuple[CollectorRegistry, NodeProbes]:
    probes = NodeProbes(started=1_700_000_000.0)
    registry = CollectorRegistry()
    registry.register(NodeStatusCollector("n1", tmp_path / "validations", probes))
    return registry, probes


@pytest.mark.parametrize("check", ["driver", "toolkit", "plugin", "cuda"])
def test_status_gauge_follows_its_file_at_each_scrape(
    tmp_path: Path, scraped: tuple[CollectorRegistry, NodeProbes], check: str
) -> None:
    registry, _ = scraped
    gauge = f"gpu_operator_node_{check}_ready"
    assert _sample(registry, gauge) == 0.0, "no folder yet"

    path = write_status(tmp_path / "validations", check, "passed\n")
    assert _sample(registry, gauge) == 1.0
    others = {c for c in ("driver", "toolkit", "plugin", "cuda") if c != check}
    assert all(_sample(registry, f"gpu_operator_node_{c}_ready") == 0.0 for c in others)

    path.unlink()
    assert _sample(registry, gauge) == 0.0


def test_probe_gauges_read_zero_until_a_probe_ran(
    scraped: tuple[CollectorRegistry, NodeProbes],
) -> None:
    registry, _ = scraped
    assert _sample(registry, "gpu_operator_node_metrics_ready_ts_seconds") == 1_700_000_000.0
    for name in (
        "gpu_operator_node_driver_validation",
        "gpu_operator_node_driver_validation_last_success_ts_seconds",
        "gpu_operator_node_device_plugin_devices_total",
        "gpu_operator_node_device_plugin_validation_last_success_ts_seconds",
        "gpu_operator_nvidia_pci_devices_total",
    ):
        assert _sample(registry, name) == 0.0, name


def test_driver_gauges_keep_the_last_success_through_failures(
    scraped: tuple[CollectorRegistry, NodeProbes],
) -> None:
    registry, probes = scraped
    probes.record_driver(True, now=100.0)
    assert _sample(registry, "gpu_operator_node_driver_validation") == 1.0
    assert _sample(registry, "gpu_operator_node_driver_validation_last_success_ts_seconds") == 100

    probes.record_driver(False, now=160.0)
    assert _sample(registry, "gpu_operator_node_driver_validation") == 0.0
    assert _sample(registry, "gpu_operator_node_driver_validation_last_success_ts_seconds") == 100


def test_device_gauges_keep_the_last_non_zero_count_time(
    scraped: tuple[CollectorRegistry, NodeProbes],
) -> None:
    registry, probes = scraped
    last = "gpu_operator_node_device_plugin_validation_last_success_ts_seconds"
    probes.record_devices(4, now=100.0)
    assert _sample(registry, "gpu_operator_node_device_plugin_devices_total") == 4
    assert _sample(registry, last) == 100

    probes.record_devices(0, now=130.0)
    assert _sample(registry, "gpu_operator_node_device_plugin_devices_total") == 0
    probes.record_devices(-1, now=160.0)
    assert _sample(registry, "gpu_operator_node_device_plugin_devices_total") == -1
    assert _sample(registry, last) == 100


def test_collector_uses_only_its_own_registry(
    scraped: tuple[CollectorRegistry, NodeProbes],
) -> None:
    from prometheus_client import REGISTRY

    assert REGISTRY.get_sample_value("gpu_operator_node_driver_ready", {"node": "n1"}) is None


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        pytest.param(["--port", "70000"], "argument --port: '70000' is not a port", id="high"),
        pytest.param(["--port", "0"], "argument --port: '0' is not a port", id="zero"),
        pytest.param(["--port", "http"], "argument --port: 'http' is not a port", id="word"),
        pytest.param(["--interval", "0"], "argument --interval: must be positive", id="interval"),
    ],
)
def test_bad_arguments_are_an_argparse_error(
    capsys: pytest.CaptureFixture[str], argv: list[str], complaint: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["validate", "metrics", "--node", "n1", *argv])

    assert exit_.value.code == 2
    assert complaint in capsys.readouterr().err


def test_missing_node_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["validate", "metrics", "--port", "8000"])

    assert exit_.value.code == 2
    assert "the following arguments are required: --node" in capsys.readouterr().err


def _kubeconfig(path: Path) -> Path:
    """A kubeconfig that loads, naming an apiserver nobody serves."""
    cluster = {"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}
    context = {"name": "c", "context": {"cluster": "c", "user": "u"}}
    config = {"apiVersion": "v1", "kind": "Config", "clusters": [cluster], "contexts": [context],
              "users": [{"name": "u", "user": {"token": "t"}}], "current-context": "c"}  # fmt: skip
    path.write_text(yaml.safe_dump(config))
    return path


def test_port_in_use_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "gpuctrl", "validate", "metrics", "--port", str(port),
             "--node", "n1", "--kubeconfig", str(_kubeconfig(tmp_path / "kubeconfig")),
             "--output-dir", str(tmp_path / "out"), "--host-root", str(tmp_path)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"gpuctrl validate metrics: cannot listen on :{port}: Address already in use\n"
    )


def test_unreadable_kubeconfig_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "kubeconfig").write_text("this: is not a kubeconfig\n")

    code = main(
        ["validate", "metrics", "--node", "n1", "--kubeconfig", str(tmp_path / "kubeconfig")]
    )

    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpuctrl validate metrics: kubeconfig {tmp_path / 'kubeconfig'}: ")
    assert "Traceback" not in err
