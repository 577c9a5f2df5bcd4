"""Why a render cannot proceed: the facts do not hold what the policy needs.

RenderError (ValueError)
├── MissingConfigMap            a ConfigMap the policy names is not among the facts
└── InvalidDevicePluginConfig   a config of devicePlugin.config's ConfigMap is refused

Each carries the ``reason`` a controller's condition reports it with.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["InvalidDevicePluginConfig", "MissingConfigMap", "RenderError"]


class RenderError(ValueError):
    """The policy cannot be rendered against these facts; the message says why and where."""

    reason = "InvalidSpec"


class MissingConfigMap(RenderError):
    """A ConfigMap named at ``path`` of the policy is not in the operator namespace."""

    reason = "MissingConfigMap"

    def __init__(self, path: str, name: str, namespace: str) -> None:
        super().__init__(f"{path}: ConfigMap {name!r} not found in namespace {namespace!r}")
        self.path = path
        self.name = name


class InvalidDevicePluginConfig(RenderError):
    """The ConfigMap ``name`` of ``devicePlugin.config`` holds configs that may not reach a
    node; ``problems`` says each, with its config and field."""

    reason = "InvalidDevicePluginConfig"

    def __init__(self, name: str, problems: Sequence[str]) -> None:
        super().__init__(
            f"spec.devicePlugin.config.name: ConfigMap {name!r}: {len(problems)} problem(s) "
            f"keep the last good configs running: {'; '.join(problems)}"
        )
        self.name = name
        self.problems = list(problems)
