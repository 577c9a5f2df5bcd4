"""Workload Pod templates: Jinja2 text from a ConfigMap key -> a Pod manifest (pure).

Every error is a `TemplateError` that names the ConfigMap, the key and, where the text has
one, the line, so a broken template is reported, never half-used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import jinja2
import jinja2.meta
import jinja2.nodes
import yaml

__all__ = [
    "TEMPLATE_VARIABLES",
    "TemplateError",
    "TemplateSource",
    "builtin_template",
    "render_template",
]

# The variables a template may use; any other name is an error, even in a branch not taken.
TEMPLATE_VARIABLES = frozenset(
    {"namespace", "node_name", "image", "image_pull_policy", "runtime_class_name"}
)

# The file name Jinja2 gives templates made from strings; their traceback frames carry it.
_TEMPLATE_FILENAME = "<template>"


@dataclass(frozen=True)
class TemplateSource:
    """Where a template's text came from: the ConfigMap (``namespace/name``) and its key."""

    configmap: str
    key: str


class TemplateError(ValueError):
    """A template that cannot become a Pod; ``str()`` names the ConfigMap, key and line."""

    def __init__(self, source: TemplateSource, problem: str, line: int | None = None) -> None:
        where = f"ConfigMap {source.configmap}, key {source.key}"
        if line is not None:
            where += f", line {line}"
        super().__init__(f"{where}: {problem}")
        self.source = source
        self.problem = problem
        self.line = line


def builtin_template(key: str) -> str:
    """The text of a built-in template (``cuda.yaml``, ``plugin.yaml``) shipped in the package."""
    return resources.files("gpuctrl.validator.workloads").joinpath(key).read_text("utf-8")


def render_template(
    text: str, source: TemplateSource, variables: Mapping[str, str]
) -> dict[str, Any]:
    """Render ``text`` with ``variables`` and return the Pod it describes.

    Raises `TemplateError` for Jinja2 syntax errors, names outside `TEMPLATE_VARIABLES`,
    errors while rendering, text that is not YAML, and YAML that is not one Pod with containers.
    """
    environment = jinja2.Environment(
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False
    )
    try:
        parsed = environment.parse(text, filename=_TEMPLATE_FILENAME)
    except jinja2.TemplateSyntaxError as error:
        problem = f"Jinja2 syntax error: {error.message}"
        raise TemplateError(source, problem, error.lineno) from error
    _check_variables(parsed, source)
    try:
        rendered = environment.from_string(text).render(**variables)
    except jinja2.TemplateError as error:
        raise TemplateError(source, f"Jinja2 error: {error}", _template_line(error)) from error
    return _parse_pod(rendered, source)


def _check_variables(parsed: jinja2.nodes.Template, source: TemplateSource) -> None:
    unknown = jinja2.meta.find_undeclared_variables(parsed) - TEMPLATE_VARIABLES
    if not unknown:
        return
    first = min(
        (node for node in parsed.find_all(jinja2.nodes.Name) if node.name in unknown),
        key=lambda node: node.lineno,
    )
    allowed = ", ".join(sorted(TEMPLATE_VARIABLES))
    raise TemplateError(
        source,
        f"unknown template variable(s) {', '.join(sorted(unknown))} (known: {allowed})",
        first.lineno,
    )


def _template_line(error: BaseException) -> int | None:
    # Jinja2 rewrites tracebacks so that template frames carry the template's file name and line.
    line = None
    traceback = error.__traceback__
    while traceback is not None:
        if traceback.tb_frame.f_code.co_filename == _TEMPLATE_FILENAME:
            line = traceback.tb_lineno
        traceback = traceback.tb_next
    return line


def _parse_pod(rendered: str, source: TemplateSource) -> dict[str, Any]:
    try:
        node = yaml.compose(rendered, Loader=yaml.SafeLoader)
        document = yaml.safe_load(rendered)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark is not None else None
        raise TemplateError(source, f"not YAML: {error.problem or error}", line) from error
    except yaml.YAMLError as error:  # e.g. several documents in one key
        raise TemplateError(source, f"not YAML: {error}") from error
    problem, path = _pod_problem(document)
    if problem is not None:
        raise TemplateError(source, problem, _line_of(node, path))
    return document  # type: ignore[no-any-return]


def _pod_problem(document: Any) -> tuple[str | None, tuple[str, ...]]:
    """What keeps ``document`` from being a usable Pod, and the path of the offending key."""
    if document is None:
        return "not a Pod: the template renders to an empty document", ()
    if not isinstance(document, dict):
        return f"not a Pod: the template renders to a {type(document).__name__}, not a mapping", ()
    if document.get("apiVersion") != "v1" or document.get("kind") != "Pod":
        found = f"{document.get('apiVersion')!r}/{document.get('kind')!r}"
        return f"not a Pod: apiVersion/kind is {found}, expected 'v1'/'Pod'", ("kind",)
    spec = document.get("spec")
    if not isinstance(spec, dict):
        return "not a Pod: spec is missing or not a mapping", ("spec",)
    for field in ("initContainers", "containers"):
        problem = _containers_problem(spec.get(field), field)
        if problem is not None:
            return problem, ("spec", field)
    return None, ()


def _containers_problem(containers: Any, field: str) -> str | None:
    if containers is None and field == "initContainers":
        return None
    if not isinstance(containers, list) or (field == "containers" and not containers):
        return f"not a Pod: spec.{field} must be a list" + (
            " with at least one container" if field == "containers" else ""
        )
    names = [c.get("name") if isinstance(c, dict) else None for c in containers]
    if not all(isinstance(name, str) and name for name in names):
        return f"not a Pod: every entry of spec.{field} must be a mapping with a name"
    return None


def _line_of(node: yaml.Node | None, path: tuple[str, ...]) -> int | None:
    """The 1-based line of the deepest key of ``path`` found in the composed YAML ``node``."""
    if node is None:
        return None
    line = node.start_mark.line + 1
    for key in path:
        if not isinstance(node, yaml.MappingNode):
            break
        match = next((pair for pair in node.value if pair[0].value == key), None)
        if match is None:
            break
        line = match[0].start_mark.line + 1
        node = match[1]
    return line
