"""Choosing what a simulated container does: annotation, then rules, then defaults."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuctrl.testing import BEHAVIOR_ANNOTATION, BehaviorError, ContainerBehavior
from gpuctrl.testing._behavior import BehaviorRules


def pod(restart_policy: str = "Always", annotation: Any = None, labels: dict | None = None) -> dict:
    annotations = {} if annotation is None else {BEHAVIOR_ANNOTATION: annotation}
    return {
        "metadata": {"name": "p", "labels": labels or {}, "annotations": annotations},
        "spec": {
            "restartPolicy": restart_policy,
            "initContainers": [{"name": "setup"}],
            "containers": [{"name": "cuda"}, {"name": "istio-proxy"}],
        },
    }


@pytest.mark.parametrize(
    ("restart_policy", "main_never_exits"),
    [("Always", True), ("OnFailure", False), ("Never", False)],
    ids=["always-serves", "onfailure-completes", "never-completes"],
)
def test_defaults(restart_policy, main_never_exits):
    behaviors = BehaviorRules().for_pod(pod(restart_policy))
    assert behaviors["cuda"].never_exits is main_never_exits
    assert behaviors["setup"] == ContainerBehavior()  # init containers always complete
    assert behaviors["cuda"].exit_code == 0


def test_annotation_wins_over_rules_and_rules_over_defaults():
    rules = BehaviorRules()
    rules.add(ContainerBehavior(exit_code=5), None, "cuda")
    rules.add(ContainerBehavior(exit_code=6), lambda p: p["metadata"]["labels"] == {"x": "y"}, None)
    annotation = json.dumps({"istio-proxy": {"neverExits": True}})
    behaviors = rules.for_pod(pod("Never", annotation, labels={"x": "y"}))
    assert behaviors["istio-proxy"] == ContainerBehavior(never_exits=True)
    assert behaviors["cuda"].exit_code == 6  # the later rule
    assert behaviors["setup"].exit_code == 6
    assert rules.for_pod(pod("Never"))["cuda"].exit_code == 5


def test_annotation_fields_are_camel_case():
    annotation = json.dumps(
        {"cuda": {"exitCode": 3, "runSeconds": 1.5, "imagePullFails": True, "ready": False}}
    )
    assert BehaviorRules().for_pod(pod(annotation=annotation))["cuda"] == ContainerBehavior(
        exit_code=3, run_seconds=1.5, image_pull_fails=True, ready=False
    )


@pytest.mark.parametrize(
    ("annotation", "message"),
    [
        ("{not json", "is not JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"cudaa": {}}', "names containers not in the pod: cudaa (the pod has: cuda, istio"),
        ('{"cuda": {"exitcode": 1}}', "exitcode"),
        ('{"cuda": {"exitCode": 300}}', "exitCode"),
        ('{"cuda": {"runSeconds": -1}}', "runSeconds"),
    ],
    ids=[
        "not-json",
        "not-object",
        "unknown-container",
        "unknown-field",
        "exit-code-range",
        "negative",
    ],
)
def test_bad_annotation_says_what_is_wrong(annotation, message):
    with pytest.raises(BehaviorError, match=r"testing\.gpuctrl\.io/behavior") as error:
        BehaviorRules().for_pod(pod(annotation=annotation))
    assert message in str(error.value)
