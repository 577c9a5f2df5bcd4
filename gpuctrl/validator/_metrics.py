"""Node status metrics: the gauges of NVIDIA's node status exporter, each labelled ``node``.

NVIDIA's GPU Operator runs its validator image with ``COMPONENT=metrics`` on every GPU node;
``gpuctrl validate metrics`` serves the same gauges under the same names. Two kinds of value:

- whether each check's status file (``<output-dir>/<check>-ready``) exists, read by
  `NodeStatusCollector` at each scrape: a file that appears or goes shows on the next scrape;
- the outcomes of three probes the exporter runs every interval (the driver check, the
  Node's GPU count, the NVIDIA PCI devices), kept in `NodeProbes`. Until a probe has run its
  gauges read 0, as NVIDIA's do.

The counting is pure: `count_gpu_resources` over a Node as a mapping, and
`count_nvidia_pci_devices` over a host root's sysfs (vendor files, where NVIDIA runs lspci).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from api.v1alpha1 import parse_quantity
from gpuctrl.validator._status import status_path

__all__ = [
    "GPU_RESOURCE",
    "MIG_RESOURCE_PREFIX",
    "NVIDIA_PCI_VENDOR",
    "STATUS_CHECKS",
    "NodeProbes",
    "NodeStatusCollector",
    "count_gpu_resources",
    "count_nvidia_pci_devices",
]

# The checks whose status files have a gauge, gpu_operator_node_<check>_ready.
STATUS_CHECKS = ("driver", "toolkit", "plugin", "cuda")
# The device plugin's resources, as NVIDIA's validator matches them (by prefix: a renamed
# shared resource such as nvidia.com/gpu.shared counts too).
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
# NVIDIA's PCI vendor ID, as sysfs writes it in each device's ``vendor`` file.
NVIDIA_PCI_VENDOR = "0x10de"
_PCI_DEVICES = Path("sys/bus/pci/devices")
_PREFIX = "gpu_operator_"


def count_gpu_resources(node: Mapping[str, Any]) -> int:
    """The GPUs the device plugin advertises in ``node`` (a Node object as a mapping): the
    sum of its ``status.capacity`` quantities named ``nvidia.com/gpu*`` or ``nvidia.com/mig-*``,
    each rounded up to a whole number, as NVIDIA's validator counts them. 0 when none."""
    capacity = (node.get("status") or {}).get("capacity") or {}
    count = 0
    for name, quantity in capacity.items():
        if name.startswith((GPU_RESOURCE, MIG_RESOURCE_PREFIX)):
            count += math.ceil(parse_quantity(str(quantity)))
    return count


def count_nvidia_pci_devices(host_root: Path) -> int:
    """The PCI devices of NVIDIA's vendor ID under ``host_root``'s
    ``sys/bus/pci/devices/*/vendor`` (entries are links into ``sys/devices``, as in sysfs);
    -1 when that folder cannot be read. A device without a readable vendor file is skipped."""
    try:
        entries = list((host_root / _PCI_DEVICES).iterdir())
    except OSError:
        return -1
    count = 0
    for entry in entries:
        try:
            vendor = (entry / "vendor").read_text(encoding="ascii").strip().lower()
        except (OSError, UnicodeDecodeError):
            continue  # removed meanwhile (hot-unplug), or not a device
        count += vendor == NVIDIA_PCI_VENDOR
    return count


@dataclass
class NodeProbes:
    """The last outcome of each periodic probe, and when the exporter started (unix seconds).
    The exporter records into it; `NodeStatusCollector` reads it at each scrape."""

    started: float
    driver_passed: bool = False
    driver_last_success: float = 0.0  # unix seconds; 0 until the driver check passes
    devices: int = 0  # the Node's GPU count; -1 when the Node could not be read
    devices_last_success: float = 0.0  # unix seconds of the last non-zero count
    pci_devices: int = 0  # -1 when the PCI folder could not be read

    def record_driver(self, passed: bool, now: float) -> None:
        """The driver check ran at ``now`` (unix seconds) and passed or not."""
        self.driver_passed = passed
        if passed:
            self.driver_last_success = now

    def record_devices(self, count: int, now: float) -> None:
        """The Node was read at ``now`` with ``count`` GPUs (-1: it could not be read)."""
        self.devices = count
        if count > 0:
            self.devices_last_success = now


class NodeStatusCollector(Collector):
    """NVIDIA's node status gauges for ``node``: the status files of ``output_dir`` as they
    are at scrape time, and the probes' last outcomes from ``probes``."""

    def __init__(self, node: str, output_dir: Path, probes: NodeProbes) -> None:
        self._node = node
        self._output_dir = output_dir
        self._probes = probes

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """One gauge family per metric, each with a single sample labelled with the node."""
        probes = self._probes
        yield self._gauge(
            "node_metrics_ready_ts_seconds",
            "Unix time at which this node's status exporter started.",
            probes.started,
        )
        for check in STATUS_CHECKS:
            yield self._gauge(
                f"node_{check}_ready",
                f"1 while the {check} check's status file exists on this node, else 0.",
                float(status_path(self._output_dir, check).exists()),
            )
        yield self._gauge(
            "node_driver_validation",
            "1 if the last run of the driver check (nvidia-smi in the driver root) passed.",
            float(probes.driver_passed),
        )
        yield self._gauge(
            "node_driver_validation_last_success_ts_seconds",
            "Unix time of the driver check's last pass (0: none yet).",
            probes.driver_last_success,
        )
        yield self._gauge(
            "node_device_plugin_devices_total",
            "GPUs (nvidia.com/gpu*, nvidia.com/mig-*) in this Node's capacity; "
            "-1 when the Node cannot be read.",
            probes.devices,
        )
        yield self._gauge(
            "node_device_plugin_validation_last_success_ts_seconds",
            "Unix time at which this Node last had GPUs in its capacity (0: never yet).",
            probes.devices_last_success,
        )
        yield self._gauge(
            "nvidia_pci_devices_total",
            "PCI devices of NVIDIA's vendor ID on this node; -1 when they cannot be listed.",
            probes.pci_devices,
        )

    def _gauge(self, name: str, documentation: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(_PREFIX + name, documentation, labels=["node"])
        family.add_metric([self._node], value)
        return family
