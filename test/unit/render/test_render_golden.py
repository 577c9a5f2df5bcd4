"""Golden renders of the samples in config/samples, compared byte for byte.

Each sample is rendered with the Nodes of test/data/render/nodes.yaml. The validator's built-in
workload templates (owned by gpuctrl.validator, copied verbatim into a ConfigMap, see
test_render_rules) are replaced by a marker, so editing them does not touch these files.
After an intended change, regenerate the golden files and review their diff:

    GPUCTRL_UPDATE_GOLDEN=1 .venv/bin/python -m pytest -q test/unit/render/test_render_golden.py
"""

import os
from pathlib import Path

import pytest

from controllers.render import builtin_workload_templates, render
from controllers.render._inputs import read_inputs, to_yaml

ROOT = Path(__file__).parents[3]
SAMPLES = sorted((ROOT / "config" / "samples").glob("clusterpolicy-*.yaml"))
DATA = ROOT / "test" / "data" / "render"
WORKLOADS = "gpuctrl-validator-workloads"


def rendered_sample(sample: Path) -> str:
    """The render of ``sample`` as a YAML stream, built-in workload templates as markers."""
    given = read_inputs([sample, DATA / "nodes.yaml"], "gpuctrl")
    objects = render(given.policy, given.facts)
    for obj in objects:
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == WORKLOADS:
            assert obj["data"] == builtin_workload_templates()
            obj["data"] = {key: f"<built-in {key}>" for key in obj["data"]}
    return to_yaml(objects)


def test_every_sample_has_a_golden_file() -> None:
    assert len(SAMPLES) == 5
    expected = {f"{s.stem}.golden.yaml" for s in SAMPLES}
    assert {p.name for p in DATA.glob("*.golden.yaml")} == expected


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.stem for s in SAMPLES])
def test_golden(sample: Path) -> None:
    golden = DATA / f"{sample.stem}.golden.yaml"
    rendered = rendered_sample(sample)
    if os.environ.get("GPUCTRL_UPDATE_GOLDEN") == "1":
        golden.write_text(rendered)
    assert golden.read_text() == rendered, f"run GPUCTRL_UPDATE_GOLDEN=1 to update {golden.name}"


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.stem for s in SAMPLES])
def test_render_is_deterministic(sample: Path) -> None:
    assert rendered_sample(sample) == rendered_sample(sample)
