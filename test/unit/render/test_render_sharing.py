"""The device plugin's named configs are checked as NVIDIA's parser (k8s-device-plugin v0.17)
reads them, and refused where it would refuse them or silently ignore what they say: each
problem names its config and field. Property tests: every well-formed config is accepted; one
bad field in one is refused, naming that field."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from controllers.render._sharing import MIG_STRATEGIES, MPS_MAX_REPLICAS, config_problems


def _problems(config: Any, strategy: str = "single") -> list[str]:
    text = config if isinstance(config, str) else yaml.safe_dump(config)
    return [str(p) for p in config_problems({"cfg": text}, strategy)]


def _sharing(kind: str, *resources: dict[str, Any], **options: Any) -> dict[str, Any]:
    return {"version": "v1", "sharing": {kind: {**options, "resources": list(resources)}}}


TIME_SLICED_4 = _sharing("timeSlicing", {"name": "nvidia.com/gpu", "replicas": 4})


@pytest.mark.parametrize(
    ("config", "strategy"),
    [
        (TIME_SLICED_4, "single"),
        ("", "single"),  # an empty config: NVIDIA's defaults
        ({"version": "v1"}, "single"),
        ({"version": "v1", "flags": {"migStrategy": "mixed"}}, "none"),
        ({"flags": {"plugin": {"deviceListStrategy": ["envvar", "cdi-cri"]}}}, "single"),
        (_sharing("timeSlicing", {"name": "gpu", "replicas": 2, "devices": "all"}), "none"),
        (
            _sharing(
                "timeSlicing",
                {"name": "nvidia.com/gpu", "replicas": 2},
                {"name": "nvidia.com/mig-1g.5gb", "replicas": 7},
                {"name": "mig-1c.3g.20gb.me", "replicas": 3},
                renameByDefault=True,
                failRequestsGreaterThanOne=True,
            ),
            "mixed",
        ),
        (
            _sharing(
                "timeSlicing",
                {"name": "gpu", "replicas": 2, "rename": "nvidia.com/gpu.shared"},
                renameByDefault=True,
            ),
            "single",
        ),
        (_sharing("mps", {"name": "nvidia.com/gpu", "replicas": MPS_MAX_REPLICAS}), "single"),
        ({"version": "v1", "sharing": None, "flags": None}, "single"),
    ],
    ids=[
        "time-sliced-4",
        "empty",
        "version-only",
        "flags",
        "device-list-strategies",
        "short-name-devices-all",
        "mig-profiles-mixed",
        "default-rename",
        "mps-48",
        "null-sections",
    ],
)
def test_well_formed_configs_are_accepted(config: Any, strategy: str) -> None:
    assert _problems(config, strategy) == []


@pytest.mark.parametrize(
    ("config", "strategy", "expected"),
    [
        (
            _sharing("timeSlicing", {"name": "nvidia.com/gpu", "replicas": 1}),
            "single",
            "cfg: sharing.timeSlicing.resources[0].replicas: must be at least 2 (NVIDIA's parser "
            "refuses fewer), not 1",
        ),
        (
            _sharing("timeSlicing", {"name": "nvidia.com/gpu"}),
            "single",
            "cfg: sharing.timeSlicing.resources[0].replicas: required",
        ),
        (
            _sharing("timeSlicing", {"name": "nvidia.com/gpu", "replicas": "4"}),
            "single",
            "replicas: must be an integer, not a string ('4')",
        ),
        (
            _sharing("timeSlicing", {"name": "nvidia.com/gpu", "replicas": True}),
            "single",
            "replicas: must be an integer, not a boolean (true)",
        ),
        (
            _sharing("timeSlicing", {"name": "nvidia.com/tpu", "replicas": 4}),
            "single",
            "cfg: sharing.timeSlicing.resources[0].name: nvidia.com/tpu is not a resource "
            "NVIDIA's device plugin advertises",
        ),
        (
            _sharing("timeSlicing", {"name": "amd.com/gpu", "replicas": 4}),
            "single",
            "resources[0].name: 'amd.com/gpu' is not a resource name",
        ),
        (
            _sharing("timeSlicing", {"name": "mig-1g.5gb", "replicas": 4}),
            "single",
            "MIG devices are advertised by profile only with MIG strategy mixed",
        ),
        (
            _sharing("timeSlicing", {"name": "gpu", "replicas": 2}, {"name": "gpu", "replicas": 3}),
            "single",
            "cfg: sharing.timeSlicing.resources[1].name: nvidia.com/gpu is listed twice",
        ),
        (
            _sharing("timeSlicing"),
            "single",
            "cfg: sharing.timeSlicing.resources: required: a list of at least one resource",
        ),
        (
            {"sharing": {"timeSlicing": None}},
            "single",
            "cfg: sharing.timeSlicing: must be a mapping with resources, not null",
        ),
        (
            _sharing("mps", {"name": "nvidia.com/gpu", "replicas": 4}),
            "mixed",
            "cfg: sharing.mps: NVIDIA's device plugin refuses MPS with MIG strategy mixed",
        ),
        (
            _sharing("mps", {"name": "nvidia.com/gpu", "replicas": MPS_MAX_REPLICAS + 1}),
            "single",
            "cfg: sharing.mps.resources[0].replicas: at most 48 with MPS",
        ),
        (
            _sharing("mps", {"name": "mig-1g.5gb", "replicas": 2}),
            "single",
            "does not share MIG devices with MPS",
        ),
        (
            _sharing("mps", {"name": "gpu", "replicas": 2}, failRequestsGreaterThanOne=False),
            "single",
            "cfg: sharing.mps.failRequestsGreaterThanOne: NVIDIA's device plugin (v0.17) always",
        ),
        (
            {
                "sharing": {
                    "timeSlicing": {"resources": [{"name": "gpu", "replicas": 2}]},
                    "mps": {"resources": [{"name": "gpu", "replicas": 2}]},
                }
            },
            "single",
            "cfg: sharing: timeSlicing and mps exclude each other",
        ),
        (
            _sharing("timeSlicing", {"name": "gpu", "replicas": 2, "devices": [0, 1]}),
            "single",
            "resources[0].devices: NVIDIA's device plugin (v0.17) ignores devices other than 'all'",
        ),
        (
            _sharing("timeSlicing", {"name": "gpu", "replicas": 2, "rename": "shared-gpu"}),
            "single",
            "resources[0].rename: NVIDIA's device plugin (v0.17) ignores rename",
        ),
        (
            {"sharing": {"timeslicing": {"resources": [{"name": "gpu", "replicas": 2}]}}},
            "single",
            "cfg: sharing.timeslicing: unknown key (NVIDIA spells it timeSlicing)",
        ),
        (
            {"version": "v1", "sharing": {"timeSlicing": {"resources": [], "renameByDefault": 1}}},
            "single",
            "cfg: sharing.timeSlicing.renameByDefault: must be a boolean, not a number (1)",
        ),
        (
            _sharing("timeSlicing", {"name": "mig-1g.10gb+me", "replicas": 2}),
            "mixed",
            "NVIDIA's plugin writes a MIG profile's + as .",
        ),
        ({"version": "v2"}, "single", "cfg: version: must be 'v1'"),
        ({"versoin": "v1"}, "single", "cfg: versoin: unknown key (known: version, flags"),
        ({"flags": {"migStrategy": "all"}}, "single", "cfg: flags.migStrategy: must be one of"),
        ({"flags": {"plugin": {"passDeviceSpecs": "yes please"}}}, "single", "must be a boolean"),
        (
            {"resources": {"gpus": [{"pattern": "*", "name": "gpu"}]}},
            "single",
            "cfg: resources: NVIDIA's device plugin ignores custom resources",
        ),
        ("sharing: [", "single", "cfg: not YAML:"),
        ("- a list", "single", "cfg: must be a mapping (version, flags, sharing), not a list"),
    ],
    ids=[
        "one-replica",
        "no-replicas",
        "replicas-string",
        "replicas-bool",
        "unknown-resource",
        "foreign-prefix",
        "mig-profile-not-mixed",
        "listed-twice",
        "no-resources",
        "null-time-slicing",
        "mps-mixed",
        "mps-too-many",
        "mps-mig",
        "mps-fail-requests-false",
        "both-strategies",
        "devices-list",
        "rename",
        "misspelt-key",
        "rename-by-default-number",
        "mig-plus",
        "version-2",
        "unknown-top-key",
        "bad-mig-strategy",
        "flag-type",
        "custom-resources",
        "not-yaml",
        "not-a-mapping",
    ],
)
def test_bad_configs_are_refused_naming_the_config_and_field(
    config: Any, strategy: str, expected: str
) -> None:
    problems = _problems(config, strategy)
    assert any(expected in p for p in problems), problems


def test_every_config_is_checked_in_key_order() -> None:
    bad = yaml.safe_dump(_sharing("timeSlicing", {"name": "gpu", "replicas": 0}))
    configs = {"z-bad": bad, "a-bad": bad, "good": yaml.safe_dump(TIME_SLICED_4)}
    assert [p.config for p in config_problems(configs, "single")] == ["a-bad", "z-bad"]


# --- property tests ----------------------------------------------------------------------

_MIG_PROFILES = st.sampled_from(["mig-1g.5gb", "mig-2g.10gb", "mig-3g.20gb", "mig-1g.10gb.me"])


@st.composite
def well_formed(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """A config NVIDIA's plugin takes and honours whole, with the MIG strategy it runs with."""
    mps = draw(st.booleans())
    strategy = draw(st.sampled_from(("none", "single") if mps else MIG_STRATEGIES))
    names = ["nvidia.com/gpu"]
    if strategy == "mixed":
        names += draw(st.lists(_MIG_PROFILES, unique=True, max_size=3))
    top = MPS_MAX_REPLICAS if mps else 1000
    resources = [
        {
            "name": draw(st.sampled_from([name, name.removeprefix("nvidia.com/")])),
            "replicas": draw(st.integers(2, top)),
            **({"devices": "all"} if draw(st.booleans()) else {}),
        }
        for name in names
    ]
    section: dict[str, Any] = {"resources": resources}
    if draw(st.booleans()):
        section["renameByDefault"] = draw(st.booleans())
    if draw(st.booleans()):
        section["failRequestsGreaterThanOne"] = True if mps else draw(st.booleans())
    config: dict[str, Any] = {"sharing": {"mps" if mps else "timeSlicing": section}}
    if draw(st.booleans()):
        config["version"] = "v1"
    if draw(st.booleans()):
        config["flags"] = {"migStrategy": draw(st.sampled_from(MIG_STRATEGIES))}
    return config, strategy


