"""Container logs of simulated pods as a kubelet serves them (the pure part)."""

from __future__ import annotations

import datetime

import pytest

from gpuctrl.testing import ContainerBehavior
from gpuctrl.testing._logs import LogUnavailable, container_log
from gpuctrl.testing._podsim import PodSim, advance, new_pod

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
LOG = "one\ntwo\nthree"
MANIFEST = {
    "metadata": {"name": "p", "uid": "uid-1"},
    "spec": {
        "restartPolicy": "OnFailure",
        "containers": [{"name": "main", "image": "main:1"}, {"name": "pull", "image": "bad:1"}],
    },
}


def _sim(seconds: float) -> PodSim:
    behaviors = {
        "main": ContainerBehavior(exit_code=1, run_seconds=0.1, log=LOG),
        "pull": ContainerBehavior(image_pull_fails=True),
    }
    sim = new_pod(MANIFEST, behaviors, host_ip="172.16.0.9", pod_ip="10.128.0.5", now=T0)
    return advance(sim, T0 + datetime.timedelta(seconds=seconds))


@pytest.mark.parametrize(
    ("seconds", "previous", "tail", "expected"),
    [
        pytest.param(0.1, False, None, "one\ntwo\nthree\n", id="whole-log-newline-ended"),
        pytest.param(0.1, False, 2, "two\nthree\n", id="tail"),
        pytest.param(0.1, False, 0, "", id="tail-zero"),
        pytest.param(0.1, False, 10, "one\ntwo\nthree\n", id="tail-longer-than-log"),
        pytest.param(1.0, True, 1, "three\n", id="previous-run-after-restart"),
    ],
)
def test_container_log(seconds: float, previous: bool, tail: int | None, expected: str) -> None:
    log = container_log(_sim(seconds), "p", "main", previous=previous, tail_lines=tail)

    assert log == expected


@pytest.mark.parametrize(
    ("container", "previous", "complaint"),
    [
        pytest.param("main", True, 'previous terminated container "main" in pod "p" not found'),
        pytest.param("pull", False, 'container "pull" in pod "p" is waiting to start'),
        pytest.param("nope", False, 'container "nope" in pod "p" is not available'),
    ],
    ids=["no-previous-run", "never-started", "unknown-container"],
)
def test_unavailable_log_says_why(container: str, previous: bool, complaint: str) -> None:
    with pytest.raises(LogUnavailable, match=complaint):
        container_log(_sim(0.1), "p", container, previous=previous, tail_lines=None)
