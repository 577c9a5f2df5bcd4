"""gpuctrl's copies of the config files an operand's pods read: a ConfigMap of gpuctrl's own per
file set, holding content checked before any pod sees it, and the pod template annotation
(`CONFIG_HASH`) that rolls the pods when that content changes.

A pod never mounts the user's ConfigMap itself: a later bad edit of it is refused by the render
(`RenderError`, the last good copy and DaemonSet kept) and never reaches a pod that restarts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from api.v1alpha1 import ClusterPolicy
from controllers.render._engine import render_template
from controllers.render._facts import ClusterFacts, ConfigMapFacts
from controllers.render._meta import CONFIG_HASH, config_hash, metadata

__all__ = ["config_copies"]


def config_copies(
    policy: ClusterPolicy, facts: ClusterFacts, component: str, copies: Sequence[ConfigMapFacts]
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The ConfigMaps ``copies`` of ``component`` in the operator namespace, and the pod
    annotations holding their hash; the caller checked their data first."""
    objects = [
        obj
        for copy in copies
        for obj in render_template(
            "configmap.yaml.j2",
            metadata=metadata(policy, component, copy.name, facts.namespace),
            data=dict(copy.data),
        )
    ]
    return objects, {CONFIG_HASH: config_hash(copies)}
