"""The thin shell around `mutate`: PodPolicies from the cache, AdmissionReviews from the server.

`PolicySet` keeps the parsed PodPolicies as an informer handler (each policy parsed once per
change, not per request; an invalid one is logged and left out). `PodPolicyHandler` answers
the server: pods created in the operands' namespace get `mutate`'s patch; any other kind,
operation or namespace is allowed unchanged; a pod of the wrong shape (or with more than
`MAX_CONTAINERS` containers) is denied with a message saying where. `mutate` runs in a worker
thread, so a big pod never holds the event loop: other reviews and the health probes are
answered meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from prometheus_client import Counter
from pydantic import ValidationError

from api.v1alpha1 import POD_POLICY, InvalidPolicy, PodPolicy, load_pod_policy
from gpuctrl.runtime import METRICS_REGISTRY, Resource, thaw
from gpuctrl.runtime.webhook import AdmissionRequest, AdmissionResponse, allowed, denied
from webhooks._mutate import InvalidPod, mutate

__all__ = ["MUTATE_PATH", "POD_POLICIES", "PodPolicyHandler", "PolicySet"]

log = logging.getLogger("gpuctrl.webhook")

MUTATE_PATH = "/mutate-v1-pod"
POD_POLICIES = Resource(*POD_POLICY)

MUTATIONS = Counter(
    "gpuctrl_pod_policy_mutations_total",
    "Pods a PodPolicy changed (dry runs included).",
    ["policy"],
    registry=METRICS_REGISTRY,
)

_POD = ("", "v1", "Pod")
_PODS = ("", "v1", "pods")


class PolicySet:
    """The valid PodPolicies of the cluster, by name, kept current by an informer."""

    def __init__(self) -> None:
        self.policies: dict[str, PodPolicy] = {}

    def on_add(self, obj: Mapping[str, Any]) -> None:
        """Parse and keep the policy (an invalid one is logged and dropped)."""
        name = obj["metadata"]["name"]
        try:
            self.policies[name] = load_pod_policy(thaw(obj))
        except (InvalidPolicy, ValidationError) as error:
            self.policies.pop(name, None)
            log.warning("PodPolicy %s is invalid and not applied: %s", name, error)

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        """Parse the new state."""
        if old is not new:
            self.on_add(new)

    def on_delete(self, obj: Mapping[str, Any]) -> None:
        """Forget the policy."""
        self.policies.pop(obj["metadata"]["name"], None)


class PodPolicyHandler:
    """The admission handler of ``/mutate-v1-pod`` for pods of ``namespace``."""

    def __init__(self, policies: PolicySet, namespace: str) -> None:
        self._policies = policies
        self._namespace = namespace

    async def __call__(self, request: AdmissionRequest) -> AdmissionResponse:
        """`mutate`'s patch for a pod created in the operands' namespace, else no change."""
        if (
            request.kind != _POD
            or request.resource != _PODS
            or request.sub_resource
            or request.operation != "CREATE"
            or request.namespace != self._namespace
        ):
            return allowed()
        policies = list(self._policies.policies.values())
        try:
            mutation = await asyncio.to_thread(mutate, request.object, policies)
        except InvalidPod as error:
            return denied(f"gpuctrl cannot apply PodPolicies: {error}", code=400)
        for name in mutation.changed_by:
            MUTATIONS.labels(name).inc()
        return AdmissionResponse(allowed=True, patch=mutation.patch, warnings=mutation.warnings)
