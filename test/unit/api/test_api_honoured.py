"""`honoured_policy`: only the oldest ClusterPolicy is honoured, ties broken by name."""

from datetime import UTC, datetime

import pytest

from api.v1alpha1 import ClusterPolicy, honoured_policy


def _policy(name: str, created: str | datetime | None) -> ClusterPolicy:
    metadata: dict[str, object] = {"name": name}
    if created is not None:
        metadata["creationTimestamp"] = created
    return ClusterPolicy(metadata=metadata)


@pytest.mark.parametrize(
    ("policies", "expected"),
    [
        pytest.param([], None, id="none"),
        pytest.param([("only", "2024-05-01T10:00:00Z")], "only", id="one"),
        pytest.param(
            [("new", "2024-05-02T10:00:00Z"), ("old", "2024-05-01T10:00:00Z")],
            "old",
            id="oldest-wins-whatever-the-order",
        ),
        pytest.param(
            [("a-new", "2024-05-01T10:00:01Z"), ("z-old", "2024-05-01T10:00:00Z")],
            "z-old",
            id="time-before-name",
        ),
        pytest.param(
            [("b", "2024-05-01T10:00:00Z"), ("a", "2024-05-01T10:00:00Z")],
            "a",
            id="tie-broken-by-name",
        ),
        pytest.param(
            [("unsaved", None), ("stored", "2030-01-01T00:00:00Z")],
            "stored",
            id="no-timestamp-counts-as-newest",
        ),
        pytest.param(
            [("y", None), ("x", None)],
            "x",
            id="no-timestamps-by-name",
        ),
        pytest.param(
            [
                ("text", "2024-05-01T10:00:00Z"),
                ("parsed", datetime(2024, 4, 30, tzinfo=UTC)),
            ],
            "parsed",
            id="datetime-and-text-compare",
        ),
    ],
)
def test_honoured_policy(
    policies: list[tuple[str, str | datetime | None]], expected: str | None
) -> None:
    chosen = honoured_policy(_policy(name, created) for name, created in policies)
    assert (chosen.metadata["name"] if chosen else None) == expected
