"""Workload templates: the built-in ones render to sound Pods; every broken one is named."""

from __future__ import annotations

from typing import Any

import pytest

from gpuctrl.validator import TemplateError, TemplateSource, builtin_template, render_template

SOURCE = TemplateSource("gpu-operator/gpuctrl-validator-workloads", "cuda.yaml")
VARIABLES = {
    "namespace": "gpu-operator",
    "node_name": "gpu-node-1",
    "image": "registry.example/cuda-sample:vectoradd",
    "image_pull_policy": "IfNotPresent",
    "runtime_class_name": "nvidia",
}


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]


@pytest.mark.parametrize("key", ["cuda.yaml", "plugin.yaml"])
def test_builtin_template_renders_a_hardened_pod(key: str) -> None:
    pod = render_template(builtin_template(key), SOURCE, VARIABLES)

    assert (pod["apiVersion"], pod["kind"]) == ("v1", "Pod")
    assert pod["metadata"]["namespace"] == "gpu-operator"
    assert pod["spec"]["nodeName"] == "gpu-node-1"
    assert pod["spec"]["runtimeClassName"] == "nvidia"
    containers = _containers(pod)
    assert len(containers) >= 2
    assert {c["image"] for c in containers} == {VARIABLES["image"]}
    assert len({repr(c["resources"]) for c in containers}) == 1, "same resources everywhere"
    for container in containers:
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"] == {"drop": ["ALL"]}
        assert "privileged" not in security
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True


def test_plugin_template_requests_one_gpu_and_cuda_none() -> None:
    plugin = render_template(builtin_template("plugin.yaml"), SOURCE, VARIABLES)
    cuda = render_template(builtin_template("cuda.yaml"), SOURCE, VARIABLES)

    for container in _containers(plugin):
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    for container in _containers(cuda):
        assert "nvidia.com/gpu" not in container["resources"].get("limits", {})


GOOD_HEAD = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n"
GOOD_SPEC = "spec:\n  containers:\n    - name: main\n      image: {{ image }}\n"


@pytest.mark.parametrize(
    ("text", "problem", "line"),
    [
        pytest.param(GOOD_HEAD + "spec:\n  containers: [\n", "not YAML", 7, id="not-yaml"),
        pytest.param(
            "apiVersion: apps/v1\nkind: Deployment\n" + GOOD_SPEC,
            "not a Pod: apiVersion/kind is 'apps/v1'/'Deployment'",
            2,
            id="not-a-pod",
        ),
        pytest.param("- a\n- b\n", "not a Pod: the template renders to a list", 1, id="a-list"),
        pytest.param("# nothing\n", "renders to an empty document", None, id="empty"),
        pytest.param(
            GOOD_HEAD + "spec:\n  restartPolicy: Never\n",
            "spec.containers must be a list with at least one container",
            5,
            id="no-containers",
        ),
        pytest.param(
            GOOD_HEAD + "spec:\n  containers:\n    - image: x\n",
            "every entry of spec.containers must be a mapping with a name",
            6,
            id="nameless-container",
        ),
        pytest.param(
            GOOD_HEAD + GOOD_SPEC + "  {% if image %}\n",
            "Jinja2 syntax error",
            9,
            id="jinja-syntax",
        ),
        pytest.param(
            GOOD_HEAD + GOOD_SPEC + "      args: [{{ node }}]\n",
            "unknown template variable(s) node",
            9,
            id="unknown-variable",
        ),
        pytest.param(
            GOOD_HEAD + GOOD_SPEC + "{% if false %}\n      args: [{{ gpu_count }}]\n{% endif %}\n",
            "unknown template variable(s) gpu_count",
            10,
            id="unknown-variable-in-a-branch-not-taken",
        ),
        pytest.param(
            GOOD_HEAD + GOOD_SPEC + "      args: [{{ image.tag.major }}]\n",
            "Jinja2 error",
            9,
            id="render-error",
        ),
        pytest.param(
            GOOD_HEAD + "---\n" + GOOD_HEAD + GOOD_SPEC, "not YAML", 5, id="two-documents"
        ),
    ],
)
def test_broken_template_names_configmap_key_and_line(
    text: str, problem: str, line: int | None
) -> None:
    with pytest.raises(TemplateError) as caught:
        render_template(text, SOURCE, VARIABLES)

    error = caught.value
    assert problem in error.problem
    assert error.line == line
    assert str(error).startswith(
        "ConfigMap gpu-operator/gpuctrl-validator-workloads, key cuda.yaml"
        + (f", line {line}: " if line is not None else ": ")
    )


def test_template_may_use_every_documented_variable() -> None:
    text = GOOD_HEAD.replace("name: x", "name: {{ node_name }}-{{ namespace }}") + (
        "spec:\n  runtimeClassName: {{ runtime_class_name }}\n  containers:\n"
        "    - name: main\n      image: {{ image }}\n"
        "      imagePullPolicy: {{ image_pull_policy }}\n"
    )

    pod = render_template(text, SOURCE, VARIABLES)

    assert pod["metadata"]["name"] == "gpu-node-1-gpu-operator"
    assert pod["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"
