"""`render`: the objects a ClusterPolicy asks for, from the policy and gathered facts alone."""

from __future__ import annotations

import functools
from collections.abc import Callable
from importlib import resources
from typing import Any

from api.v1alpha1 import ClusterPolicy
from controllers.render._agents import (
    WORKLOAD_TEMPLATE_KEYS,
    render_device_plugin,
    render_toolkit,
    render_validator,
    runtime_handler,
)
from controllers.render._dcgm import render_dcgm, render_dcgm_exporter
from controllers.render._driver import render_driver
from controllers.render._engine import render_template
from controllers.render._facts import ClusterFacts
from controllers.render._gfd import render_gfd
from controllers.render._meta import metadata
from controllers.render._migmanager import render_mig_manager
from controllers.render._mpsdaemon import render_mps_control_daemon
from controllers.render._nodestatus import render_node_status_exporter

__all__ = ["COMPONENTS", "builtin_workload_templates", "render", "render_component"]


@functools.cache
def builtin_workload_templates() -> dict[str, str]:
    """The validator's built-in workload Pod templates (``cuda.yaml``, ``plugin.yaml``) as text.

    Read as package data of ``gpuctrl.validator.workloads`` without importing the validator.
    """
    folder = resources.files("gpuctrl").joinpath("validator", "workloads")
    return {key: folder.joinpath(key).read_text(encoding="utf-8") for key in WORKLOAD_TEMPLATE_KEYS}


def render(policy: ClusterPolicy, facts: ClusterFacts) -> list[dict[str, Any]]:
    """Every object ``policy`` asks for in a cluster described by ``facts``, in a fixed order.

    Pure and deterministic: the same inputs give equal lists. Raises `RenderError` when the
    facts lack what the policy names (e.g. `MissingConfigMap`). The caller validates the
    policy first (`api.v1alpha1.validate`).
    """
    return [obj for _, part in _PARTS for obj in part(policy, facts)]


def render_component(
    component: str, policy: ClusterPolicy, facts: ClusterFacts
) -> list[dict[str, Any]]:
    """The objects of one of `COMPONENTS` (those `render` labels with it), in `render`'s
    order; raises `RenderError` only for what this component itself needs."""
    if component not in COMPONENTS:
        raise ValueError(f"unknown component {component!r}; known: {', '.join(COMPONENTS)}")
    return [obj for name, part in _PARTS if name == component for obj in part(policy, facts)]


def _runtime_class(policy: ClusterPolicy, facts: ClusterFacts) -> list[dict[str, Any]]:
    name = policy.spec.operator.runtime_class
    return render_template(
        "runtimeclass.yaml.j2",
        metadata=metadata(policy, "toolkit", name, None),
        handler=runtime_handler(policy),
    )


def _validator(policy: ClusterPolicy, facts: ClusterFacts) -> list[dict[str, Any]]:
    return render_validator(policy, facts, builtin_workload_templates())


COMPONENTS = (
    "driver",
    "toolkit",
    "validator",
    "device-plugin",
    "mps-control-daemon",
    "gpu-feature-discovery",
    "dcgm",
    "dcgm-exporter",
    "node-status-exporter",
    "mig-manager",
)
"""The operands, each one controller's: the ``app.kubernetes.io/component`` label values."""
# What render yields, in order, and whose it is (the RuntimeClass is the toolkit's).
_PARTS: tuple[tuple[str, Callable[[ClusterPolicy, ClusterFacts], list[dict[str, Any]]]], ...] = (
    ("driver", render_driver),
    ("toolkit", render_toolkit),
    ("validator", _validator),
    ("device-plugin", render_device_plugin),
    ("mps-control-daemon", render_mps_control_daemon),
    ("gpu-feature-discovery", render_gfd),
    ("dcgm", render_dcgm),
    ("dcgm-exporter", render_dcgm_exporter),
    ("node-status-exporter", render_node_status_exporter),
    ("mig-manager", render_mig_manager),
    ("toolkit", _runtime_class),
)
