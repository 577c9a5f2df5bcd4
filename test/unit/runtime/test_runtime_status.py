"""Conditions keep their transition time unless their status changes."""

from datetime import UTC, datetime
from typing import Any

import pytest

from gpuctrl.runtime import set_condition

T0 = datetime(2026, 1, 1, tzinfo=UTC)
T1 = datetime(2026, 1, 2, tzinfo=UTC)
READY = {
    "type": "Ready",
    "status": "True",
    "reason": "Reconciled",
    "message": "",
    "observedGeneration": 1,
    "lastTransitionTime": "2026-01-01T00:00:00Z",
}


@pytest.mark.parametrize(
    ("change", "changed", "transition", "status"),
    [
        ({}, False, "2026-01-01T00:00:00Z", "True"),
        ({"message": "all good"}, True, "2026-01-01T00:00:00Z", "True"),
        ({"observed_generation": 2}, True, "2026-01-01T00:00:00Z", "True"),
        ({"status": False, "reason": "NotReady"}, True, "2026-01-02T00:00:00Z", "False"),
        ({"status": "Unknown"}, True, "2026-01-02T00:00:00Z", "Unknown"),
    ],
    ids=["same", "message", "generation", "status-false", "status-unknown"],
)
def test_set_condition_moves_the_transition_time_only_on_a_status_change(
    change: dict[str, Any], changed: bool, transition: str, status: str
) -> None:
    conditions = [dict(READY), {"type": "Error", "status": "False", "reason": "None"}]
    wanted: dict[str, Any] = {
        "type": "Ready",
        "status": "True",
        "reason": "Reconciled",
        "observed_generation": 1,
    }
    assert set_condition(conditions, **{**wanted, **change}, now=T1) is changed
    ready = conditions[0]
    assert ready["lastTransitionTime"] == transition
    assert ready["status"] == status
    assert conditions[1] == {"type": "Error", "status": "False", "reason": "None"}


def test_set_condition_adds_a_new_condition_and_keeps_the_generation() -> None:
    conditions: list[dict[str, Any]] = []
    assert set_condition(conditions, type="Ready", status=True, reason="R", now=T0)
    assert conditions == [
        {
            "type": "Ready",
            "status": "True",
            "reason": "R",
            "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ]
    set_condition(conditions, type="Ready", status=True, reason="R", observed_generation=3)
    assert not set_condition(conditions, type="Ready", status=True, reason="R", now=T1)
    assert conditions[0]["observedGeneration"] == 3
