"""`render`: the objects a ClusterPolicy asks for, from the policy and gathered facts alone."""

from __future__ import annotations

import functools
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
from controllers.render._driver import render_driver
from controllers.render._engine import render_template
from controllers.render._facts import ClusterFacts
from controllers.render._meta import metadata

__all__ = ["builtin_workload_templates", "render"]


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
    return [
        *render_driver(policy, facts),
        *render_toolkit(policy, facts),
        *render_validator(policy, facts, builtin_workload_templates()),
        *render_device_plugin(policy, facts),
        *_runtime_class(policy),
    ]


def _runtime_class(policy: ClusterPolicy) -> list[dict[str, Any]]:
    name = policy.spec.operator.runtime_class
    return render_template(
        "runtimeclass.yaml.j2",
        metadata=metadata(policy, "toolkit", name, None),
        handler=runtime_handler(policy),
    )
