"""Which ClusterPolicy is honoured, and the controllers that reconcile it.

Only the oldest ClusterPolicy (ties by name) is honoured: the operand, node-status, repo-config
and policy controllers act for it alone, and a younger one waits until it is gone.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from api.v1alpha1 import ClusterPolicy, InvalidPolicy, Problem, load_cluster_policy
from controllers._kinds import CLUSTER_POLICIES
from controllers._reads import cached_list, informers, oldest_policy
from gpuctrl.runtime import (
    Cache,
    Controller,
    Event,
    Manager,
    Mapper,
    Predicate,
    Reconciler,
    Request,
    Watch,
    generation_changed,
)

__all__ = ["Policy", "add_policy_controller", "every_policy", "honoured", "to_honoured"]


@dataclass(frozen=True)
class Policy:
    """The honoured ClusterPolicy: its object as cached, and either its parsed model or every
    problem found by `api.v1alpha1.load_cluster_policy`."""

    obj: dict[str, Any]
    model: ClusterPolicy | None
    problems: tuple[Problem, ...] = ()

    @property
    def name(self) -> str:
        """The policy's name."""
        return str(self.obj["metadata"]["name"])


def honoured(cache: Cache) -> Policy | None:
    """The oldest ClusterPolicy (ties by name), parsed; None when there is none, and while the
    oldest is being deleted: nothing is applied for it then (a foreground delete, waiting for
    the garbage collector to remove what it owns, would otherwise never finish), and the next
    one is honoured only once it is gone (so two policies never claim one object)."""
    name = oldest_policy(cache)
    obj = None if name is None else cache.get(CLUSTER_POLICIES, name)
    if obj is None or obj["metadata"].get("deletionTimestamp"):
        return None
    spec, problems = _parse(json.dumps(obj.get("spec") or {}, sort_keys=True))
    return Policy(obj, spec, problems)


@functools.lru_cache(maxsize=8)
def _parse(spec: str) -> tuple[ClusterPolicy | None, tuple[Problem, ...]]:
    """The policy of this spec (JSON text) or its problems; remembered, so thousands of node
    reconciles parse one policy once."""
    try:
        return load_cluster_policy({"spec": json.loads(spec)}), ()
    except InvalidPolicy as error:
        return None, tuple(error.problems)


def to_honoured(cache: Cache) -> Mapper:
    """A mapper from any object to the honoured ClusterPolicy's request (none without one).

    It reads the policies' store as it is: before that informer synced, nothing is mapped,
    and the policy's own add event enqueues it once it is listed.
    """

    def mapper(obj: Mapping[str, Any]) -> Iterable[Request]:
        name = oldest_policy(cache)
        return () if name is None else (Request("", name),)

    return mapper


def every_policy(cache: Cache, namespace: str) -> Mapper:
    """A mapper from any object to the request of every cached ClusterPolicy."""

    def mapper(obj: Mapping[str, Any]) -> Iterable[Request]:
        every = cached_list(cache, CLUSTER_POLICIES, namespace)
        return [Request("", str(p["metadata"]["name"])) for p in every]

    return mapper


def _deleted(event: Event) -> bool:
    """Passes deletes only."""
    return event.type == "delete"


def add_policy_controller(
    manager: Manager,
    name: str,
    reconciler: Reconciler,
    namespace: str,
    *,
    watches: Iterable[Watch] = (),
    predicates: Sequence[Predicate] = (generation_changed,),
    on_delete: Mapper | None = None,
) -> Controller:
    """Add a controller of ClusterPolicies named ``name`` to ``manager``: a policy's events
    passing ``predicates`` enqueue it, and a deleted one enqueues what ``on_delete`` maps it to
    (default: the policy honoured now, which may be the next oldest), besides ``watches``."""
    cache = manager.cache
    informers(cache, CLUSTER_POLICIES, namespace)  # the age index `honoured` reads
    remap = Watch(CLUSTER_POLICIES, on_delete or to_honoured(cache), (_deleted,))
    return manager.add_controller(
        name,
        reconciler,
        for_=CLUSTER_POLICIES,
        predicates=predicates,
        watches=[remap, *watches],
    )
