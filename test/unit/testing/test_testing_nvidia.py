"""Which containers NVIDIA's (simulated) runtime gives the driver's utilities."""

from __future__ import annotations

import pytest

from gpuctrl.testing._nvidia import wants_utilities


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param({}, False, id="no-devices-asked"),
        pytest.param({"NVIDIA_VISIBLE_DEVICES": "all"}, True, id="all-default-capabilities"),
        pytest.param({"NVIDIA_VISIBLE_DEVICES": "0,1"}, True, id="some-devices"),
        pytest.param({"NVIDIA_VISIBLE_DEVICES": "void"}, False, id="void"),
        pytest.param({"NVIDIA_VISIBLE_DEVICES": "none"}, False, id="none"),
        pytest.param({"NVIDIA_VISIBLE_DEVICES": " "}, False, id="blank"),
        pytest.param(
            {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute"},
            False,
            id="compute-only",
        ),
        pytest.param(
            {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute, utility"},
            True,
            id="utility-listed",
        ),
        pytest.param(
            {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "all"},
            True,
            id="all-capabilities",
        ),
    ],
)
def test_wants_utilities(env: dict[str, str], expected: bool) -> None:
    assert wants_utilities(env) is expected
