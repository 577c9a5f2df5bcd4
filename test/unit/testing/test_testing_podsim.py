"""The simulated pod lifecycle: a pure state machine stepped through virtual time."""

from __future__ import annotations

import datetime
from collections.abc import Collection
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuctrl.testing import ContainerBehavior
from gpuctrl.testing._podsim import PodSim, advance, new_pod, next_due
from gpuctrl.testing._podstatus import pod_status

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
NEVER_EXITS = ContainerBehavior(never_exits=True)
QUICK = ContainerBehavior(run_seconds=0.1)


def pod(
    restart_policy: str,
    containers: list[str],
    init: list[str] = (),
    sidecars: Collection[str] = (),
    **spec: Any,
) -> dict:
    """A pod manifest; the init containers named in `sidecars` get restartPolicy Always."""
    return {
        "metadata": {"name": "p", "uid": "uid-1"},
        "spec": {
            "restartPolicy": restart_policy,
            "initContainers": [
                {
                    "name": n,
                    "image": f"{n}:1",
                    **({"restartPolicy": "Always"} if n in sidecars else {}),
                }
                for n in init
            ],
            "containers": [{"name": n, "image": f"{n}:1"} for n in containers],
            **spec,
        },
    }


def start(manifest: dict, behaviors: dict[str, ContainerBehavior]) -> PodSim:
    return new_pod(manifest, behaviors, host_ip="172.16.0.9", pod_ip="10.128.0.5", now=T0)


def at(sim: PodSim, seconds: float) -> dict[str, Any]:
    return pod_status(advance(sim, T0 + datetime.timedelta(seconds=seconds)))


def summary(status: dict[str, Any], key: str = "containerStatuses") -> dict[str, str]:
    """Container name -> 'state/reason-or-exit-code/restarts/ready'."""
    result = {}
    for container in status.get(key, []):
        ((state, detail),) = container["state"].items()
        what = detail.get("reason", "") if state != "terminated" else str(detail["exitCode"])
        ready = "ready" if container["ready"] else "unready"
        result[container["name"]] = f"{state}/{what}/{container['restartCount']}/{ready}"
    return result


def conditions(status: dict[str, Any]) -> dict[str, str]:
    return {
        c["type"]: c["status"] + ("/" + c["reason"] if "reason" in c else "")
        for c in status["conditions"]
    }


CASES = [
    pytest.param(
        pod("Always", ["server"]),
        {"server": NEVER_EXITS},
        5.0,
        "Running",
        {"server": "running//0/ready"},
        id="server-runs-forever",
    ),
    pytest.param(
        pod("Never", ["job"]),
        {"job": QUICK},
        1.0,
        "Succeeded",
        {"job": "terminated/0/0/unready"},
        id="never-exit-0-succeeds",
    ),
    pytest.param(
        pod("Never", ["job"]),
        {"job": QUICK.model_copy(update={"exit_code": 1})},
        1.0,
        "Failed",
        {"job": "terminated/1/0/unready"},
        id="never-exit-1-fails",
    ),
    pytest.param(
        pod("OnFailure", ["job"]),
        {"job": QUICK},
        1.0,
        "Succeeded",
        {"job": "terminated/0/0/unready"},
        id="onfailure-exit-0-succeeds",
    ),
    pytest.param(
        # runs 0.05-0.15, backoff 0.2 -> runs 0.35-0.45, backoff 0.4 -> runs 0.85-0.95, ...
        pod("OnFailure", ["job"]),
        {"job": QUICK.model_copy(update={"exit_code": 2})},
        1.0,
        "Running",
        {"job": "waiting/CrashLoopBackOff/2/unready"},
        id="onfailure-exit-2-restarts",
    ),
    pytest.param(
        pod("Always", ["server"]),
        {"server": QUICK},
        0.4,
        "Running",
        {"server": "running//1/ready"},
        id="always-restarts-even-after-exit-0",
    ),
    pytest.param(
        pod("Always", ["server"]),
        {"server": ContainerBehavior(image_pull_fails=True)},
        0.3,
        "Pending",
        {"server": "waiting/ErrImagePull/0/unready"},
        id="pull-fails-first",
    ),
    pytest.param(
        pod("Always", ["server"]),
        {"server": ContainerBehavior(image_pull_fails=True)},
        9.0,
        "Pending",
        {"server": "waiting/ImagePullBackOff/0/unready"},
        id="pull-then-backs-off",
    ),
    pytest.param(
        pod("Never", ["job", "istio-proxy"]),
        {"job": QUICK, "istio-proxy": NEVER_EXITS},
        5.0,
        "Running",
        {"job": "terminated/0/0/unready", "istio-proxy": "running//0/ready"},
        id="mesh-sidecar-keeps-job-running",
    ),
    pytest.param(
        pod("Always", ["server"]),
        {"server": ContainerBehavior(never_exits=True, ready=False)},
        5.0,
        "Running",
        {"server": "running//0/unready"},
        id="running-but-unready",
    ),
]


