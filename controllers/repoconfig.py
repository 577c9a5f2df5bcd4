"""The repo-config controller (``RepoConfigReady``): the driver's ``repoConfig`` and
``certConfig`` ConfigMaps and ``nodeLocalPaths``, checked by
`controllers.render.check_repo_config` against the GPU nodes' operating systems.

False with every error in the message, True with the warnings in it; a Warning Event per
problem whenever the verdict changes; ``gpuctrl_repo_config_problems{severity}``. While there
are errors the driver controller keeps its last good DaemonSets (see `repo_errors`).
Triggered by the policy's spec, the operand namespace's ConfigMaps and Nodes' labels, and
by time: it runs again when a certConfig certificate becomes valid, enters its last 30 days or
expires (`next_certificate_change`), so an expiry is reported while there is time to act.
"""

from __future__ import annotations

from datetime import UTC, datetime

from prometheus_client import Gauge

from api.v1alpha1 import ClusterPolicy
from controllers._honoured import add_policy_controller, honoured, to_honoured
from controllers._kinds import CONFIG_MAPS, NODES
from controllers._reads import cluster_facts, node_role_changed, watches
from controllers._status import INVALID_SPEC, PolicyStatus, condition
from controllers.render import ClusterFacts, check_repo_config, next_certificate_change
from gpuctrl.runtime import (
    METRICS_REGISTRY,
    Cache,
    Controller,
    Manager,
    Request,
    Result,
    resource_version_changed,
)

__all__ = ["REPO_CONFIG_READY", "RepoConfigReconciler", "repo_errors", "setup"]

REPO_CONFIG_READY = "RepoConfigReady"
_LONGEST_WAIT = 24 * 3600.0  # seconds: a clock that jumps is caught within a day
_PROBLEMS = Gauge(
    "gpuctrl_repo_config_problems",
    "Problems of the driver's repository configuration, by severity.",
    ["severity"],
    registry=METRICS_REGISTRY,
)


def repo_errors(policy: ClusterPolicy, facts: ClusterFacts) -> list[str]:
    """The error messages of the repository configuration ([] when the driver can roll)."""
    problems = check_repo_config(policy, facts, now=datetime.now(UTC))
    return [p.message for p in problems if p.severity == "error"]


class RepoConfigReconciler:
    """Writes the honoured policy's ``RepoConfigReady`` condition (and a Warning Event per
    problem when the verdict changes) through ``status``, from the policy and facts in
    ``cache``; asks to run again when a certificate's verdict will change."""

    def __init__(self, cache: Cache, namespace: str, status: PolicyStatus) -> None:
        self._cache = cache
        self._namespace = namespace
        self._status = status

    async def __call__(self, request: Request) -> Result | None:
        """Check the repository configuration of the policy ``request.name`` if honoured."""
        policy = honoured(self._cache)
        if policy is None or policy.name != request.name:
            return None
        generation = policy.obj["metadata"].get("generation")
        if policy.model is None:
            entry = condition(REPO_CONFIG_READY, None, *INVALID_SPEC, generation)
            await self._status.write(policy.obj, [entry])
            return None
        facts = cluster_facts(self._cache, self._namespace)
        now = datetime.now(UTC)
        problems = check_repo_config(policy.model, facts, now=now)
        errors = [p.message for p in problems if p.severity == "error"]
        warnings = [p.message for p in problems if p.severity == "warning"]
        _PROBLEMS.labels("error").set(len(errors))
        _PROBLEMS.labels("warning").set(len(warnings))
        if errors:
            text = "; ".join(errors + warnings)
            entry = condition(REPO_CONFIG_READY, False, "InvalidRepoConfig", text, generation)
        elif warnings:
            text = "usable, with warnings: " + "; ".join(warnings)
            entry = condition(REPO_CONFIG_READY, True, "RepoConfigWarnings", text, generation)
        else:
            text = "no problems found"
            entry = condition(REPO_CONFIG_READY, True, "Reconciled", text, generation)
        if await self._status.write(policy.obj, [entry], quiet=True):
            for problem in problems:
                self._status.event(policy.obj, "Warning", "RepoConfigProblem", str(problem))
        change = next_certificate_change(policy.model, facts, now=now)
        if change is None:
            return None
        # A second late: timers are not exact, and the verdict has changed by then.
        return Result(requeue_after=min((change - now).total_seconds() + 1, _LONGEST_WAIT))


def setup(manager: Manager, namespace: str, status: PolicyStatus) -> Controller:
    """Add the repo-config controller to ``manager``."""
    cache = manager.cache
    policy = to_honoured(cache)
    sources = [
        *watches(cache, CONFIG_MAPS, namespace, policy, (resource_version_changed,)),
        *watches(cache, NODES, namespace, policy, (node_role_changed,)),
    ]
    reconciler = RepoConfigReconciler(cache, namespace, status)
    return add_policy_controller(manager, "repo-config", reconciler, namespace, watches=sources)
