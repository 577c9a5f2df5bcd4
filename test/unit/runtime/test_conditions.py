"""set_condition: one entry per type, lastTransitionTime moves only with the status."""

from __future__ import annotations

from typing import Any

import pytest

from gpuctrl.runtime import set_condition

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z"


def cond(status: str, reason: str = "R", at: str | None = None) -> dict[str, Any]:
    found = {"type": "Ready", "status": status, "reason": reason}
    if at is not None:
        found["lastTransitionTime"] = at
    return found


@pytest.mark.parametrize(
    ("before", "new", "expected_time"),
    [
        pytest.param([], cond("True"), T1, id="new-type-stamped-now"),
        pytest.param([cond("True", at=T0)], cond("True", "Other"), T0, id="same-status-kept"),
        pytest.param([cond("True", at=T0)], cond("False"), T1, id="status-change-stamped"),
        pytest.param([cond("True")], cond("True"), T1, id="missing-time-stamped"),
    ],
)
def test_transition_time(
    before: list[dict[str, Any]], new: dict[str, Any], expected_time: str
) -> None:
    after = set_condition(before, new, T1)
    assert [c["lastTransitionTime"] for c in after] == [expected_time]
    assert after[0]["reason"] == new["reason"]


def test_other_types_untouched_and_input_unchanged() -> None:
    other = {"type": "DriverReady", "status": "False", "lastTransitionTime": T0}
    before = [other, cond("True", at=T0)]
    after = set_condition(before, cond("False"), T1)
    assert after[0] == other
    assert before[1]["status"] == "True"
    assert [c["type"] for c in after] == ["DriverReady", "Ready"]
