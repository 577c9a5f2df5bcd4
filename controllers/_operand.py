"""The operand controller: one piece of code for the driver, toolkit, validator and device
plugin, each an `Operand` (its component, condition and what it renders).

A reconcile reads the honoured ClusterPolicy and the facts from the cache, renders the
component, applies (server-side, as ``gpuctrl-<component>``, the policy as controller owner)
each object whose render or managed fields differ from the cache, deletes the component's
objects no longer rendered that gpuctrl made for the policy (`controllers._reads.prunable`:
a user's object with the component's labels is never touched), and writes the component's
condition. Any event of the policy, a Node's labels, a ConfigMap of the operand namespace, or
the component's own objects triggers it (a DaemonSet's status carries its pods' readiness);
nothing polls. A policy that does not validate, or a render that fails (a missing ConfigMap, a
refused device plugin config: the condition takes the error's reason), leaves every object as
it is: the last good state runs on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import Gauge

from api.v1alpha1 import ClusterPolicy
from controllers._apply import needs_apply, with_hash
from controllers._honoured import Policy, add_policy_controller, honoured, to_honoured
from controllers._kinds import (
    CONFIG_MAPS,
    CRDS,
    DAEMON_SETS,
    MANAGED_SELECTOR,
    NODES,
    OPTIONAL,
    OWNED,
    PODS,
)
from controllers._readiness import PENDING, DaemonSetReadiness, daemonset_readiness, summary
from controllers._reads import (
    cached,
    cluster_facts,
    node_role_changed,
    owned_objects,
    prunable,
    watches,
)
from controllers._status import INVALID_SPEC, PolicyStatus, condition
from controllers.render import ClusterFacts, RenderError, render_component
from gpuctrl.runtime import (
    METRICS_REGISTRY,
    ApiError,
    Cache,
    Client,
    Conflict,
    Controller,
    Event,
    Manager,
    NotFound,
    Request,
    Resource,
    Result,
    TooManyRequests,
    resource_version_changed,
    set_controller_reference,
)

__all__ = ["Operand", "OperandReconciler", "setup_operand"]

COMPONENT = "app.kubernetes.io/component"
# A DaemonSet's template generation (the apiserver's, kept on a create) and its pods'.
_TEMPLATE_GENERATION = "deprecated.daemonset.template.generation"
_POD_GENERATION = "pod-template-generation"
_READY = Gauge(
    "gpuctrl_operand_ready_nodes",
    "Nodes running an operand's current pod, Ready.",
    ["operand"],
    registry=METRICS_REGISTRY,
)
_DESIRED = Gauge(
    "gpuctrl_operand_desired_nodes",
    "Nodes an operand should run on.",
    ["operand"],
    registry=METRICS_REGISTRY,
)


@dataclass(frozen=True)
class Operand:
    """One operand: its ``component`` (label value, controller name, field manager suffix),
    the ``condition`` type it owns, whether a policy ``enabled`` it, which GPU nodes it
    cannot serve (``unplaced``: the driver's nodes without NFD OS labels), the errors that
    keep its last good objects in place (``blocked``: the driver's repository errors), the
    nodes whose pods run but are not yet known good (``unsettled``: the driver's nodes not done
    with an upgrade, see `controllers.upgrade`), what its settings need that the cluster lacks
    while the rest is applied (``missing``: the exporter's ServiceMonitor CRD), and the
    `OPTIONAL` kinds it may render (``optional``: read and pruned through the apiserver)."""

    component: str
    condition: str
    enabled: Callable[[ClusterPolicy], bool]
    unplaced: Callable[[ClusterPolicy, ClusterFacts], list[str]] = lambda policy, facts: []
    blocked: Callable[[ClusterPolicy, ClusterFacts], list[str]] = lambda policy, facts: []
    unsettled: Callable[[ClusterPolicy, ClusterFacts], list[str]] = lambda policy, facts: []
    missing: Callable[[ClusterPolicy, ClusterFacts], list[str]] = lambda policy, facts: []
    optional: tuple[Resource, ...] = ()

    @property
    def field_manager(self) -> str:
        """The server-side apply field manager: ``gpuctrl-<component>``."""
        return f"gpuctrl-{self.component}"


def _component_is(component: str) -> Callable[[Event], bool]:
    def passes(event: Event) -> bool:
        return bool((event.obj["metadata"].get("labels") or {}).get(COMPONENT) == component)

    return passes


def setup_operand(
    manager: Manager, namespace: str, operand: Operand, status: PolicyStatus
) -> Controller:
    """Add ``operand``'s controller, with its watches on the shared informers, to ``manager``."""
    cache = manager.cache
    policy = to_honoured(cache)
    changed = (resource_version_changed, _component_is(operand.component))
    sources = [
        *watches(cache, NODES, namespace, policy, (node_role_changed,)),
        *watches(cache, CONFIG_MAPS, namespace, policy, (resource_version_changed,)),
        *watches(cache, CRDS, namespace, policy, (resource_version_changed,)),
        *(
            watch
            for resource in OWNED.values()
            if resource != CONFIG_MAPS
            for watch in watches(cache, resource, namespace, policy, changed)
        ),
    ]
    reconciler = OperandReconciler(cache, manager.client, namespace, operand, status)
    return add_policy_controller(manager, operand.component, reconciler, namespace, watches=sources)


class OperandReconciler:
    """Reconciles ``operand`` for the honoured ClusterPolicy (see the module docstring),
    reading the policy and the facts from ``cache``, applying and deleting with ``client``
    and writing the operand's condition and Events through ``status``."""

    def __init__(
        self,
        cache: Cache,
        client: Client,
        namespace: str,
        operand: Operand,
        status: PolicyStatus,
    ) -> None:
        self._cache = cache
        self._client = client
        self._namespace = namespace
        self._operand = operand
        self._status = status
        self._ready = _READY.labels(operand.component)
        self._desired = _DESIRED.labels(operand.component)

    async def __call__(self, request: Request) -> Result | None:
        """Reconcile the operand for the policy ``request.name`` if it is the honoured one."""
        policy = honoured(self._cache)
        if policy is None or policy.name != request.name:
            return None  # nothing to do, or another policy's turn
        if policy.model is None:
            await self._condition(policy, None, *INVALID_SPEC)
            return None  # the last good objects keep running; the problems are on Ready
        facts = cluster_facts(self._cache, self._namespace)
        try:
            rendered = render_component(self._operand.component, policy.model, facts)
        except RenderError as error:  # its reason: MissingConfigMap, InvalidDevicePluginConfig, ...
            await self._condition(policy, False, error.reason, str(error))
            return None
        if self._operand.enabled(policy.model) and (
            errors := self._operand.blocked(policy.model, facts)
        ):
            text = (
                f"{len(errors)} error(s) in its configuration keep the last good objects "
                f"running: {'; '.join(errors)}"
            )
            await self._condition(policy, False, "InvalidRepoConfig", text)
            return None
        desired = [with_hash(set_controller_reference(policy.obj, obj)) for obj in rendered]
        for obj in desired:
            try:
                await self._apply(policy, obj)
            except ApiError as error:
                if isinstance(error, Conflict | TooManyRequests):
                    raise  # a lost race or throttling: retried, nothing to tell
                text = f"the apiserver refused {_describe(obj)}: {error}"
                self._status.event(policy.obj, "Warning", "ApplyFailed", text)
                await self._condition(policy, False, "ApplyFailed", text)
                raise  # retried with backoff: the cause may be the cluster's, not the spec's
        await self._prune(policy, desired, facts)
        await self._report(policy, policy.model, facts, desired)
        return None

    async def _apply(self, policy: Policy, obj: dict[str, Any]) -> None:
        key = (obj["apiVersion"], obj["kind"])
        meta = obj["metadata"]
        if key in OPTIONAL:
            resource = OPTIONAL[key][0]
            current = await self._uncached(resource, meta["name"], meta.get("namespace"))
        else:
            resource = OWNED[key]
            current = cached(
                self._cache, resource, self._namespace, meta["name"], meta.get("namespace")
            )
        if not needs_apply(obj, current):
            return
        if resource == DAEMON_SETS:
            if current is None:
                obj = await self._over_orphans(obj)
            elif _selector(current) != _selector(obj):
                await self._replace(policy, current)
                return
        await self._client.apply(
            resource, obj, field_manager=self._operand.field_manager, force=True
        )
        verb = "Created" if current is None else "Updated"
        self._status.event(policy.obj, "Normal", verb, f"{verb} {_describe(obj)}")

    async def _replace(self, policy: Policy, current: Mapping[str, Any]) -> None:
        """Delete ``current``, whose pod selector gpuctrl changed (a selector never changes in
        place), orphaning its pods: the one applied once it is gone selects and adopts them,
        then rolls them as its update strategy says. Its deletion's event brings the next
        reconcile."""
        meta = current["metadata"]
        if meta.get("deletionTimestamp"):
            return  # the garbage collector is orphaning its pods
        await self._client.delete(
            DAEMON_SETS,
            meta["name"],
            meta.get("namespace"),
            propagation_policy="Orphan",
            uid=meta["uid"],
        )
        text = (
            f"Replacing {_describe({**current, 'kind': DAEMON_SETS.kind})}: its pod selector "
            "changed; its pods are kept for the new one to adopt"
        )
        self._status.event(policy.obj, "Normal", "Replacing", text)

    async def _over_orphans(self, daemon_set: dict[str, Any]) -> dict[str, Any]:
        """``daemon_set``, to be made where the pods it selects have no controller (those of
        one `_replace` deleted), continuing their template generation: the DaemonSet controller
        takes a pod of its DaemonSet's template generation (1 for a new one) as up to date
        whatever its template, and would keep an earlier release's pods."""
        selector = ",".join(f"{k}={v}" for k, v in _selector(daemon_set)["matchLabels"].items())
        pods = await self._client.list(PODS, self._namespace, label_selector=selector)
        generations = [
            int(generation)
            for pod in pods
            if not any(o.get("controller") for o in pod["metadata"].get("ownerReferences") or ())
            and (generation := pod["metadata"]["labels"].get(_POD_GENERATION, "")).isdigit()
        ]
        if not generations:
            return daemon_set
        meta = daemon_set["metadata"]
        annotations = {**meta["annotations"], _TEMPLATE_GENERATION: str(max(generations) + 1)}
        return {**daemon_set, "metadata": {**meta, "annotations": annotations}}

    async def _uncached(
        self, resource: Resource, name: str, namespace: str | None
    ) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = await self._client.get(resource, name, namespace)
        except NotFound:
            return None
        return found

    async def _owned(
        self, resource: Resource, policy: Policy, facts: ClusterFacts
    ) -> list[dict[str, Any]]:
        """The operand's objects of ``resource`` that gpuctrl made for ``policy``: from the
        cache, or for an optional kind from the apiserver (none where its CRD is not served)."""
        component = self._operand.component
        if resource not in self._operand.optional:
            return owned_objects(self._cache, resource, self._namespace, component, policy.obj)
        if OPTIONAL[(resource.api_version, resource.kind)][1] not in facts.crds:
            return []
        selector = f"{MANAGED_SELECTOR},{COMPONENT}={component}"
        found = await self._client.list(resource, self._namespace, label_selector=selector)
        return [obj for obj in found if prunable(obj, policy.obj)]

    async def _prune(
        self, policy: Policy, desired: list[dict[str, Any]], facts: ClusterFacts
    ) -> None:
        wanted = {_identity(obj) for obj in desired}
        for resource in (*OWNED.values(), *self._operand.optional):
            found = await self._owned(resource, policy, facts)
            for obj in found:
                if _identity(obj) in wanted:
                    continue
                meta = obj["metadata"]
                await self._client.delete(resource, meta["name"], meta.get("namespace"))
                text = f"Deleted {_describe({**obj, 'kind': resource.kind})}"
                self._status.event(policy.obj, "Normal", "Deleted", text)

    async def _report(
        self,
        policy: Policy,
        model: ClusterPolicy,
        facts: ClusterFacts,
        desired: list[dict[str, Any]],
    ) -> None:
        component = self._operand.component
        sets = [self._readiness(obj) for obj in desired if obj["kind"] == DAEMON_SETS.kind]
        self._ready.set(sum(r.ready for _, r in sets))
        self._desired.set(sum(r.desired for _, r in sets))
        unplaced = self._operand.unplaced(model, facts)
        if not self._operand.enabled(model):
            await self._condition(policy, True, "Disabled", f"{component} is disabled")
        elif missing := self._operand.missing(model, facts):
            await self._condition(policy, False, "MissingCRD", "; ".join(missing))
        elif not facts.gpu_nodes():
            await self._condition(policy, True, "NoGPUNodes", "no GPU nodes: nothing to run")
        elif unplaced:
            text = (
                f"GPU node(s) {', '.join(unplaced)} lack NFD's OS labels (feature.node."
                "kubernetes.io/system-os_release.ID, .VERSION_ID): no driver runs there; "
                + summary(component, sets)
            )
            await self._condition(policy, False, "NFDLabelsMissing", text)
        elif pending := [r.name for _, r in sets if not r.observed]:
            # Counts not yet the DaemonSet controller's: no Warning for a set just made.
            text = f"{summary(component, sets)}; the DaemonSet controller has not yet observed "
            text += ", ".join(pending)
            await self._condition(policy, False, PENDING, text, quiet=True)
        elif not all(r.done for _, r in sets):
            await self._condition(policy, False, "OperandNotReady", summary(component, sets))
        elif unsettled := self._operand.unsettled(model, facts):
            text = f"{summary(component, sets)}; {len(unsettled)} not yet validated on it"
            await self._condition(policy, False, "UpgradeInProgress", text, quiet=True)
        else:
            await self._condition(policy, True, "Reconciled", summary(component, sets))

    def _readiness(self, ds: Mapping[str, Any]) -> tuple[str, DaemonSetReadiness]:
        name = ds["metadata"]["name"]
        label = name.removeprefix(f"gpuctrl-{self._operand.component}-")
        current = cached(self._cache, DAEMON_SETS, self._namespace, name, self._namespace)
        if current is None:  # just created: the cache has not seen it yet
            return label, DaemonSetReadiness(name, 0, 0, False, observed=False)
        return label, daemonset_readiness(current)

    async def _condition(
        self, policy: Policy, ok: bool | None, reason: str, message: str, *, quiet: bool = False
    ) -> None:
        generation = policy.obj["metadata"].get("generation")
        entry = condition(self._operand.condition, ok, reason, message, generation)
        await self._status.write(policy.obj, [entry], quiet=quiet)


def _identity(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return (str(obj.get("kind", "")), str(meta.get("namespace") or ""), str(meta["name"]))


def _selector(daemon_set: Mapping[str, Any]) -> Any:
    return daemon_set["spec"]["selector"]


def _describe(obj: Mapping[str, Any]) -> str:
    meta = obj["metadata"]
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind')} {where}{meta['name']}"
