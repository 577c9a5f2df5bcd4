"""The device-plugin controller: NVIDIA's device plugin (``DevicePluginReady``).

One `controllers._operand.Operand`; the reconcile is the one all operands share.
"""

from __future__ import annotations

from controllers._operand import Operand, setup_operand
from controllers._status import PolicyStatus
from gpuctrl.runtime import Controller, Manager

__all__ = ["DEVICE_PLUGIN", "setup"]

DEVICE_PLUGIN = Operand(
    "device-plugin",
    "DevicePluginReady",
    enabled=lambda policy: policy.spec.device_plugin.enabled,
)


def setup(manager: Manager, namespace: str, status: PolicyStatus) -> Controller:
    """Add the device-plugin controller to ``manager``."""
    return setup_operand(manager, namespace, DEVICE_PLUGIN, status)
