"""Startup probes in the simulated pod lifecycle: timed as a kubelet times them, compressed."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from gpuctrl.testing import ContainerBehavior
from gpuctrl.testing._podsim import (
    CREATE_SECONDS,
    PodSim,
    advance,
    new_pod,
    probe_result,
    process_exited,
    process_started,
)
from gpuctrl.testing._podstatus import pod_status
from gpuctrl.testing._probe import MIN_PERIOD_SECONDS, PROBE_TIME_SCALE, Probe

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
# NVIDIA's driver container's startup probe: 60 s, then every 10 s, 120 failures allowed.
DRIVER_PROBE = {
    "exec": {"command": ["sh", "-c", "nvidia-smi"]},
    "initialDelaySeconds": 60,
    "periodSeconds": 10,
    "timeoutSeconds": 60,
    "failureThreshold": 120,
}
SHORT_PROBE = {"exec": {"command": ["true"]}, "initialDelaySeconds": 50, "failureThreshold": 3}


def _pod(probe: dict[str, Any], behavior: ContainerBehavior, *, sidecar: bool = False) -> PodSim:
    main = {"name": "main", "image": "m", "startupProbe": probe}
    inits: list[dict[str, Any]] = []
    if sidecar:
        sidecar_spec = {**main, "name": "proxy", "restartPolicy": "Always"}
        inits = [sidecar_spec, {"name": "setup", "image": "s"}]
        main = {"name": "main", "image": "m"}
    manifest = {
        "metadata": {"name": "p", "uid": "u"},
        "spec": {"restartPolicy": "Always", "initContainers": inits, "containers": [main]},
    }
    behaviors = {"main": behavior, "proxy": behavior, "setup": ContainerBehavior(run_seconds=0.1)}
    return new_pod(manifest, behaviors, host_ip="172.16.0.9", pod_ip="10.128.0.5", now=T0)


def _status(sim: PodSim, seconds: float, name: str = "main") -> dict[str, Any]:
    status = pod_status(advance(sim, T0 + datetime.timedelta(seconds=seconds)))
    every = [*status.get("initContainerStatuses", []), *status["containerStatuses"]]
    return next(c for c in every if c["name"] == name)


def test_probe_timings_are_the_kubelets_compressed() -> None:
    probe = Probe.of({"startupProbe": DRIVER_PROBE}, "startupProbe")
    assert probe is not None
    assert probe.delay == pytest.approx(60 * PROBE_TIME_SCALE)
    assert probe.period == max(10 * PROBE_TIME_SCALE, MIN_PERIOD_SECONDS)
    assert (probe.failure_threshold, probe.timeout) == (120, 60)  # a command's bound is real
    assert probe.command == ("sh", "-c", "nvidia-smi")
    assert Probe.of({"name": "x"}, "startupProbe") is None
    defaults = Probe.of({"readinessProbe": {"tcpSocket": {"port": 80}}}, "readinessProbe")
    assert defaults == Probe(0, MIN_PERIOD_SECONDS, 3, 1, 1, None)


@given(
    delay=st.floats(0, 5),
    period=st.floats(0.1, 3),
    threshold=st.integers(1, 20),
    passes_after=st.floats(0, 100),
)
def test_a_startup_verdict_comes_at_a_probe_and_passes_only_within_the_budget(
    delay: float, period: float, threshold: int, passes_after: float
) -> None:
    probe = Probe(delay, period, threshold, 1, 1, None)
    at, passed = probe.startup_verdict(passes_after)
    tries = round((at - delay) / period)
    assert at == pytest.approx(delay + tries * period)  # on the probe schedule
    assert 0 <= tries < threshold
    last_probe = delay + (threshold - 1) * period
    # A check passing within float noise of the last probe may fall on either side of it.
    assume(abs(passes_after - last_probe) > 1e-9 * max(1.0, last_probe))
    assert passed == (passes_after <= last_probe)
    if passed:  # the first probe at or after the check would pass
        assert at >= passes_after - 1e-9
        assert at - period < max(passes_after, delay)


def test_a_slow_container_is_running_but_neither_started_nor_ready_until_its_probe_passes() -> None:
    sim = _pod(DRIVER_PROBE, ContainerBehavior(never_exits=True, startup_seconds=5))
    probe = Probe.of({"startupProbe": DRIVER_PROBE}, "startupProbe")
    assert probe is not None
    after_running, _ = probe.startup_verdict(5)
    assert after_running == pytest.approx(1.2 + 4 * MIN_PERIOD_SECONDS)  # 1.2, 2.2, ... 5.2 s
    passes_at = CREATE_SECONDS + after_running

    early = _status(sim, passes_at - 0.01)
    assert "running" in early["state"]
    assert (early["started"], early["ready"]) == (False, False)
    pod = pod_status(advance(sim, T0 + datetime.timedelta(seconds=passes_at - 0.01)))
    ready = {c["type"]: c["status"] for c in pod["conditions"]}["Ready"]
    assert ready == "False"
    late = _status(sim, passes_at + 0.01)
    assert (late["started"], late["ready"], late["restartCount"]) == (True, True, 0)


def test_a_container_that_never_passes_is_killed_and_restarted() -> None:
    sim = _pod(SHORT_PROBE, ContainerBehavior(never_exits=True, startup_seconds=10**6))
    killed_at = CREATE_SECONDS + 50 * PROBE_TIME_SCALE + 2 * MIN_PERIOD_SECONDS  # third failure
    before = _status(sim, killed_at - 0.01)
    assert (before["restartCount"], before["started"]) == (0, False)
    after = _status(sim, killed_at + 0.01)
    assert after["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert after["lastState"]["terminated"]["exitCode"] == 137
    restarted = _status(sim, killed_at + 1.0)
    assert (restarted["restartCount"], restarted["started"]) == (1, False)


def test_a_run_that_ends_before_the_probe_passes_ends_with_its_own_exit_code() -> None:
    sim = _pod(DRIVER_PROBE, ContainerBehavior(run_seconds=0.5, exit_code=3, startup_seconds=5))
    status = _status(sim, CREATE_SECONDS + 0.55)
    assert status["lastState"]["terminated"]["exitCode"] == 3


def test_the_init_container_after_a_sidecar_waits_for_the_sidecar_to_start() -> None:
    sim = _pod(DRIVER_PROBE, ContainerBehavior(never_exits=True, startup_seconds=3), sidecar=True)
    started_at = CREATE_SECONDS + 1.2 + 2 * MIN_PERIOD_SECONDS  # the sidecar's third probe
    waiting = _status(sim, started_at - 0.01, "setup")
    assert waiting["state"]["waiting"]["reason"] == "PodInitializing"
    assert "running" in _status(sim, started_at + CREATE_SECONDS + 0.01, "setup")["state"]


def test_a_process_starts_when_its_probe_says_so_and_readiness_counts_only_after() -> None:
    process = ContainerBehavior(process=True)
    manifest = {
        "metadata": {"name": "p", "uid": "u"},
        "spec": {
            "containers": [{"name": "main", "image": "m", "startupProbe": SHORT_PROBE}],
        },
    }
    sim = new_pod(manifest, {"main": process}, host_ip="h", pod_ip="p", now=T0)
    second = T0 + datetime.timedelta(seconds=1)
    running = process_started(sim, "main", second)
    assert (running.containers[0].started, running.containers[0].ready) == (False, False)
    started = probe_result(running, "main", "startup", True, second)
    assert (started.containers[0].started, started.containers[0].ready) == (True, True)
    killed = process_exited(running, "main", 137, second)
    assert killed.containers[0].termination is not None
    assert killed.containers[0].termination.exit_code == 137
