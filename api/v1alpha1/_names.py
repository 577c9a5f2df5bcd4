"""The API's group and version, and each kind's names as its CRD declares them (no models)."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["CLUSTER_POLICY", "GROUP", "POD_POLICY", "VERSION", "KindNames"]

GROUP = "gpuctrl.io"
VERSION = "v1alpha1"


class KindNames(NamedTuple):
    """A kind's names, in the order `gpuctrl.runtime.Resource` takes them (``Resource(*names)``)."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool


CLUSTER_POLICY = KindNames(f"{GROUP}/{VERSION}", "ClusterPolicy", "clusterpolicies", False)
POD_POLICY = KindNames(f"{GROUP}/{VERSION}", "PodPolicy", "podpolicies", False)
