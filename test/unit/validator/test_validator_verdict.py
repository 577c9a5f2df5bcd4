"""The verdict on a workload pod, from its status alone."""

from __future__ import annotations

from typing import Any

import pytest

from gpuctrl.validator import NODE_KILL_REASONS, Evicted, Failed, Passed, Pending, verdict

TEMPLATE = frozenset({"work", "done"})


def _done(name: str, code: int = 0, reason: str | None = None, restarts: int = 0) -> dict[str, Any]:
    terminated: dict[str, Any] = {"exitCode": code}
    if reason:
        terminated["reason"] = reason
    return {"name": name, "state": {"terminated": terminated}, "restartCount": restarts}


def _running(name: str) -> dict[str, Any]:
    return {"name": name, "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}


def _waiting(
    name: str, reason: str, message: str = "", last_code: int | None = None, restarts: int = 0
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "name": name,
        "image": "cuda:bad",
        "state": {"waiting": {"reason": reason, "message": message}},
        "restartCount": restarts,
    }
    if last_code is not None:
        status["lastState"] = {"terminated": {"exitCode": last_code, "reason": "Error"}}
    return status


def _pod(
    init: list[dict[str, Any]],
    main: list[dict[str, Any]],
    phase: str = "Pending",
    restart_policy: str = "Never",
    **status: Any,
) -> dict[str, Any]:
    return {
        "metadata": {"name": "p"},
        "spec": {"restartPolicy": restart_policy},
        "status": {
            "phase": phase,
            "initContainerStatuses": init,
            "containerStatuses": main,
            **status,
        },
    }


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        pytest.param(_pod([], []), Pending, id="no-status-yet"),
        pytest.param(
            _pod([_running("work")], [_waiting("done", "PodInitializing")]), Pending, id="running"
        ),
        pytest.param(_pod([_done("work")], [_done("done")], "Succeeded"), Passed, id="succeeded"),
        pytest.param(
            _pod(
                [_done("istio-init"), _done("work")],
                [_done("done"), _running("istio-proxy")],
                "Running",
            ),
            Passed,
            id="sidecar-never-exits",
        ),
        pytest.param(
            _pod([_done("work")], [_done("done"), _done("linkerd-proxy", 137)], "Failed"),
            Passed,
            id="sidecar-killed",
        ),
        pytest.param(
            _pod([_done("work", 1, "Error")], [_waiting("done", "PodInitializing")], "Failed"),
            Failed,
            id="init-exits-1",
        ),
        pytest.param(
            _pod([_done("work")], [_done("done", 2, "Error"), _running("istio-proxy")], "Running"),
            Failed,
            id="main-exits-2",
        ),
        pytest.param(
            _pod([_done("work", 1, "Error")], [], restart_policy="OnFailure"),
            Pending,
            id="retried-by-restart-policy",
        ),
        pytest.param(
            _pod(
                [_waiting("work", "CrashLoopBackOff", last_code=1, restarts=3)],
                [],
                restart_policy="OnFailure",
            ),
            Pending,
            id="restarts-within-bound",
        ),
        pytest.param(
            _pod(
                [_waiting("work", "CrashLoopBackOff", last_code=1, restarts=4)],
                [],
                restart_policy="OnFailure",
            ),
            Failed,
            id="crash-loop",
        ),
        pytest.param(
            _pod([_waiting("work", "ImagePullBackOff", "Back-off pulling image")], []),
            Failed,
            id="image-pull",
        ),
        pytest.param(
            _pod([_done("work")], [_waiting("istio-proxy", "ImagePullBackOff")]),
            Pending,
            id="sidecar-image-pull-is-not-ours",
        ),
        pytest.param(
            _pod(
                [],
                [],
                "Failed",
                reason="OutOfnvidia.com/gpu",
                message="Node didn't have enough resource",
            ),
            Failed,
            id="rejected-by-kubelet",
        ),
        *(
            pytest.param(
                _pod([_done("work", 137, "Error")], [], "Failed", reason=reason, message="m"),
                Evicted,
                id=f"killed-by-node-{reason}",
            )
            for reason in sorted(NODE_KILL_REASONS)
        ),
        pytest.param(
            _pod(
                [_running("work")],
                [_waiting("done", "PodInitializing")],
                "Failed",
                reason="Evicted",
            ),
            Evicted,
            id="evicted-mid-run",
        ),
        pytest.param(
            _pod([_done("work")], [_done("done")], "Failed", reason="Evicted"),
            Passed,
            id="evicted-after-passing",
        ),
        pytest.param(
            _pod([_done("work")], [], "Running", reason="Evicted"),
            Pending,
            id="eviction-reason-without-failed-phase",
        ),
    ],
)
def test_verdict(pod: dict[str, Any], expected: type) -> None:
    assert isinstance(verdict(pod, TEMPLATE), expected)


def test_failure_names_container_exit_code_and_reason() -> None:
    pod = _pod([_done("work", 1, "Error")], [_waiting("done", "PodInitializing")], "Failed")

    result = verdict(pod, TEMPLATE)

    assert result == Failed("Error", "container work exited with code 1 (Error)", "work")


def test_image_pull_failure_is_reported_as_such() -> None:
    pod = _pod([_waiting("work", "ErrImagePull", "manifest unknown")], [])

    result = verdict(pod, TEMPLATE)

    assert isinstance(result, Failed)
    assert result.reason == "ErrImagePull"
    assert "image cuda:bad cannot be pulled: ErrImagePull: manifest unknown" in result.message


def test_crash_loop_counts_restarts() -> None:
    pod = _pod(
        [_waiting("work", "CrashLoopBackOff", last_code=3, restarts=9)],
        [],
        restart_policy="OnFailure",
    )

    result = verdict(pod, TEMPLATE, max_restarts=3)

    assert isinstance(result, Failed)
    assert result.container == "work"
    assert "exited with code 3" in result.message
    assert "restarted 9 times" in result.message
    assert result.previous, "the failed run is the previous one: its log is at previous=true"


def test_crash_loop_failing_now_quotes_the_current_run() -> None:
    pod = _pod([_done("work", 3, "Error", restarts=9)], [], restart_policy="OnFailure")

    result = verdict(pod, TEMPLATE, max_restarts=3)

    assert isinstance(result, Failed)
    assert result.reason == "CrashLoop"
    assert not result.previous


def test_eviction_carries_the_nodes_reason_and_message() -> None:
    pod = _pod(
        [_done("work", 137, "Error")],
        [],
        "Failed",
        reason="Evicted",
        message="The node was low on resource: memory.",
    )

    assert verdict(pod, TEMPLATE) == Evicted("Evicted", "The node was low on resource: memory.")


def test_a_pod_being_deleted_does_not_fail() -> None:
    pod = _pod([_done("work", 137, "Error")], [], "Failed")
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"

    assert verdict(pod, TEMPLATE) == Pending("the pod is being deleted")


def test_pending_detail_says_what_each_container_waits_for() -> None:
    pod = _pod([_running("work")], [_waiting("done", "PodInitializing")], "Pending")

    result = verdict(pod, TEMPLATE)

    assert result == Pending("phase Pending; done: waiting (PodInitializing); work: running")