@pytest.mark.parametrize(("manifest", "behaviors", "seconds", "phase", "containers"), CASES)
def test_lifecycle(manifest, behaviors, seconds, phase, containers):
    status = at(start(manifest, behaviors), seconds)
    assert status["phase"] == phase
    assert summary(status) == containers


def test_init_containers_run_one_after_another_then_the_containers():
    sim = start(
        pod("Always", ["main"], init=["first", "second"]),
        {
            "first": QUICK,
            "second": QUICK,
            "main": NEVER_EXITS,
        },
    )
    steps = [
        (
            0.01,
            {
                "first": "waiting/ContainerCreating/0/unready",
                "second": "waiting/PodInitializing/0/unready",
            },
            "waiting/PodInitializing/0/unready",
        ),
        (
            0.10,
            {"first": "running//0/unready", "second": "waiting/PodInitializing/0/unready"},
            "waiting/PodInitializing/0/unready",
        ),
        (
            0.25,
            {"first": "terminated/0/0/ready", "second": "running//0/unready"},
            "waiting/PodInitializing/0/unready",
        ),
        (
            0.32,
            {"first": "terminated/0/0/ready", "second": "terminated/0/0/ready"},
            "waiting/ContainerCreating/0/unready",
        ),
        (
            0.40,
            {"first": "terminated/0/0/ready", "second": "terminated/0/0/ready"},
            "running//0/ready",
        ),
    ]
    for seconds, inits, main in steps:
        status = at(sim, seconds)
        assert summary(status, "initContainerStatuses") == inits, seconds
        assert summary(status) == {"main": main}, seconds
    status = at(sim, 0.5)
    assert status["phase"] == "Running"
    assert conditions(status) == {
        "Initialized": "True",
        "Ready": "True",
        "ContainersReady": "True",
        "PodScheduled": "True",
    }


def test_pending_pod_reports_why_it_is_not_ready():
    sim = start(pod("Always", ["main"], init=["setup"]), {"setup": QUICK, "main": NEVER_EXITS})
    status = at(sim, 0.0)
    assert status["phase"] == "Pending"
    assert conditions(status) == {
        "Initialized": "False/ContainersNotInitialized",
        "Ready": "False/ContainersNotReady",
        "ContainersReady": "False/ContainersNotReady",
        "PodScheduled": "True",
    }
    assert next(c for c in status["conditions"] if c["type"] == "Initialized")["message"] == (
        "containers with incomplete status: [setup]"
    )


@pytest.mark.parametrize(
    ("policy", "phase", "setup"),
    [
        ("Never", "Failed", "terminated/1/0/unready"),
        ("OnFailure", "Pending", "waiting/CrashLoopBackOff/2/unready"),
        ("Always", "Pending", "waiting/CrashLoopBackOff/2/unready"),
    ],
    ids=["never-fails-pod", "onfailure-retries", "always-retries"],
)
def test_failing_init_container(policy, phase, setup):
    behaviors = {"setup": QUICK.model_copy(update={"exit_code": 1}), "main": NEVER_EXITS}
    status = at(start(pod(policy, ["main"], init=["setup"]), behaviors), 1.0)
    assert status["phase"] == phase
    assert summary(status, "initContainerStatuses") == {"setup": setup}
    assert summary(status) == {"main": "waiting/PodInitializing/0/unready"}


def test_terminated_status_carries_times_exit_code_and_last_state():
    behaviors = {"job": ContainerBehavior(run_seconds=2, exit_code=7)}
    status = at(start(pod("OnFailure", ["job"]), behaviors), 2.1)  # ran 0.05 s to 2.05 s
    container = status["containerStatuses"][0]
    assert container["state"]["waiting"] == {
        "reason": "CrashLoopBackOff",
        "message": "back-off 0.2s restarting failed container=job",
    }
    last = container["lastState"]["terminated"]
    assert last["exitCode"] == 7
    assert last["reason"] == "Error"
    assert last["startedAt"] == "2026-01-01T00:00:00Z"
    assert last["finishedAt"] == "2026-01-01T00:00:02Z"
    assert container["containerID"].startswith("containerd://")
    assert container["imageID"].startswith("job@sha256:")
    assert status["podIP"] == "10.128.0.5"
    assert status["hostIP"] == "172.16.0.9"


def test_host_network_pod_gets_the_node_address():
    status = at(start(pod("Always", ["agent"], hostNetwork=True), {"agent": NEVER_EXITS}), 1.0)
    assert status["podIP"] == status["hostIP"] == "172.16.0.9"


