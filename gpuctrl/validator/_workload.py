"""The cuda and plugin checks: a workload pod on the node, watched to a verdict (the I/O shell).

One run: check the overrides, read the template from the ConfigMap and build the pod (an
`InvalidOverrides` or `TemplateError` stops here, before anything is created); delete every
earlier workload pod of the check on the node and wait until they are gone; create the pod and
watch it until `verdict` says Passed or Failed, or the timeout. A pod that disappears first
(deleted by a person, drained) or that its node kills (`Evicted`: still there, phase Failed) is
deleted and replaced, after a backoff, a bounded number of times. The pod is then deleted, and
an Event on the Node records the outcome. The status file is the caller's business.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient

from api.v1alpha1 import ValidatorWorkloads
from gpuctrl.runtime import (
    EVENTS,
    ApiError,
    BadRequest,
    Client,
    Gone,
    Invalid,
    NotFound,
    Resource,
    kube_time,
)
from gpuctrl.validator._pod import (
    InvalidOverrides,
    PodOwner,
    apply_overrides,
    overrides_field,
    overrides_problems,
    pin_workload,
    template_containers,
    workload_selector,
)
from gpuctrl.validator._template import TemplateError, TemplateSource, render_template
from gpuctrl.validator._verdict import (
    DEFAULT_MAX_RESTARTS,
    Evicted,
    Failed,
    Passed,
    Pending,
    Verdict,
    verdict,
)

__all__ = [
    "RetryPolicy",
    "WorkloadCheck",
    "WorkloadPod",
    "build_workload_pod",
    "run_workload_check",
]

_log = logging.getLogger("gpuctrl.validator")

_PODS = Resource("v1", "Pod", "pods")
_CONFIGMAPS = Resource("v1", "ConfigMap", "configmaps")

# Lines of a failed container's log quoted in the verdict, and how long to wait for them (the
# apiserver fetches them from the kubelet, which may be unreachable: a verdict must not wait).
_LOG_LINES = 20
_LOG_TIMEOUT_SECONDS = 5
# Events about a cluster-scoped object (a Node) must live here, as the kubelet's own do; the
# agent's RBAC must allow creating Events in it.
_EVENT_NAMESPACE = "default"
# Longest Event message; the rest of a long failure stays in the agent's own log.
_EVENT_MESSAGE_LIMIT = 1024
# How much longer than the server-side timeout the client waits for a watch to end by itself.
_WATCH_GRACE_SECONDS = 15


@dataclass(frozen=True)
class WorkloadCheck:
    """What one run of the cuda or plugin check needs."""

    check: str  # "cuda" or "plugin": the template key is f"{check}.yaml"
    namespace: str  # of the ConfigMap and the workload pods
    node_name: str
    configmap: str
    image: str
    image_pull_policy: str
    overrides: ValidatorWorkloads
    owner: PodOwner | None  # the agent's own pod, when it runs in one
    timeout: float  # seconds for the whole run, stale pods included


@dataclass(frozen=True)
class RetryPolicy:
    """How hard a run tries before it gives a verdict of its own."""

    max_recreations: int = 5  # pods replaced after disappearing, before the check fails
    backoff: float = 1.0  # seconds before the first replacement; doubles each time
    max_backoff: float = 30.0
    max_restarts: int = DEFAULT_MAX_RESTARTS  # see `verdict`
    watch_seconds: int = 60  # server-side timeout of one watch request


@dataclass(frozen=True)
class WorkloadPod:
    """The pod a run creates, the same pod without the overrides (to tell whose fault a
    rejection is) and the names of the containers its template defines (the ones judged)."""

    pod: dict[str, Any]
    without_overrides: dict[str, Any]
    containers: frozenset[str]


async def build_workload_pod(client: Client, check: WorkloadCheck) -> WorkloadPod:
    """Read the template from the API and build the pod of one run.

    Raises `InvalidOverrides` for overrides the apiserver would reject and `TemplateError`
    when the ConfigMap, key or template is unusable.
    """
    problems = overrides_problems(check.overrides)
    if problems:
        raise InvalidOverrides(problems)
    source = _source(check)
    key = source.key
    try:
        configmap = await client.get(_CONFIGMAPS, check.configmap, check.namespace)
    except NotFound as error:
        raise TemplateError(source, "the ConfigMap does not exist") from error
    text = (configmap.get("data") or {}).get(key)
    if text is None:
        raise TemplateError(source, "the ConfigMap has no such key")
    rendered = render_template(text, source, _variables(check))
    return WorkloadPod(
        pod=_pin(apply_overrides(rendered, check.overrides), check),
        without_overrides=_pin(rendered, check),
        containers=template_containers(rendered),
    )


def _pin(pod: dict[str, Any], check: WorkloadCheck) -> dict[str, Any]:
    return pin_workload(pod, check.check, check.namespace, check.node_name, check.owner)


async def run_workload_check(
    api: ApiClient, check: WorkloadCheck, retry: RetryPolicy | None = None
) -> Passed | Failed:
    """Run ``check`` once on its node and return the verdict; records an Event either way.

    Raises, with no pod created, `TemplateError` for an unusable template and `InvalidOverrides`
    for unusable overrides (whichever the apiserver's rejection of the pod is due to), and
    `ApiError` when the API refuses what the agent must do.
    """
    retry = retry or RetryPolicy()
    deadline = asyncio.get_running_loop().time() + check.timeout
    client = Client(api)
    built = await build_workload_pod(client, check)
    try:
        async with asyncio.timeout_at(deadline):
            await _delete_stale_pods(client, check, retry)
    except TimeoutError:
        result: Passed | Failed = Failed(
            "Timeout", f"earlier {check.check} workload pods still there after {check.timeout} s"
        )
    else:
        result = await _run_pods(client, check, retry, built, deadline)
    await _record_event(client, check, result)
    return result


def _source(check: WorkloadCheck) -> TemplateSource:
    return TemplateSource(f"{check.namespace}/{check.configmap}", f"{check.check}.yaml")


def _variables(check: WorkloadCheck) -> dict[str, str]:
    return {
        "namespace": check.namespace,
        "node_name": check.node_name,
        "image": check.image,
        "image_pull_policy": check.image_pull_policy,
        "runtime_class_name": check.overrides.runtime_class_name or "nvidia",
    }


def _watch_pods(
    client: Client, namespace: str, query: Mapping[str, str], version: str, retry: RetryPolicy
) -> AsyncGenerator[dict[str, Any], None]:
    """The events of one watch of the namespace's pods matching ``query``, from ``version``;
    raises `Gone` when ``version`` is too old, aiohttp's errors when the connection fails."""
    limits = aiohttp.ClientTimeout(total=retry.watch_seconds + _WATCH_GRACE_SECONDS)
    watch_query: dict[str, str | int | bool] = {
        **query,
        "resourceVersion": version,
        "timeoutSeconds": retry.watch_seconds,
        "allowWatchBookmarks": True,
    }
    return client.watch(_PODS.path(namespace), watch_query, limits)


async def _delete_stale_pods(client: Client, check: WorkloadCheck, retry: RetryPolicy) -> None:
    """Delete every workload pod of the check on the node and return once all are gone."""
    query = {
        "labelSelector": workload_selector(check.check),
        "fieldSelector": f"spec.nodeName={check.node_name}",
    }
    while True:
        listing = await client.request("GET", _PODS.path(check.namespace), query=query)
        remaining = {pod["metadata"]["name"] for pod in listing["items"]}
        if not remaining:
            return
        _log.info(
            "deleting %d earlier %s workload pod(s): %s",
            len(remaining),
            check.check,
            ", ".join(sorted(remaining)),
        )
        for name in remaining:
            await client.delete(_PODS, name, check.namespace)
        version = listing["metadata"]["resourceVersion"]
        with contextlib.suppress(Gone, aiohttp.ClientError, TimeoutError):
            events = _watch_pods(client, check.namespace, query, version, retry)
            async with contextlib.aclosing(events):
                async for event in events:
                    if event["type"] == "DELETED":
                        remaining.discard(event["object"]["metadata"]["name"])
                        if not remaining:
                            return


async def _run_pods(
    client: Client,
    check: WorkloadCheck,
    retry: RetryPolicy,
    built: WorkloadPod,
    deadline: float,
) -> Passed | Failed:
    """Create the pod and watch it to a verdict, replacing it whenever it disappears first."""
    delay = retry.backoff
    for attempt in range(retry.max_recreations + 1):
        if attempt:
            await asyncio.sleep(max(min(delay, deadline - asyncio.get_running_loop().time()), 0))
            delay = min(delay * 2, retry.max_backoff)
        created = await _create_pod(client, check, built)
        name = created["metadata"]["name"]
        _log.info("created %s workload pod %s on node %s", check.check, name, check.node_name)
        try:
            result = await _await_verdict(client, created, built.containers, retry, deadline)
            if isinstance(result, Failed) and result.container is not None:
                log = await _log_tail(client, check.namespace, name, result)
                result = dataclasses.replace(result, message=f"{result.message}\n{log}")
        finally:
            await client.delete(_PODS, name, check.namespace)
        if result is not None:
            return result
        _log.warning("workload pod %s disappeared before a verdict; replacing it", name)
    return Failed(
        "Disappeared",
        f"{retry.max_recreations + 1} {check.check} workload pods disappeared before a verdict "
        "(deleted, or killed by the node)",
    )


async def _create_pod(client: Client, check: WorkloadCheck, built: WorkloadPod) -> Any:
    """Create the pod. One the apiserver rejects is the overrides' fault if it takes the pod
    without them (`InvalidOverrides`), else the template's (`TemplateError`)."""
    try:
        return await client.create(_PODS, built.pod)
    except (Invalid, BadRequest) as error:
        problem = f"the apiserver rejects the pod: {error.message or error.reason}"
        if await _accepts(client, built.without_overrides):
            raise InvalidOverrides([_blame(error, problem)]) from error
        raise TemplateError(_source(check), problem) from error


async def _accepts(client: Client, pod: dict[str, Any]) -> bool:
    """Whether the apiserver would create ``pod`` (a dry run: nothing is created)."""
    path = _PODS.path(pod["metadata"]["namespace"])
    try:
        await client.request("POST", path, query={"dryRun": "All"}, body=pod)
    except (Invalid, BadRequest):
        return False
    return True


def _blame(error: ApiError, problem: str) -> str:
    """``problem`` prefixed with the overrides fields the apiserver's causes point at."""
    causes = ((error.body or {}).get("details") or {}).get("causes") or []
    fields = sorted({f for c in causes if (f := overrides_field(c.get("field") or ""))})
    return f"{', '.join(fields)}: {problem}" if fields else problem


async def _await_verdict(
    client: Client,
    pod: dict[str, Any],
    containers: frozenset[str],
    retry: RetryPolicy,
    deadline: float,
) -> Passed | Failed | None:
    """The pod's verdict, a timeout failure at ``deadline``, or None if the pod disappeared or
    its node killed it."""
    last = verdict(pod, containers, retry.max_restarts)
    name = pod["metadata"]["name"]
    try:
        async with asyncio.timeout_at(deadline):
            judged = _verdicts(client, pod, containers, retry)
            async with contextlib.aclosing(judged):
                async for last in judged:
                    if isinstance(last, Evicted):
                        _log.warning("node killed workload pod %s: %s", name, last.reason)
                        return None
                    if not isinstance(last, Pending):
                        return last
            return None
    except TimeoutError:
        detail = last.detail if isinstance(last, Pending) else ""
        return Failed("Timeout", f"no verdict on workload pod {name} in time: {detail}")


async def _verdicts(
    client: Client, pod: dict[str, Any], containers: frozenset[str], retry: RetryPolicy
) -> AsyncGenerator[Verdict, None]:
    """Yield the pod's verdict each time it changes; end when the pod is gone."""
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    uid, version = pod["metadata"]["uid"], pod["metadata"]["resourceVersion"]
    query = {"fieldSelector": f"metadata.name={name}"}
    while True:
        try:
            events = _watch_pods(client, namespace, query, version, retry)
            async with contextlib.aclosing(events):
                async for event in events:
                    obj = event["object"]
                    version = obj["metadata"]["resourceVersion"]
                    if event["type"] == "BOOKMARK":
                        continue
                    if event["type"] == "DELETED" or obj["metadata"]["uid"] != uid:
                        return
                    yield verdict(obj, containers, retry.max_restarts)
        except Gone:
            try:
                current = await client.get(_PODS, name, namespace)
            except NotFound:
                return
            if current["metadata"]["uid"] != uid:
                return
            version = current["metadata"]["resourceVersion"]
            yield verdict(current, containers, retry.max_restarts)
        except (aiohttp.ClientError, TimeoutError) as error:
            _log.warning("the watch of pod %s broke (%r); watching again", name, error)
            await asyncio.sleep(1)


async def _log_tail(client: Client, namespace: str, pod: str, failure: Failed) -> str:
    """The last lines of the log of the failure's container (of its previous run if it
    restarted since), or why they cannot be had."""
    assert failure.container is not None
    container = failure.container
    path = _PODS.path(namespace, pod, "log")
    query: dict[str, str | int | bool] = {"container": container, "tailLines": _LOG_LINES}
    if failure.previous:
        query["previous"] = True
    limits = aiohttp.ClientTimeout(total=_LOG_TIMEOUT_SECONDS)
    try:
        async with client.stream(path, query, limits) as response:
            text = (await response.read()).decode(errors="replace")
    except ApiError as error:
        return f"logs of {container} unavailable: {error.status} {error.reason}"
    except (aiohttp.ClientError, TimeoutError) as error:
        return f"logs of {container} unavailable: {error!r}"
    if not text.strip():
        return f"the log of {container} is empty"
    return f"last lines of the log of {container}:\n{text.rstrip()}"


async def _record_event(client: Client, check: WorkloadCheck, result: Passed | Failed) -> None:
    """Record the outcome as an Event on the Node (in namespace ``default``, where Events on
    cluster-scoped objects must be); a refusal is logged, not raised."""
    passed = isinstance(result, Passed)
    message = result.message if isinstance(result, Failed) else f"{check.check} validation passed"
    now = kube_time()
    event = {
        "metadata": {
            "generateName": f"{check.node_name}.gpuctrl-{check.check}-validation.",
            "namespace": _EVENT_NAMESPACE,
        },
        # kubectl describe node finds a Node's events by kind, name and uid == name.
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Node",
            "name": check.node_name,
            "uid": check.node_name,
        },
        "reason": "ValidationPassed" if passed else "ValidationFailed",
        "message": f"{message}"[:_EVENT_MESSAGE_LIMIT],
        "type": "Normal" if passed else "Warning",
        # The Node is the host: the agent's own host name is its pod's name.
        "source": {"component": "gpuctrl-validator", "host": check.node_name},
        "reportingComponent": "gpuctrl-validator",
        "reportingInstance": check.node_name,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        await client.create(EVENTS, event)
    except ApiError as error:
        _log.warning("could not record the outcome as an Event: %s %s", error.status, error.reason)
