"""``gpuctrl render``: YAML streams in, a stream or a folder of files out, exit 2 on errors."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from controllers.render import render
from controllers.render._inputs import read_inputs, to_yaml
from gpuctrl.cli import main

ROOT = Path(__file__).parents[3]
AIRGAPPED = ROOT / "config" / "samples" / "clusterpolicy-airgapped.yaml"
MINIMAL = ROOT / "config" / "samples" / "clusterpolicy-minimal.yaml"
NODES = ROOT / "test" / "data" / "render" / "nodes.yaml"


def test_prints_the_rendered_stream(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "-f", str(AIRGAPPED), "-f", str(NODES)]) == 0
    out, err = capsys.readouterr()
    given = read_inputs([AIRGAPPED, NODES], "gpuctrl")
    assert out == to_yaml(render(given.policy, given.facts))
    assert err == ""
    kinds = [obj["kind"] for obj in yaml.safe_load_all(out)]
    # A driver per OS release among the GPU nodes (two), toolkit, validator, device plugin, MPS
    # control daemon, GFD, DCGM exporter, MIG manager (the standalone DCGM is off by default).
    assert kinds.count("DaemonSet") == 9


def test_writes_one_file_per_object(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "out"
    assert main(["render", "-f", str(AIRGAPPED), "-f", str(NODES), "-o", str(out_dir)]) == 0
    assert capsys.readouterr().out == ""
    files = sorted(p.name for p in out_dir.iterdir())
    assert files[0] == "00-serviceaccount-gpuctrl-driver.yaml"
    assert "05-daemonset-gpuctrl-driver-rhel9.4.yaml" in files
    objects = [yaml.safe_load((out_dir / name).read_text()) for name in files]
    assert objects[-1]["kind"] == "RuntimeClass"


def test_namespace_option_sets_where_config_maps_are_looked_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["render", "-f", str(AIRGAPPED), "-f", str(NODES), "--namespace", "gpu"]) == 2
    assert "ConfigMap 'local-package-repository' not found in namespace 'gpu'" in (
        capsys.readouterr().err
    )


def _invalid(tmp_path: Path) -> Path:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: gpuctrl.io/v1alpha1\nkind: ClusterPolicy\nspec:\n"
        "  driver:\n    repoConfig:\n      nodeLocalPaths: [/etc/pki, relative]\n"
        "  daemonsets:\n    priorityClassName: Not_Valid\n"
        "---\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\n"
    )
    return bad


def test_invalid_input_exits_2_lists_every_problem_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "out"
    bad = _invalid(tmp_path)
    assert main(["render", "-f", str(bad), "-o", str(out_dir)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert not out_dir.exists()
    lines = err.splitlines()
    # Each problem at the line of its field (the document's for a whole object).
    assert f"error: {bad}:10: unexpected object v1/Secret" in lines
    paths = "spec.driver.repoConfig.nodeLocalPaths"
    assert any(f"{bad}:6: {paths}[0]: '/etc/pki' is under /etc" in line for line in lines)
    assert any(f"{bad}:6: {paths}[1]: 'relative' is not absolute" in line for line in lines)
    assert any(f"{bad}:6: {paths}: requires repoConfig.configMapName" in line for line in lines)
    assert any(f"{bad}:8: spec.daemonsets.priorityClassName: 'Not_Valid'" in ln for ln in lines)
    assert all(line.startswith("error: ") for line in lines), "one line per problem"


def test_gpu_nodes_without_os_labels_are_named_in_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(
        NODES.read_text() + "\n---\napiVersion: v1\nkind: Node\nmetadata:\n  name: gpu-no-nfd-2\n"
        "  labels: {nvidia.com/gpu.present: 'true'}\n"
        "---\napiVersion: v1\nkind: Node\nmetadata:\n  name: gpu-no-nfd-1\n"
        "  labels: {feature.node.kubernetes.io/pci-10de.present: 'true'}\n"
    )
    assert main(["render", "-f", str(MINIMAL), "-f", str(nodes)]) == 0
    out, err = capsys.readouterr()
    assert [line for line in err.splitlines() if line.startswith("warning:")] == [
        "warning: GPU node(s) gpu-no-nfd-1, gpu-no-nfd-2 lack NFD's OS labels "
        "(feature.node.kubernetes.io/system-os_release.ID, .VERSION_ID): "
        "no driver DaemonSet selects them"
    ]
    names = [obj["metadata"]["name"] for obj in yaml.safe_load_all(out)]
    assert "gpuctrl-driver-ubuntu22.04" in names  # the labelled nodes still get theirs


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param("meshes: [not-a-mesh]", "spec.meshes[0]", id="schema"),
        pytest.param(
            "labels: {'bad key!': x}", "spec.labels[bad key!]: 'bad key!' is not", id="rule"
        ),
    ],
)
def test_a_broken_pod_policy_exits_2_with_its_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: str, message: str
) -> None:
    bad = tmp_path / "podpolicy.yaml"
    bad.write_text(
        "apiVersion: gpuctrl.io/v1alpha1\nkind: PodPolicy\nmetadata: {name: mesh}\n"
        f"spec:\n  {spec}\n"
    )
    out_dir = tmp_path / "out"
    assert main(["render", "-f", str(MINIMAL), "-f", str(bad), "-o", str(out_dir)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert not out_dir.exists()
    assert f"error: {bad}:5: {message}" in err


def test_a_valid_pod_policy_beside_the_policy_renders() -> None:
    sample = ROOT / "config" / "samples" / "clusterpolicy-servicemesh.yaml"
    assert main(["render", "-f", str(sample)]) == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("kind: Node\napiVersion: v1\nmetadata: {name: n}\n", "found none", id="none"),
        pytest.param(
            "apiVersion: gpuctrl.io/v1alpha1\nkind: ClusterPolicy\n---\n"
            "apiVersion: gpuctrl.io/v1alpha1\nkind: ClusterPolicy\n",
            "expected one ClusterPolicy, found",
            id="two",
        ),
        pytest.param("a: [unclosed\n", "in.yaml:2:1: not valid YAML: expected", id="yaml-error"),
        pytest.param("- a list\n", "a document is not a mapping", id="not-a-mapping"),
    ],
)
def test_malformed_streams_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = tmp_path / "in.yaml"
    path.write_text(text)
    assert main(["render", "-f", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert all(line.startswith("error: ") for line in err.splitlines()), err


def test_a_file_that_cannot_be_read_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.yaml"
    assert main(["render", "-f", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {missing}: cannot read: No such file or directory\n"


def test_migrate_module_imports_nothing_heavy() -> None:
    code = (
        "import sys, gpuctrl.cli, controllers.migrate;"
        "heavy = {'yaml', 'jinja2', 'pydantic', 'kubernetes_asyncio', 'api.v1alpha1'};"
        "print(sorted(heavy & set(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_renderer_imports_no_client_and_no_asyncio() -> None:
    code = (
        "import sys; from controllers.render import render, builtin_workload_templates;"
        "from api.v1alpha1 import ClusterPolicy; from controllers.render import ClusterFacts;"
        "render(ClusterPolicy(), ClusterFacts());"
        "print(sorted({'kubernetes_asyncio', 'aiohttp', 'asyncio', 'gpuctrl.validator'}"
        " & set(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_without_gpu_nodes_a_note_says_the_driver_is_left_out(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["render", "-f", str(MINIMAL)]) == 0
    out, err = capsys.readouterr()
    assert "the driver DaemonSets, one per OS release of the GPU nodes, are left out" in err
    assert "gpuctrl-driver-" not in out