@pytest.mark.parametrize("step", [0.01, 0.07, 0.3], ids=["10ms", "70ms", "300ms"])
def test_history_does_not_depend_on_how_often_the_kubelet_looks(step):
    behaviors = {"setup": QUICK, "job": ContainerBehavior(run_seconds=0.3, exit_code=1)}
    sim = start(pod("OnFailure", ["job"], init=["setup"]), behaviors)
    stepped, seconds = sim, 0.0
    while seconds < 3.0:
        seconds += step
        stepped = advance(stepped, T0 + datetime.timedelta(seconds=seconds))
    assert pod_status(stepped) == at(sim, seconds)


def test_nothing_is_due_once_the_pod_is_finished_or_stuck():
    finished = advance(
        start(pod("Never", ["job"]), {"job": QUICK}), T0 + datetime.timedelta(seconds=5)
    )
    assert next_due(finished) is None
    serving = advance(
        start(pod("Always", ["s"]), {"s": NEVER_EXITS}), T0 + datetime.timedelta(seconds=5)
    )
    assert next_due(serving) is None
    creating = start(pod("Always", ["s"]), {"s": NEVER_EXITS})
    assert next_due(creating) == T0 + datetime.timedelta(seconds=0.05)


# Native sidecars (Kubernetes 1.29+): init containers with restartPolicy Always.
def meshed(policy: str, init: list[str] = ("proxy",)) -> dict:
    """A pod with the init containers `init`, of which ``proxy`` is a sidecar, and the one
    container ``job``."""
    return pod(policy, ["job"], init=list(init), sidecars={"proxy"})


SIDECAR_CASES = [
    pytest.param(
        meshed("Never"),
        {"proxy": NEVER_EXITS, "job": QUICK},
        1.0,
        "Succeeded",
        {"proxy": "terminated/0/0/unready"},
        {"job": "terminated/0/0/unready"},
        id="never-pod-succeeds-and-stops-its-never-exiting-sidecar",
    ),
    pytest.param(
        meshed("Never"),
        {"proxy": NEVER_EXITS, "job": QUICK.model_copy(update={"exit_code": 1})},
        1.0,
        "Failed",
        {"proxy": "terminated/0/0/unready"},
        {"job": "terminated/1/0/unready"},
        id="never-pod-fails-and-stops-its-sidecar",
    ),
    pytest.param(
        meshed("OnFailure"),
        {"proxy": NEVER_EXITS, "job": QUICK},
        1.0,
        "Succeeded",
        {"proxy": "terminated/0/0/unready"},
        {"job": "terminated/0/0/unready"},
        id="onfailure-pod-succeeds",
    ),
    pytest.param(
        meshed("Always"),
        {"proxy": NEVER_EXITS, "job": NEVER_EXITS},
        5.0,
        "Running",
        {"proxy": "running//0/ready"},
        {"job": "running//0/ready"},
        id="always-pod-keeps-its-sidecar-running",
    ),
    pytest.param(
        # proxy runs 0.05-0.15, backoff 0.2 -> runs 0.35-0.45, backoff 0.4 -> 0.85-0.95, ...
        meshed("Never"),
        {"proxy": QUICK, "job": ContainerBehavior(run_seconds=2)},
        1.0,
        "Running",
        {"proxy": "waiting/CrashLoopBackOff/2/unready"},
        {"job": "running//0/ready"},
        id="sidecar-restarts-after-exit-0-even-in-a-never-pod",
    ),
    pytest.param(
        meshed("Always"),
        {"proxy": ContainerBehavior(image_pull_fails=True), "job": NEVER_EXITS},
        9.0,
        "Pending",
        {"proxy": "waiting/ImagePullBackOff/0/unready"},
        {"job": "waiting/PodInitializing/0/unready"},
        id="unpullable-sidecar-holds-the-containers",
    ),
    pytest.param(
        meshed("Never", init=["proxy", "setup"]),
        {
            "proxy": NEVER_EXITS,
            "setup": QUICK.model_copy(update={"exit_code": 1}),
            "job": QUICK,
        },
        1.0,
        "Failed",
        {"proxy": "terminated/0/0/unready", "setup": "terminated/1/0/unready"},
        {"job": "waiting/PodInitializing/0/unready"},
        id="failed-init-container-fails-the-pod-and-stops-its-sidecar",
    ),
]


@pytest.mark.parametrize(
    ("manifest", "behaviors", "seconds", "phase", "inits", "containers"), SIDECAR_CASES
)
def test_sidecar_lifecycle(manifest, behaviors, seconds, phase, inits, containers):
    status = at(start(manifest, behaviors), seconds)
    assert status["phase"] == phase
    assert summary(status, "initContainerStatuses") == inits
    assert summary(status) == containers


