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
            GOOD_HEAD + GOOD_SPEC + "      args: [{{ image[99] }}]\n",
            "cannot render: str object has no element 99",
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


def _with_line_9(fragment: str) -> str:
    """A sound Pod template whose line 9 holds ``fragment``."""
    return GOOD_HEAD + GOOD_SPEC + f"      args: [{fragment}]\n"


# Whoever can edit the ConfigMap must not reach Python from a template: each of these is
# refused, naming the line, before or while rendering, and nothing of it runs.
@pytest.mark.parametrize(
    ("fragment", "problem"),
    [
        pytest.param(
            "{{ ''.__class__.__mro__[1].__subclasses__() }}",
            "calls are not allowed",
            id="mro-subclasses",
        ),
        pytest.param("{{ ''.__class__.__mro__ }}", "attribute access (.name)", id="mro"),
        pytest.param("{{ namespace.__class__ }}", "attribute access (.name)", id="dunder"),
        pytest.param(
            "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
            "calls are not allowed",
            id="cycler-globals",
        ),
        pytest.param("{{ lipsum }}", "unknown template variable(s) lipsum", id="lipsum"),
        pytest.param("{{ range }}", "unknown template variable(s) range", id="range"),
        pytest.param("{{ range(10) }}", "calls are not allowed", id="range-call"),
        pytest.param("{{ self }}", "unknown template variable(s) self", id="self"),
        pytest.param("{{ joiner }}", "unknown template variable(s) joiner", id="joiner"),
        pytest.param(
            "{{ image['__class__'] }}", "cannot render: 'str object' has no attribute", id="item"
        ),
        pytest.param(
            "{{ image['upper'] }}", "cannot render: 'str object' has no attribute", id="item-method"
        ),
        pytest.param("{{ image|attr('__class__') }}", "unknown filter 'attr'", id="attr-filter"),
        pytest.param("{{ '{0.__class__}'|format(image) }}", "unknown filter 'format'", id="format"),
        pytest.param("{{ '{0.__class__}'.format(image) }}", "calls are not", id="str-format"),
        pytest.param("{{ '%s' % image }}", "formatting text with % is not allowed", id="percent"),
        pytest.param("{{ image|map('upper') }}", "unknown filter 'map'", id="map"),
        pytest.param("{{ image is callable }}", "unknown test 'callable'", id="test"),
        pytest.param("{{ image|nosuchfilter }}", "unknown filter 'nosuchfilter'", id="unknown"),
        pytest.param(
            "{% if false %}{{ image|format(1) }}{% endif %}",
            "unknown filter 'format'",
            id="filter-in-a-branch-not-taken",
        ),
        pytest.param("{% include 'x.yaml' %}", "{% include %} is not allowed", id="include"),
        pytest.param("{% import 'x.yaml' as x %}", "{% import %} is not allowed", id="import"),
        pytest.param(
            "{% from 'x.yaml' import y %}", "{% from ... import %} is not allowed", id="from-import"
        ),
        pytest.param("{% extends 'x.yaml' %}", "{% extends %} is not allowed", id="extends"),
        pytest.param("{{ image.upper }}", "attribute access", id="method"),
        pytest.param("{{ (image|first)(1) }}", "calls are not allowed", id="call"),
        pytest.param("{% for c in image %}{{ c }}{% endfor %}", "loops", id="for"),
        pytest.param("{% set x = image %}{{ x }}", "assignments", id="set"),
        pytest.param("{% with x = image %}{{ x }}{% endwith %}", "{% with %}", id="with"),
        pytest.param(
            "{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", "macros", id="recursive-macro"
        ),
        pytest.param("{{ 1 // 0 }}", "cannot render: ZeroDivisionError", id="division-by-zero"),
        pytest.param("{{ 'a' + 1 }}", "cannot render: TypeError", id="type-error"),
        pytest.param("{{ image * 100000 }}", "a value of more than 65536", id="repetition"),
        pytest.param("{{ [image] * 9 }}", "repeating a list", id="list-repetition"),
        pytest.param("{{ 10 ** (10 ** 6) }}", "a number of more than", id="power"),
        pytest.param(
            "{{ (image * 3000)|replace('', image) }}", "a value of more than", id="replace-blowup"
        ),
        pytest.param("{{ image|indent(1000000) }}", "a value of more than", id="indent-blowup"),
    ],
)
def test_hostile_template_is_refused_naming_the_line(fragment: str, problem: str) -> None:
    with pytest.raises(TemplateError) as caught:
        render_template(_with_line_9(fragment), SOURCE, VARIABLES)

    assert problem in caught.value.problem
    assert caught.value.line == 9
    assert str(caught.value).startswith(
        "ConfigMap gpu-operator/gpuctrl-validator-workloads, key cuda.yaml, line 9: "
    )


