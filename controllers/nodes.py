"""The node labeller: ``nvidia.com/gpu.present`` and the ``nvidia.com/gpu.deploy.<operand>``
labels every operand DaemonSet selects nodes by, as NVIDIA's operator writes them.

`label_changes` is the rule (pure). Controller ``nodes`` (`NodeLabeller`) reconciles one Node
per key, reading it and the honoured ClusterPolicy from the cache, and sends one JSON merge
patch of the changed labels only, as field manager ``gpuctrl-nodes``, conditional on the
resourceVersion it read. It acts only while a valid ClusterPolicy is
honoured; a Node's label change or a policy's spec change triggers it. Controller
``nodes-status`` reconciles the honoured policy on the same events and writes its
``NodesLabelled`` condition (how many GPU nodes carry their labels) and ``gpuctrl_gpu_nodes``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import Gauge

from api.v1alpha1 import ClusterPolicy
from controllers._honoured import add_policy_controller, honoured, to_honoured
from controllers._kinds import CLUSTER_POLICIES, NODES
from controllers._labels import (
    DEPLOY_LABELS,
    DEPLOY_OPERANDS,
    GPU_PRESENT,
    GPU_PRESENT_FROM,
    GPU_PRODUCT,
    MIG_CAPABLE,
    MIG_CONFIG,
    MIG_DEPLOY_LABELS,
    MPS_CAPABLE,
    MPS_COMPONENTS,
    NFD_GPU_LABELS,
    VGPU_HOST_DRIVER,
)
from controllers._reads import cached, informer_terms, node_states, watches
from controllers._status import INVALID_SPEC, PolicyStatus, condition
from controllers.operands import OPERANDS
from gpuctrl.runtime import (
    METRICS_REGISTRY,
    Cache,
    Client,
    Controller,
    Manager,
    Mapper,
    Request,
    Result,
    generation_changed,
    labels_changed,
)

__all__ = [
    "DEPLOY_LABELS",
    "GPU_PRESENT",
    "LABELLED",
    "MIG_PAUSED",
    "NodeLabeller",
    "NodesReporter",
    "enabled_components",
    "is_gpu",
    "is_mig_capable",
    "label_changes",
    "mig_default",
    "node_components",
    "setup",
]

LABELLED = "NodesLabelled"
_GPU_NODES = Gauge(
    "gpuctrl_gpu_nodes",
    "Nodes with an NVIDIA GPU (by NFD's labels, or another's gpu.present=true).",
    registry=METRICS_REGISTRY,
)
_OURS = "true"  # the value gpuctrl writes; only labels holding it are gpuctrl's to remove
_FROM_NFD = "nfd"
MIG_PAUSED = "paused-for-mig-change"
"""The value NVIDIA's MIG manager writes on its GPU clients' deploy labels while it
reconfigures a node (and writes back to ``true`` after)."""


def enabled_components(policy: ClusterPolicy) -> frozenset[str]:
    """The components of the operands ``policy`` enables."""
    return frozenset(operand.component for operand in OPERANDS if operand.enabled(policy))


def mig_default(policy: ClusterPolicy) -> str | None:
    """The ``nvidia.com/mig.config`` MIG-capable GPU nodes without one get, as NVIDIA's
    operator gives it: ``all-disabled`` while the MIG manager is enabled with
    ``config.default: all-disabled``; None otherwise."""
    manager = policy.spec.mig_manager
    return (manager.config.default or None) if manager.enabled else None


def label_changes(
    labels: Mapping[str, str], enabled: Iterable[str], mig_config: str | None = None
) -> dict[str, str | None]:
    """The label writes (None: remove) that bring a node with ``labels`` in line.

    A GPU node (`is_gpu`) gets, unless ``gpu.deploy.operands=false``, the deploy label of each
    ``enabled`` component where that label is absent or empty (a value someone else wrote is
    kept: the MIG manager's ``paused-for-mig-change``, the driver manager's ``false``); the MIG
    manager's only where `is_mig_capable`. A MIG-capable GPU node without an
    ``nvidia.com/mig.config`` gets ``mig_config`` (`mig_default`; never removed, as with
    NVIDIA). A node with an NVIDIA PCI label from NFD gets ``gpu.present=true``, marked as
    gpuctrl's (``GPU_PRESENT_FROM=nfd``) when gpuctrl writes it. Deploy labels holding
    gpuctrl's ``true`` are removed from a node that opted out, for a disabled component, and
    from a node that is no GPU node (or no MIG-capable node) any more, whose ``gpu.present``
    turns ``false`` when it was gpuctrl's; a ``gpu.present=true`` that someone else wrote is
    never flipped.
    """
    nfd, gpu = _nfd_gpu(labels), is_gpu(labels)
    mig_capable = is_mig_capable(labels)
    wanted = set(enabled) if gpu and labels.get(DEPLOY_OPERANDS) != "false" else set()
    changes: dict[str, str | None] = {}
    if nfd and labels.get(GPU_PRESENT) != "true":
        changes |= {GPU_PRESENT: "true", GPU_PRESENT_FROM: _FROM_NFD}
    elif not gpu and GPU_PRESENT in labels and labels[GPU_PRESENT] != "false":
        changes[GPU_PRESENT] = "false"
    if not nfd and GPU_PRESENT_FROM in labels:
        changes[GPU_PRESENT_FROM] = None
    if gpu and mig_capable and mig_config and not labels.get(MIG_CONFIG):
        changes[MIG_CONFIG] = mig_config
    # A label two components share (the device plugin's, the MPS daemon's too) is wanted while
    # either is.
    wanted_labels = {
        label
        for component, label in DEPLOY_LABELS.items()
        if component in wanted and (mig_capable or label not in MIG_DEPLOY_LABELS)
    }
    for label in dict.fromkeys(DEPLOY_LABELS.values()):
        value = labels.get(label)
        want = label in wanted_labels
        if want and not value:
            changes[label] = _OURS
        elif not want and value == _OURS:
            changes[label] = None
    return changes


def node_components(labels: Mapping[str, str], enabled: Iterable[str]) -> frozenset[str]:
    """Of the ``enabled`` components, those a GPU node with ``labels`` should run a Ready pod
    of: the MIG manager only on a MIG-capable node, the MPS control daemon only on an
    MPS-capable one, and none whose deploy label the MIG manager paused there
    (``paused-for-mig-change``: its pod is meant to be gone until the label is back)."""
    return frozenset(
        component
        for component in enabled
        if (is_mig_capable(labels) or DEPLOY_LABELS[component] not in MIG_DEPLOY_LABELS)
        and (labels.get(MPS_CAPABLE) == "true" or component not in MPS_COMPONENTS)
        and labels.get(DEPLOY_LABELS[component]) != MIG_PAUSED
    )


def _gpu_related(labels: Mapping[str, str]) -> bool:
    return GPU_PRESENT in labels or any(label in labels for label in NFD_GPU_LABELS)


def is_gpu(labels: Mapping[str, str]) -> bool:
    """Whether the node has an NVIDIA GPU: NFD found one, or someone else than gpuctrl marked it
    ``gpu.present=true`` (as `gpuctrl render` counts GPU nodes)."""
    others = labels.get(GPU_PRESENT) == "true" and labels.get(GPU_PRESENT_FROM) != _FROM_NFD
    return _nfd_gpu(labels) or others


# Where nvidia.com/mig.capable is absent, NVIDIA's operator reads a GPU product name holding one
# of these, in any case, as MIG-capable (a plain substring test: "NVIDIA-A100-SXM4-40GB").
_MIG_PRODUCTS = ("a100", "a30", "h100")


def is_mig_capable(labels: Mapping[str, str]) -> bool:
    """Whether a node with ``labels`` has MIG-capable GPUs, as NVIDIA's operator decides it:
    never on a vGPU host (a non-empty ``nvidia.com/vgpu.host-driver-version``); else
    ``nvidia.com/mig.capable`` where present (``true`` only); else ``nvidia.com/gpu.product``
    naming an A100, A30 or H100. ``nvidia.com/gpu.workload.config`` is not read: NVIDIA's
    operator reads it only with sandbox workloads, which gpuctrl does not deploy."""
    if labels.get(VGPU_HOST_DRIVER):
        return False
    if MIG_CAPABLE in labels:
        return labels[MIG_CAPABLE] == "true"
    product = labels.get(GPU_PRODUCT, "").lower()
    return any(name in product for name in _MIG_PRODUCTS)


def _nfd_gpu(labels: Mapping[str, str]) -> bool:
    return any(labels.get(label) == "true" for label in NFD_GPU_LABELS)


class NodeLabeller:
    """The ``nodes`` reconciler: brings one Node's labels in line with `label_changes` for the
    honoured, valid ClusterPolicy, reading both from ``cache``. The patch carries the
    resourceVersion read, so a label someone changed since is never overwritten: the write
    fails with `Conflict` and is retried on the newer Node."""

    def __init__(self, cache: Cache, client: Client, namespace: str) -> None:
        self._cache = cache
        self._client = client
        self._namespace = namespace

    async def __call__(self, request: Request) -> Result | None:
        """Label the Node ``request.name``; nothing without a valid honoured policy."""
        node = cached(self._cache, NODES, self._namespace, request.name)
        policy = honoured(self._cache)
        if node is None or policy is None or policy.model is None:
            return None
        meta = node["metadata"]
        model = policy.model
        changes = label_changes(
            meta.get("labels") or {}, enabled_components(model), mig_default(model)
        )
        if changes:
            await self._client.request(
                "PATCH",
                NODES.path(name=request.name),
                query={"fieldManager": "gpuctrl-nodes"},
                body={"metadata": {"resourceVersion": meta["resourceVersion"], "labels": changes}},
                content_type="application/merge-patch+json",
            )
        return None


class NodesReporter:
    """The ``nodes-status`` reconciler: writes the honoured policy's ``NodesLabelled`` condition
    (how many GPU nodes carry their labels) through ``status``, and ``gpuctrl_gpu_nodes``,
    from the Node states in ``cache``."""

    def __init__(self, cache: Cache, namespace: str, status: PolicyStatus) -> None:
        self._cache = cache
        self._namespace = namespace
        self._status = status

    async def __call__(self, request: Request) -> Result | None:
        """Write the condition of the policy ``request.name`` if it is the honoured one."""
        policy = honoured(self._cache)
        if policy is None or policy.name != request.name:
            return None
        generation = policy.obj["metadata"].get("generation")
        if policy.model is None:
            entry = condition(LABELLED, None, *INVALID_SPEC, generation)
            await self._status.write(policy.obj, [entry])
            return None
        enabled, mig_config = enabled_components(policy.model), mig_default(policy.model)
        gpus = pending = 0
        for labels, names in node_states(self._cache, self._namespace):  # a few states
            gpus += len(names) if is_gpu(labels) else 0
            pending += len(names) if label_changes(labels, enabled, mig_config) else 0
        _GPU_NODES.set(gpus)
        if not gpus:
            entry = condition(LABELLED, True, "NoGPUNodes", "no GPU nodes", generation)
        elif pending:
            text = "GPU nodes await their labels"  # no count: one write, not one per node
            entry = condition(LABELLED, False, "LabelsPending", text, generation)
        else:
            text = f"{gpus}/{gpus} GPU nodes labelled"
            entry = condition(LABELLED, True, "Reconciled", text, generation)
        await self._status.write(policy.obj, [entry])
        return None


def _every_gpu_node(cache: Cache, namespace: str) -> Mapper:
    """A mapper from any object to the request of every Node with a GPU or GPU labels."""

    def mapper(_: Mapping[str, Any]) -> Iterable[Request]:
        states = node_states(cache, namespace)
        return [Request("", n) for labels, names in states if _gpu_related(labels) for n in names]

    return mapper


def setup(manager: Manager, namespace: str, status: PolicyStatus) -> list[Controller]:
    """Add the node labeller and its status controller to ``manager``."""
    cache = manager.cache
    to_nodes = _every_gpu_node(cache, namespace)
    labeller = manager.add_controller(
        "nodes",
        NodeLabeller(cache, manager.client, namespace),
        for_=NODES,
        **informer_terms(NODES),
        namespace=namespace,
        predicates=(labels_changed,),
        watches=watches(cache, CLUSTER_POLICIES, namespace, to_nodes, (generation_changed,)),
        max_concurrent_reconciles=8,
    )
    reporter = add_policy_controller(
        manager,
        "nodes-status",
        NodesReporter(cache, namespace, status),
        namespace,
        watches=watches(cache, NODES, namespace, to_honoured(cache), (labels_changed,)),
    )
    return [labeller, reporter]