def test_the_next_init_container_starts_once_the_sidecar_runs_and_it_runs_beside_them():
    # istio-init 0-0.15; proxy created 0.15-0.20, then runs; setup 0.20-0.35; job 0.35-0.50.
    sim = start(
        pod("Never", ["job"], init=["istio-init", "proxy", "setup"], sidecars={"proxy"}),
        {"istio-init": QUICK, "proxy": NEVER_EXITS, "setup": QUICK, "job": QUICK},
    )
    done = "terminated/0/0/ready"
    steps = [
        (
            0.17,
            "Pending",
            [done, "waiting/ContainerCreating/0/unready", "waiting/PodInitializing/0/unready"],
            "waiting/PodInitializing/0/unready",
            "containers with incomplete status: [proxy setup]",
        ),
        (
            0.22,
            "Pending",
            [done, "running//0/ready", "waiting/ContainerCreating/0/unready"],
            "waiting/PodInitializing/0/unready",
            "containers with incomplete status: [setup]",
        ),
        (
            0.45,
            "Running",
            [done, "running//0/ready", done],
            "running//0/ready",
            None,
        ),
        (
            0.60,
            "Succeeded",
            [done, "terminated/0/0/unready", done],
            "terminated/0/0/unready",
            None,
        ),
    ]
    for seconds, phase, inits, job, uninitialized in steps:
        status = at(sim, seconds)
        assert status["phase"] == phase, seconds
        assert list(summary(status, "initContainerStatuses").values()) == inits, seconds
        assert summary(status) == {"job": job}, seconds
        initialized = next(c for c in status["conditions"] if c["type"] == "Initialized")
        assert initialized.get("message") == uninitialized, seconds
    proxy = at(sim, 0.3)["initContainerStatuses"][1]
    assert (proxy["started"], proxy["ready"]) == (True, True)
    stopped = at(sim, 0.6)["initContainerStatuses"][1]
    assert stopped["started"] is False
    assert stopped["state"]["terminated"]["reason"] == "Completed"


@pytest.mark.parametrize(
    ("behaviors", "seconds", "ready"),
    [
        pytest.param(
            {"proxy": ContainerBehavior(never_exits=True, ready=False), "job": NEVER_EXITS},
            1.0,
            "containers with unready status: [proxy]",
            id="unready-sidecar",
        ),
        pytest.param(
            {
                "proxy": ContainerBehavior(never_exits=True, ready=False),
                "job": ContainerBehavior(never_exits=True, ready=False),
            },
            1.0,
            "containers with unready status: [proxy job]",
            id="sidecars-listed-first",
        ),
        pytest.param(
            # proxy runs 0.05-1.05, then waits in CrashLoopBackOff until 1.25
            {"proxy": ContainerBehavior(run_seconds=1, exit_code=1), "job": NEVER_EXITS},
            1.1,
            "containers with unready status: [proxy]",
            id="restarting-sidecar",
        ),
        pytest.param(
            {"proxy": ContainerBehavior(run_seconds=1, exit_code=1), "job": NEVER_EXITS},
            1.3,
            None,
            id="restarted-sidecar",
        ),
    ],
)
def test_pod_ready_counts_sidecars_and_initialized_stays_once_containers_ran(
    behaviors, seconds, ready
):
    status = at(start(meshed("Always"), behaviors), seconds)

    assert status["phase"] == "Running"
    by_type = {c["type"]: c for c in status["conditions"]}
    assert by_type["Initialized"]["status"] == "True"
    assert by_type["Ready"].get("message") == ready
    assert by_type["Ready"]["status"] == ("True" if ready is None else "False")


sidecar_behaviors = st.builds(
    ContainerBehavior,
    exit_code=st.integers(0, 3),
    run_seconds=st.floats(0, 1.5),
    never_exits=st.booleans(),
    ready=st.booleans(),
)


@given(
    policy=st.sampled_from(["Never", "OnFailure", "Always"]),
    sidecar=sidecar_behaviors,
    setup=st.builds(ContainerBehavior, exit_code=st.integers(0, 1), run_seconds=st.floats(0, 1)),
    job=st.builds(
        ContainerBehavior,
        exit_code=st.integers(0, 1),
        run_seconds=st.floats(0, 1),
        never_exits=st.booleans(),
    ),
    seconds=st.floats(0, 6),
)
def test_phase_and_the_other_containers_never_depend_on_what_a_sidecar_does(
    policy, sidecar, setup, job, seconds
):
    manifest = meshed(policy, init=["proxy", "setup"])
    status = at(start(manifest, {"proxy": sidecar, "setup": setup, "job": job}), seconds)
    reference = at(start(manifest, {"proxy": NEVER_EXITS, "setup": setup, "job": job}), seconds)

    assert status["phase"] == reference["phase"]
    assert status["containerStatuses"] == reference["containerStatuses"]
    assert status["initContainerStatuses"][1] == reference["initContainerStatuses"][1]
    if status["phase"] in ("Succeeded", "Failed"):
        assert "running" not in status["initContainerStatuses"][0]["state"]
