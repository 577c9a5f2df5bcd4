"""The operands gpuctrl deploys, one `controllers._operand.Operand` each: the registry the
manager sets up, the node labeller enables (each ``enabled`` switch) and the policy's ``Ready``
aggregates (each ``condition``). Adding an operand is its module and one entry here."""

from __future__ import annotations

from controllers._operand import Operand
from controllers.dcgm import DCGM
from controllers.dcgmexporter import DCGM_EXPORTER
from controllers.deviceplugin import DEVICE_PLUGIN
from controllers.driver import DRIVER
from controllers.gfd import GFD
from controllers.migmanager import MIG_MANAGER
from controllers.mpsdaemon import MPS_CONTROL_DAEMON
from controllers.nodestatus import NODE_STATUS_EXPORTER
from controllers.toolkit import TOOLKIT
from controllers.validator import VALIDATOR

__all__ = ["OPERANDS"]

OPERANDS: tuple[Operand, ...] = (
    DRIVER,
    TOOLKIT,
    VALIDATOR,
    DEVICE_PLUGIN,
    MPS_CONTROL_DAEMON,
    GFD,
    DCGM,
    DCGM_EXPORTER,
    NODE_STATUS_EXPORTER,
    MIG_MANAGER,
)
