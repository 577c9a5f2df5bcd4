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
import yaml

from gpuctrl.validator._sandbox import TEMPLATE_FILENAME, refusal, render

__all__ = [
    "TemplateError",
    "TemplateSource",
    "builtin_template",
    "render_template",
]


# The most values a Pod may expand to (a real one has a few hundred).
_MAX_NODES = 100_000


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
    """Render ``text`` with ``variables`` in the sandbox and return the Pod it describes.

    Raises `TemplateError` for Jinja2 syntax errors, constructs outside the template language
    (see `gpuctrl.validator._sandbox`: unknown variables, filters and tests, includes, imports,
    calls, attribute access, ...), any error while rendering, text that is not YAML, and YAML
    that is not one Pod with containers.
    """
    try:
        parsed = jinja2.Environment().parse(text, filename=TEMPLATE_FILENAME)
    except jinja2.TemplateSyntaxError as error:
        problem = f"Jinja2 syntax error: {error.message}"
        raise TemplateError(source, problem, error.lineno) from error
    refused = refusal(parsed)
    if refused is not None:
        raise TemplateError(source, *refused)
    try:
        rendered = render(text, variables)
    except jinja2.TemplateSyntaxError as error:  # compile-time checks beyond the parser's
        problem = f"Jinja2 syntax error: {error.message}"
        raise TemplateError(source, problem, error.lineno) from error
    # Whatever the template raises is its author's mistake (1 // 0, "a" + 1, a refused value):
    # never a traceback.
    except Exception as error:
        problem = f"cannot render: {_describe(error)}"
        raise TemplateError(source, problem, _template_line(error)) from error
    return _parse_pod(rendered, source)


def _describe(error: Exception) -> str:
    if isinstance(error, jinja2.TemplateError):
        return str(error)
    return f"{type(error).__name__}: {error}"


def _template_line(error: BaseException) -> int | None:
    # Jinja2 rewrites tracebacks so that template frames carry the template's file name and line.
    line = None
    traceback = error.__traceback__
    while traceback is not None:
        if traceback.tb_frame.f_code.co_filename == TEMPLATE_FILENAME:
            line = traceback.tb_lineno
        traceback = traceback.tb_next
    return line


def _parse_pod(rendered: str, source: TemplateSource) -> dict[str, Any]:
    try:
        node = yaml.compose(rendered, Loader=yaml.SafeLoader)
        if node is not None and _expanded_size(node, {}) > _MAX_NODES:
            # Aliases of aliases ("billion laughs"): small text, a huge Pod once serialised.
            too_big = f"the YAML expands to more than {_MAX_NODES} values through its aliases"
            raise TemplateError(source, too_big, _alias_line(node))
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


def _expanded_size(node: yaml.Node, sizes: dict[yaml.Node, int]) -> int:
    """How many values ``node`` stands for once every alias is copied out (memoised; nodes
    hash by identity)."""
    known = sizes.get(node)
    if known is not None:
        return known
    sizes[node] = _MAX_NODES + 1  # a cycle (a recursive alias) is too big as well
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(child, sizes) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, sizes) + _expanded_size(v, sizes) for k, v in node.value)
    sizes[node] = min(size, _MAX_NODES + 1)
    return sizes[node]


def _alias_line(node: yaml.Node) -> int:
    """The line of the first node that more than one parent shares (an alias's target)."""
    seen: set[yaml.Node] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if current in seen:
            return current.start_mark.line + 1
        seen.add(current)
        if isinstance(current, yaml.SequenceNode):
            stack.extend(reversed(current.value))
        elif isinstance(current, yaml.MappingNode):
            stack.extend(n for pair in reversed(current.value) for n in reversed(pair))
    return node.start_mark.line + 1


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