def test_values_made_add_up_to_a_bounded_amount() -> None:
    text = _with_line_9("{{ (image * 1500)|length }}" * 400)  # 400 values of 57 k characters

    with pytest.raises(TemplateError, match="add up to more than"):
        render_template(text, SOURCE, VARIABLES)


def test_output_is_bounded() -> None:
    text = GOOD_HEAD + GOOD_SPEC + "      args: [{{ image * 1500 }}]\n" * 30

    with pytest.raises(TemplateError, match="renders to more than"):
        render_template(text, SOURCE, VARIABLES)


@pytest.mark.parametrize(
    ("fragment", "rendered"),
    [
        pytest.param("{{ image|upper }}", "REGISTRY.EXAMPLE/CUDA-SAMPLE:VECTORADD", id="filter"),
        pytest.param("{{ node_name|replace('gpu-', '') }}", "node-1", id="replace"),
        pytest.param("{{ namespace ~ '-' ~ node_name }}", "gpu-operator-gpu-node-1", id="concat"),
        pytest.param("{{ image[:8] }}", "registry", id="slice"),
        pytest.param("{{ {'a': 'b'}['a'] }}", "b", id="dict-item"),
        pytest.param("{{ 2 ** 10 * 3 }}", 3072, id="arithmetic"),
        pytest.param("{{ 'x' if image is string else 'y' }}", "x", id="test"),
        pytest.param(
            "{% if node_name is defined %}on{% else %}off{% endif %}-node", "on-node", id="if"
        ),
        pytest.param("{% filter upper %}abc{% endfilter %}", "ABC", id="filter-block"),
        pytest.param("{{ image|tojson }}", "registry.example/cuda-sample:vectoradd", id="tojson"),
        pytest.param("{{ image|truncate(11, true, '') }}", "registry.ex", id="truncate"),
        pytest.param("{{ undefined_default|default('x') if false else 'z' }}", None, id="unknown"),
    ],
)
def test_the_template_language_substitutes(fragment: str, rendered: object) -> None:
    if rendered is None:  # a name outside the variables is refused even in a branch not taken
        with pytest.raises(TemplateError, match="unknown template variable"):
            render_template(_with_line_9(fragment), SOURCE, VARIABLES)
        return

    pod = render_template(_with_line_9(fragment), SOURCE, VARIABLES)

    assert pod["spec"]["containers"][0]["args"] == [rendered]


def test_aliases_that_expand_beyond_any_pod_are_refused() -> None:
    # "Billion laughs": each level repeats the one before ten times.
    levels = ["x0: &l0 [a, a, a, a, a, a, a, a, a, a]"]
    levels += [f"x{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 7)]
    text = (
        GOOD_HEAD + "  labels: {}\n" + "\n".join(f"  {line}" for line in levels) + "\n" + GOOD_SPEC
    )

    with pytest.raises(TemplateError) as caught:
        render_template(text, SOURCE, VARIABLES)

    assert "expands to more than 100000 values through its aliases" in caught.value.problem
    assert caught.value.line == 6  # x0, the first value shared


def test_a_few_aliases_are_fine() -> None:
    text = GOOD_HEAD + (
        "spec:\n  containers:\n"
        "    - {name: a, image: x, resources: &r {limits: {memory: 1Gi}}}\n"
        "    - {name: b, image: x, resources: *r}\n"
    )

    pod = render_template(text, SOURCE, VARIABLES)

    assert pod["spec"]["containers"][1]["resources"] == {"limits": {"memory": "1Gi"}}
