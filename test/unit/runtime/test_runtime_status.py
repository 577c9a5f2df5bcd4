"""Conditions keep their transition time unless their status changes; a status patch is the
read-modify-write it stands for."""

import copy
from datetime import UTC, datetime
from typing import Any

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuctrl.runtime import set_condition
from gpuctrl.runtime._status import _patch

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


# StatusWriter's patch: applied to the object it was computed from it gives what a
# read-modify-write would; applied to the object as another writer left it meanwhile (other
# entries changed), it keeps that writer's entries, or refuses (a failed test) when it cannot.

_TYPES = st.sampled_from(["A", "B", "C", "D"])
_ENTRY = st.fixed_dictionaries(
    {
        "status": st.sampled_from(["True", "False"]),
        "reason": st.sampled_from(["R1", "R2"]),
        "message": st.text(max_size=5),
    }
)
_FIELDS = st.dictionaries(st.sampled_from(["state", "ready/nodes", "x~y"]), st.text(max_size=3))


def _stored(types: list[str], entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {**entry, "type": t, "lastTransitionTime": "2026-01-01T00:00:00Z"}
        for t, entry in zip(types, entries, strict=False)
    ]


@given(
    have=st.lists(_TYPES, unique=True),
    entries=st.lists(_ENTRY, min_size=4, max_size=4),
    wanted=st.lists(st.tuples(_TYPES, _ENTRY), unique_by=lambda w: w[0], max_size=2),
    fields=_FIELDS,
    other=st.tuples(_TYPES, _ENTRY),
    no_status=st.booleans(),
)
@settings(max_examples=300)
def test_status_patch_is_the_read_modify_write_and_keeps_other_writers_entries(
    have: list[str],
    entries: list[dict[str, Any]],
    wanted: list[tuple[str, dict[str, Any]]],
    fields: dict[str, str],
    other: tuple[str, dict[str, Any]],
    no_status: bool,
) -> None:
    obj: dict[str, Any] = {"metadata": {"name": "o", "resourceVersion": "1"}}
    if not no_status:
        obj["status"] = {"conditions": _stored(have, entries), "state": "old"}
    conditions = [{"type": t, **entry} for t, entry in wanted]
    ops = _patch(obj, conditions, fields, T1)

    expected = copy.deepcopy(obj.get("status") or {})
    for entry in conditions:
        set_condition(expected.setdefault("conditions", []), now=T1, **_arguments(entry))
    expected.update(fields)
    if not ops:
        assert expected == (obj.get("status") or {})
        return
    assert jsonpatch.apply_patch(obj, ops)["status"] == expected

    if no_status or other[0] in {t for t, _ in wanted}:
        return
    # Another writer changed (or added) its own entry and the resourceVersion meanwhile.
    moved = copy.deepcopy(obj)
    moved["metadata"]["resourceVersion"] = "2"
    set_condition(
        moved["status"]["conditions"], now=T0, **_arguments({"type": other[0], **other[1]})
    )
    try:
        result = jsonpatch.apply_patch(moved, ops)
    except jsonpatch.JsonPatchTestFailed:
        assert ops[0]["path"] == "/metadata/resourceVersion"  # only a compare-and-swap refuses
        return
    theirs = next(c for c in moved["status"]["conditions"] if c["type"] == other[0])
    assert theirs in result["status"]["conditions"]
    for entry in conditions:
        [ours] = [c for c in result["status"]["conditions"] if c["type"] == entry["type"]]
        assert (ours["status"], ours["reason"]) == (entry["status"], entry["reason"])


def _arguments(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: entry[k] for k in ("type", "status", "reason", "message")}
