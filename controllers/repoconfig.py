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
from controllers._cluster import cluster_facts, honoured, informer, node_role_changed, to_honoured
from controllers._kinds import CLUSTER_POLICIES, CONFIG_MAPS, NODES
from controllers._status import INVALID_SPEC, PolicyStatus, condition
from controllers.render import ClusterFacts, check_repo_config, next_certificate_change
from gpuctrl.runtime import (
    METRICS_REGISTRY,
    Controller,
    Manager,
    Request,
    Result,
    generation_changed,
    resource_version_changed,
)

__all__ = ["REPO_CONFIG_READY", "repo_errors", "setup"]

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


def setup(manager: Manager, namespace: str, status: PolicyStatus) -> Controller:
    """Add the repo-config controller to ``manager``."""
    cache = manager.cache

    async def reconcile(request: Request) -> Result | None:
        policy = honoured(cache)
        if policy is None or policy.name != request.name:
            return None
        generation = policy.obj["metadata"].get("generation")
        if policy.model is None:
            entry = condition(REPO_CONFIG_READY, None, *INVALID_SPEC, generation)
            await status.write(policy.obj, [entry])
            return None
        facts = cluster_facts(cache, namespace)
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
        if await status.write(policy.obj, [entry], quiet=True):
            for problem in problems:
                status.event(policy.obj, "Warning", "RepoConfigProblem", str(problem))
        change = next_certificate_change(policy.model, facts, now=now)
        if change is None:
            return None
        # A second late: timers are not exact, and the verdict has changed by then.
        return Result(requeue_after=min((change - now).total_seconds() + 1, _LONGEST_WAIT))

    controller = Controller("repo-config", reconcile, clock=cache.clock)
    policies = to_honoured(cache)
    controller.watch(informer(cache, CLUSTER_POLICIES, namespace), policies, (generation_changed,))
    controller.watch(informer(cache, CONFIG_MAPS, namespace), policies, (resource_version_changed,))
    controller.watch(informer(cache, NODES, namespace), policies, (node_role_changed,))
    manager.add(controller)
    return controller
