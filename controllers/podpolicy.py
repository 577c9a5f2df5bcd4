"""The PodPolicy status controller: run by ``gpuctrl manager`` (never by a webhook replica).

Each PodPolicy gets two conditions on its status, written by server-side apply:

- ``Ready``: True with the ``observedGeneration`` it was read at when the policy is valid (the
  webhook applies it), False with the problems when it is not (the webhook leaves it out);
- ``Targeting``: False (reason ``NoTargets``) when the policy names no component and no
  selector, so it can change no pod; True otherwise.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from api.v1alpha1 import InvalidPolicy, PodPolicy, load_pod_policy
from controllers._kinds import POD_POLICIES
from gpuctrl.runtime import Cache, Client, Manager, Request, kube_time

__all__ = ["PodPolicyStatusReconciler", "conditions", "setup"]

_FIELD_MANAGER = "gpuctrl-podpolicy-status"


def conditions(obj: dict[str, Any], namespace: str) -> list[dict[str, Any]]:
    """The ``Ready`` and ``Targeting`` conditions (without times) for the stored PodPolicy."""
    generation = obj["metadata"].get("generation", 0)
    try:
        policy: PodPolicy | None = load_pod_policy(obj)
    except (InvalidPolicy, ValidationError) as error:
        policy, problems = None, str(error)
    if policy is None:
        ready = _condition("Ready", "False", "Invalid", problems, generation)
    else:
        ready = _condition("Ready", "True", "Valid", "the webhook applies this policy", generation)
    if (
        policy is not None
        and not policy.spec.targets.components
        and policy.spec.targets.selector is None
    ):
        targeting = _condition(
            "Targeting",
            "False",
            "NoTargets",
            f"spec.targets names no component and no selector: no pod in {namespace} is changed",
            generation,
        )
    else:
        targeting = _condition(
            "Targeting", "True", "Targets", f"targets pods in {namespace}", generation
        )
    return [ready, targeting]


def _condition(
    kind: str, status: str, reason: str, message: str, generation: int
) -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
    }


class PodPolicyStatusReconciler:
    """Writes `conditions` onto each PodPolicy's status when they differ from what is stored;
    a condition's ``lastTransitionTime`` moves only when its status changes."""

    def __init__(self, cache: Cache, client: Client, namespace: str) -> None:
        self._cache = cache
        self._client = client
        self._namespace = namespace

    async def __call__(self, request: Request) -> None:
        """Reconcile one PodPolicy's status (a deleted policy needs nothing)."""
        obj = self._cache.get(POD_POLICIES, request.name)
        if obj is None:
            return
        stored = {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or ()}
        wanted = conditions(obj, self._namespace)
        now = kube_time()
        for condition in wanted:
            previous = stored.get(condition["type"], {})
            same = previous.get("status") == condition["status"]
            condition["lastTransitionTime"] = (
                previous.get("lastTransitionTime", now) if same else now
            )
        if all(stored.get(c["type"]) == c for c in wanted):
            return
        body = {
            "apiVersion": POD_POLICIES.api_version,
            "kind": POD_POLICIES.kind,
            "metadata": {"name": request.name},
            "status": {"conditions": wanted},
        }
        await self._client.apply(
            POD_POLICIES, body, field_manager=_FIELD_MANAGER, force=True, sub="status"
        )


def setup(manager: Manager, namespace: str) -> None:
    """Add the PodPolicy status controller to ``manager``; ``namespace`` is the operands'."""
    reconciler = PodPolicyStatusReconciler(manager.cache, manager.client, namespace)
    manager.add_controller("podpolicy-status", reconciler, for_=POD_POLICIES)
