"""The ClusterPolicy spec that turns on every operand: the default policy but for the operand
sections off by default (NVIDIA's standalone DCGM, the node status exporter), derived from the
API so that a new one is turned on too."""

from __future__ import annotations

from typing import Any

from api.v1alpha1 import ClusterPolicySpec, Component

__all__ = ["EVERY_OPERAND_ENABLED"]


def _off_by_default() -> dict[str, Any]:
    defaults = ClusterPolicySpec()
    return {
        info.alias or name: {"enabled": True}
        for name, info in ClusterPolicySpec.model_fields.items()
        if isinstance(section := getattr(defaults, name), Component) and not section.enabled
    }


EVERY_OPERAND_ENABLED = _off_by_default()
"""``{"dcgm": {"enabled": True}, ...}``: a spec (wire names) with every operand enabled."""
