"""Why a render cannot proceed: the facts do not hold what the policy needs.

RenderError (ValueError)
└── MissingConfigMap   a ConfigMap the policy names is not among the facts
"""

from __future__ import annotations

__all__ = ["MissingConfigMap", "RenderError"]


class RenderError(ValueError):
    """The policy cannot be rendered against these facts; the message says why and where."""


class MissingConfigMap(RenderError):
    """A ConfigMap named at ``path`` of the policy is not in the operator namespace."""

    def __init__(self, path: str, name: str, namespace: str) -> None:
        super().__init__(f"{path}: ConfigMap {name!r} not found in namespace {namespace!r}")
        self.path = path
        self.name = name
