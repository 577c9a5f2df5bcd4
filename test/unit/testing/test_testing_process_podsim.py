"""The lifecycle of process-backed containers: no timers, only what the process does."""

from __future__ import annotations

import datetime

from gpuctrl.testing import ContainerBehavior
from gpuctrl.testing._logs import container_log
from gpuctrl.testing._podsim import (
    PodSim,
    advance,
    new_pod,
    next_due,
    pod_phase,
    probe_result,
    process_exited,
    process_failed,
    process_started,
    rebooted,
)
from gpuctrl.testing._podstatus import pod_status

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
PROCESS = ContainerBehavior(process=True)


def _seconds(value: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=value)


def _pod(policy: str = "Always", init: bool = False) -> PodSim:
    spec = {
        "restartPolicy": policy,
        "initContainers": [{"name": "setup", "image": "s"}] if init else [],
        "containers": [{"name": "main", "image": "m"}],
    }
    manifest = {"metadata": {"name": "p", "uid": "u"}, "spec": spec}
    behaviors = {"setup": PROCESS, "main": PROCESS}
    return new_pod(manifest, behaviors, host_ip="172.16.0.9", pod_ip="10.128.0.5", now=T0)


def _state(sim: PodSim, name: str = "main") -> tuple[str, int, bool]:
    container = next(c for c in sim.containers if c.name == name)
    return container.state, container.restart_count, container.ready


def test_a_process_container_waits_in_creating_until_its_process_starts() -> None:
    sim = _pod()

    assert next_due(sim) is None  # no timer moves it: the kubelet starts the process
    assert _state(advance(sim, _seconds(60))) == ("creating", 0, False)
    running = process_started(sim, "main", _seconds(1))
    assert _state(running) == ("running", 0, True)
    assert pod_phase(running) == "Running"
    assert next_due(running) is None  # it runs until the process exits


def test_an_exit_is_the_containers_and_always_restarts_through_creating() -> None:
    running = process_started(_pod(), "main", _seconds(1))

    exited = process_exited(running, "main", 3, _seconds(2))
    status = pod_status(exited)["containerStatuses"][0]
    assert status["state"]["terminated"]["exitCode"] == 3
    assert status["state"]["terminated"]["reason"] == "Error"
    due = next_due(exited)
    assert due is not None
    backing_off = advance(exited, due)
    assert _state(backing_off)[0] == "crash-backoff"
    again = advance(backing_off, _seconds(60))
    assert _state(again) == ("creating", 1, False)  # the kubelet starts run 1


def test_never_restarting_pod_ends_with_the_exit_code() -> None:
    running = process_started(_pod("Never"), "main", _seconds(1))

    assert pod_phase(process_exited(running, "main", 0, _seconds(2))) == "Succeeded"
    assert pod_phase(process_exited(running, "main", 1, _seconds(2))) == "Failed"


def test_an_init_process_that_exits_0_lets_the_main_container_start() -> None:
    sim = process_started(_pod(init=True), "setup", _seconds(1))
    assert _state(sim, "main")[0] == "pending"

    done = process_exited(sim, "setup", 0, _seconds(2))

    assert _state(done, "main")[0] == "creating"


def test_a_probed_process_is_ready_only_once_its_probe_passes() -> None:
    running = process_started(_pod(), "main", _seconds(1), probed=True)
    assert _state(running)[2] is False

    ready = probe_result(running, "main", "readiness", True, _seconds(2))
    assert _state(ready)[2] is True
    assert pod_status(ready)["conditions"][1] == {
        "type": "Ready",
        "status": "True",
        "lastProbeTime": None,
        "lastTransitionTime": "2026-01-01T00:00:02Z",
    }
    assert _state(probe_result(ready, "main", "readiness", False, _seconds(3)))[2] is False


def test_a_process_that_cannot_start_is_a_config_error() -> None:
    failed = process_failed(_pod(), "main", 'configmap "x" not found', _seconds(1))

    waiting = pod_status(failed)["containerStatuses"][0]["state"]["waiting"]
    assert waiting == {"reason": "CreateContainerConfigError", "message": 'configmap "x" not found'}
    assert next_due(failed) == _seconds(2)  # tried again, as a kubelet does
    assert _state(advance(failed, _seconds(2))) == ("creating", 0, False)


def test_after_a_reboot_every_started_container_counts_one_more_run() -> None:
    before = process_started(
        process_exited(
            process_started(_pod(init=True), "setup", _seconds(1)), "setup", 0, _seconds(2)
        ),
        "main",
        _seconds(3),
    )

    after = rebooted(before, _pod(init=True))

    assert _state(after, "setup") == ("creating", 1, False)  # init containers run again
    assert _state(after, "main") == ("pending", 1, False)


def test_the_log_of_a_process_container_is_its_runs_output() -> None:
    runs = {0: "first run\n", 1: "second run\n"}
    first = process_started(_pod(), "main", _seconds(1))
    second = process_started(
        advance(process_exited(first, "main", 1, _seconds(2)), _seconds(60)), "main", _seconds(61)
    )

    def read(sim: PodSim, container: str, run: int) -> str:
        assert (sim.uid, container) == ("u", "main")
        return runs[run]

    assert (
        container_log(second, "p", "main", previous=False, tail_lines=None, process_log=read)
        == "second run\n"
    )
    assert (
        container_log(second, "p", "main", previous=True, tail_lines=None, process_log=read)
        == "first run\n"
    )


def test_a_process_sidecar_lets_the_next_start_and_runs_on_after_the_pod_until_it_exits() -> None:
    spec = {
        "restartPolicy": "Never",
        "initContainers": [{"name": "proxy", "image": "p", "restartPolicy": "Always"}],
        "containers": [{"name": "main", "image": "m"}],
    }
    manifest = {"metadata": {"name": "p", "uid": "u"}, "spec": spec}
    behaviors = {"proxy": PROCESS, "main": PROCESS}
    sim = new_pod(manifest, behaviors, host_ip="172.16.0.9", pod_ip="10.128.0.5", now=T0)

    sim = process_started(sim, "proxy", _seconds(1))
    assert _state(sim, "main")[0] == "creating"
    done = process_exited(process_started(sim, "main", _seconds(2)), "main", 0, _seconds(3))

    assert pod_phase(done) == "Succeeded"
    assert _state(done, "proxy") == ("running", 0, True)  # the kubelet SIGTERMs its process
    stopped = process_exited(done, "proxy", 143, _seconds(4))
    status = pod_status(stopped)["initContainerStatuses"][0]
    assert status["state"]["terminated"]["exitCode"] == 143
    assert next_due(stopped) is None
