"""The policy's ``Ready`` and state from its parts' conditions and the ready-node count (pure):
never ``ready`` beside fewer ready nodes, and no Warning for parts merely not counted yet."""

from __future__ import annotations

from typing import Any

import pytest

from api.v1alpha1 import load_cluster_policy
from controllers._honoured import Policy
from controllers.policy import CONDITIONS, verdict


def policy(generation: int = 2, **overrides: tuple[str, str, int]) -> Policy:
    """A valid policy whose every part is True at ``generation`` but those overridden with
    (status, reason, generation)."""
    found = []
    for kind in CONDITIONS:
        status, reason, seen = overrides.get(kind, ("True", "Reconciled", generation))
        found.append({"type": kind, "status": status, "reason": reason, "message": kind})
        found[-1]["observedGeneration"] = seen
    obj: dict[str, Any] = {
        "metadata": {"name": "p", "generation": generation},
        "status": {"conditions": found},
    }
    return Policy(obj, load_cluster_policy({"spec": {}}))


def test_every_part_ready_on_every_node_is_ready() -> None:
    entry, state, quiet = verdict(policy(), "4/4")
    assert (entry["status"], entry["reason"], state, quiet) == (
        "True",
        "Reconciled",
        "ready",
        False,
    )


def test_fewer_ready_nodes_is_never_ready() -> None:
    entry, state, quiet = verdict(policy(), "3/4")
    assert (entry["status"], state) == ("False", "notReady")
    assert entry["message"] == "3/4 GPU nodes run a Ready pod of every operand"
    assert quiet, "the DaemonSets' counts will follow: no Warning"


@pytest.mark.parametrize(
    ("overrides", "quiet"),
    [
        pytest.param({"ToolkitReady": ("False", "DaemonSetPending", 2)}, True, id="pending"),
        pytest.param({"DriverReady": ("True", "Reconciled", 1)}, True, id="older-generation"),
        pytest.param({"DriverReady": ("False", "OperandNotReady", 2)}, False, id="not-ready"),
        pytest.param(
            {
                "DriverReady": ("False", "OperandNotReady", 2),
                "ToolkitReady": ("False", "DaemonSetPending", 2),
            },
            False,
            id="not-ready-and-pending",
        ),
        # a part still False from an older generation is waited for, not reported
        pytest.param({"DriverReady": ("False", "InvalidSpec", 1)}, True, id="stale-false"),
    ],
)
def test_parts_not_ready_make_it_not_ready_warning_only_for_problems(
    overrides: dict[str, tuple[str, str, int]], quiet: bool
) -> None:
    entry, state, silent = verdict(policy(**overrides), "4/4")
    assert (entry["status"], state, silent) == ("False", "notReady", quiet)
    assert entry["reason"] != "InvalidSpec"