@given(well_formed())
def test_every_well_formed_config_is_accepted(case: tuple[dict[str, Any], str]) -> None:
    config, strategy = case
    assert _problems(config, strategy) == []


# One bad value per field of a resource entry or its section, with the field it names.
_BAD_FIELDS = st.sampled_from(
    [
        ("replicas", st.integers(-5, 1)),
        ("replicas", st.sampled_from(["4", 2.5, None, True])),
        ("name", st.sampled_from(["nvidia.com/tpu", "amd.com/gpu", "", "GPU", 7])),
        ("devices", st.sampled_from([2, [0], "some"])),
        ("rename", st.sampled_from(["other", "nvidia.com/gpu.fast"])),
        ("nmae", st.just("gpu")),
        ("renameByDefault", st.sampled_from(["true", 1, "yes please"])),
    ]
)


@given(well_formed(), _BAD_FIELDS, st.data())
def test_one_bad_field_is_refused_naming_that_field(
    case: tuple[dict[str, Any], str], bad: tuple[str, Any], data: st.DataObject
) -> None:
    config, strategy = case
    kind = next(iter(config["sharing"]))
    section = config["sharing"][kind]
    field, values = bad
    value = data.draw(values)
    if field == "renameByDefault":
        section[field] = value
        where = f"sharing.{kind}.renameByDefault"
    else:
        index = data.draw(st.integers(0, len(section["resources"]) - 1))
        section["resources"][index][field] = value
        where = f"sharing.{kind}.resources[{index}].{field}"
    problems = config_problems({"cfg": yaml.safe_dump(config)}, strategy)
    assert problems, f"{where}={value!r} was accepted"
    assert {(p.config, p.path) for p in problems} == {("cfg", where)}
