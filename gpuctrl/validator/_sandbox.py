"""The language of a workload template and the sandbox that renders it (pure).

Whoever can edit the templates ConfigMap must not run code in the agent's privileged pod on
every GPU node. A template is YAML text with substitutions: ``{{ expression }}``, ``{% if %}``
/ ``{% elif %}`` / ``{% else %}``, ``{% filter %}`` blocks, ``{# comments #}``. An expression
may use the variables of `TEMPLATE_VARIABLES` (all strings), literals, arithmetic, comparisons,
``and``/``or``/``not``, ``~``, ``x if c else y``, indexing and slicing, and the filters and tests
of `FILTERS` and `TESTS`. Nothing else: no loops, assignments (``set``, ``with``), macros, calls,
attribute access (``.name``), ``include``/``import``/``extends``.

Two layers. `refusal` walks the parsed template before anything runs and names the first
construct outside the language, with its line. `render` then runs it in Jinja2's
`ImmutableSandboxedEnvironment` with no globals, only those filters and tests, and operators
and filters that refuse to build text or numbers beyond fixed bounds, so a template can
neither reach Python's internals nor make the agent run out of time or memory: with no loops
and no reuse of a value, only ``*``, ``**`` and filters grow values faster than the template
itself, and they draw on a budget of `MAX_WORK` characters.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import jinja2
import jinja2.exceptions
import jinja2.filters
import jinja2.nodes
import jinja2.runtime
import jinja2.sandbox

__all__ = [
    "FILTERS",
    "MAX_OUTPUT",
    "MAX_VALUE",
    "MAX_WORK",
    "TEMPLATE_FILENAME",
    "TEMPLATE_VARIABLES",
    "TESTS",
    "TemplateTooLarge",
    "refusal",
    "render",
]

# The variables a template sees; any other name is an error, even in a branch not taken.
TEMPLATE_VARIABLES = frozenset(
    {"namespace", "node_name", "image", "image_pull_policy", "runtime_class_name"}
)
FILTERS = frozenset(
    {
        "abs", "capitalize", "d", "default", "first", "float", "indent", "int", "last",
        "length", "lower", "replace", "round", "string", "title", "tojson", "trim", "truncate",
        "upper",
    }
)  # fmt: skip
TESTS = frozenset(
    {
        "defined", "eq", "equalto", "false", "ge", "gt", "in", "le", "lower", "lt", "ne",
        "none", "number", "string", "true", "undefined", "upper",
    }
)  # fmt: skip
# The longest text (characters) one operation or filter may produce, all of them together,
# and the whole output.
MAX_VALUE = 64 * 1024
MAX_WORK = 16 * 1024 * 1024
MAX_OUTPUT = 1024 * 1024
# The largest number (bits) a power or product may produce; far beyond what a Pod holds.
_MAX_BITS = 1024

# The file name Jinja2 gives templates made from strings; their traceback frames carry it.
TEMPLATE_FILENAME = "<template>"

# The syntax-tree nodes of the language; every other node is refused (see `refusal`).
_ALLOWED_NODES: tuple[type[jinja2.nodes.Node], ...] = (
    jinja2.nodes.Template,
    jinja2.nodes.Output,
    jinja2.nodes.TemplateData,
    jinja2.nodes.If,
    jinja2.nodes.FilterBlock,
    jinja2.nodes.Name,
    jinja2.nodes.Const,
    jinja2.nodes.Tuple,
    jinja2.nodes.List,
    jinja2.nodes.Dict,
    jinja2.nodes.Pair,
    jinja2.nodes.Keyword,
    jinja2.nodes.CondExpr,
    jinja2.nodes.BinExpr,
    jinja2.nodes.UnaryExpr,
    jinja2.nodes.Compare,
    jinja2.nodes.Operand,
    jinja2.nodes.Concat,
    jinja2.nodes.Getitem,
    jinja2.nodes.Slice,
    jinja2.nodes.Filter,
    jinja2.nodes.Test,
)
# Why a construct users reach for is refused; the others get a generic message.
_REASONS: tuple[tuple[type[jinja2.nodes.Node], str], ...] = (
    (jinja2.nodes.Include, "{% include %} is not allowed: a template reads no other"),
    (jinja2.nodes.Import, "{% import %} is not allowed: a template reads no other"),
    (jinja2.nodes.FromImport, "{% from ... import %} is not allowed: a template reads no other"),
    (jinja2.nodes.Extends, "{% extends %} is not allowed: a template reads no other"),
    (jinja2.nodes.Block, "{% block %} is not allowed"),
    (jinja2.nodes.For, "loops ({% for %}) are not allowed"),
    (jinja2.nodes.Macro, "macros are not allowed"),
    (jinja2.nodes.CallBlock, "{% call %} is not allowed"),
    (jinja2.nodes.Call, "calls are not allowed (use a filter: {{ image | lower }})"),
    (jinja2.nodes.Assign, "assignments ({% set %}) are not allowed"),
    (jinja2.nodes.AssignBlock, "assignments ({% set %}) are not allowed"),
    (jinja2.nodes.With, "{% with %} is not allowed"),
    (jinja2.nodes.Getattr, "attribute access (.name) is not allowed"),
)


class TemplateTooLarge(jinja2.exceptions.SecurityError):
    """An operation or filter would build text or a number beyond the sandbox's bounds."""


def refusal(parsed: jinja2.nodes.Template) -> tuple[str, int] | None:
    """The first construct of ``parsed`` outside the language (message, line), or None."""
    unknown = {n.name for n in parsed.find_all(jinja2.nodes.Name)} - TEMPLATE_VARIABLES
    for node in parsed.find_all(jinja2.nodes.Node):  # depth first, in the text's order
        message = _node_problem(node, unknown)
        if message is not None:
            return message, node.lineno
    return None


def _node_problem(node: jinja2.nodes.Node, unknown: set[str]) -> str | None:
    if isinstance(node, jinja2.nodes.Name) and node.name in unknown:
        known = ", ".join(sorted(TEMPLATE_VARIABLES))
        return f"unknown template variable(s) {', '.join(sorted(unknown))} (known: {known})"
    if isinstance(node, jinja2.nodes.Filter) and node.name not in FILTERS:
        return f"unknown filter {node.name!r} (allowed: {', '.join(sorted(FILTERS))})"
    if isinstance(node, jinja2.nodes.Test) and node.name not in TESTS:
        return f"unknown test {node.name!r} (allowed: {', '.join(sorted(TESTS))})"
    if isinstance(node, _ALLOWED_NODES):
        return None
    reason = next((text for kind, text in _REASONS if isinstance(node, kind)), None)
    return reason or f"{type(node).__name__} is not allowed in a workload template"


def render(text: str, variables: Mapping[str, str]) -> str:
    """Render ``text`` (which `refusal` passed) with ``variables`` in the sandbox.

    Raises whatever the template raises (Jinja2's errors, `TemplateTooLarge`, and Python's
    own, such as `ZeroDivisionError`); the caller turns them into one error with the line.
    """
    with warnings.catch_warnings():
        # Python warns of code such as ``0[1:]`` as it compiles, and a warning's report
        # reads the source line from a file named after the template: not one to open.
        warnings.simplefilter("ignore", SyntaxWarning)
        template = _environment().from_string(text)
    size = 0
    parts = []
    for part in template.generate(**variables):
        size += len(part)
        if size > MAX_OUTPUT:
            raise TemplateTooLarge(f"the template renders to more than {MAX_OUTPUT} characters")
        parts.append(part)
    return "".join(parts)


class _Sandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
    """The sandbox with bounded ``*``, ``**`` and ``%``, the operators that can blow up, and a
    budget of characters that the bounded operators and filters draw from."""

    intercepted_binops = frozenset({"*", "**", "%"})

    def __init__(self) -> None:
        super().__init__(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
        self.spent = 0

    def spend(self, length: int) -> None:
        """Count a value of ``length`` characters about to be made; refuse one over the bounds."""
        self.spent += max(length, 0)
        if length > MAX_VALUE:
            raise TemplateTooLarge(f"a value of more than {MAX_VALUE} characters")
        if self.spent > MAX_WORK:
            raise TemplateTooLarge(f"the values made add up to more than {MAX_WORK} characters")

    def getitem(self, obj: Any, argument: Any) -> Any:
        """``obj[argument]``, never an attribute (Jinja2's fallback for a missing item)."""
        try:
            return obj[argument]
        except (TypeError, LookupError):
            return self.undefined(obj=obj, name=argument)

    def call_binop(
        self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any
    ) -> Any:
        if operator == "%" and isinstance(left, str):
            raise jinja2.exceptions.SecurityError("formatting text with % is not allowed")
        if operator == "**" and _is_int(left) and _is_int(right):
            _check_bits(abs(left).bit_length() * max(right, 0))
        if operator == "*":
            self._check_repetition(left, right)
        result = super().call_binop(context, operator, left, right)
        if _is_int(result):
            _check_bits(result.bit_length())
        return result

    def _check_repetition(self, left: Any, right: Any) -> None:
        for sequence, times in ((left, right), (right, left)):
            if isinstance(sequence, list | tuple) and _is_int(times):
                raise jinja2.exceptions.SecurityError("repeating a list with * is not allowed")
            if isinstance(sequence, str) and _is_int(times):
                self.spend(len(sequence) * times)


def _environment() -> _Sandbox:
    environment = _Sandbox()
    environment.globals.clear()  # no range, lipsum, cycler, joiner, namespace, dict
    filters = {name: environment.filters[name] for name in FILTERS}
    filters["replace"] = functools.partial(_replace, environment)
    filters["indent"] = functools.partial(_indent, environment)
    environment.filters = {name: _bounded(environment, f) for name, f in filters.items()}
    environment.tests = {name: environment.tests[name] for name in TESTS}
    return environment


def _bounded(environment: _Sandbox, function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` whose text results are counted against the environment's budget."""

    def bounded(*args: Any, **kwargs: Any) -> Any:
        result = function(*args, **kwargs)
        if isinstance(result, str):
            environment.spend(len(result))
        return result

    # Jinja2 passes the environment or context to filters marked for it; keep the marks.
    bounded.__dict__.update(getattr(function, "__dict__", {}))
    return bounded


def _replace(
    environment: _Sandbox, value: Any, old: Any, new: Any, count: int | None = None
) -> str:
    text, old, new = str(value), str(old), str(new)
    occurrences = text.count(old) if old else len(text) + 1
    if count is not None and count >= 0:
        occurrences = min(occurrences, count)
    environment.spend(len(text) + occurrences * (len(new) - len(old)))
    return text.replace(old, new, -1 if count is None else count)


def _indent(
    environment: _Sandbox,
    value: Any,
    width: int | str = 4,
    first: bool = False,
    blank: bool = False,
) -> str:
    text = str(value)
    step = len(width) if isinstance(width, str) else int(width)
    environment.spend(len(text) + (text.count("\n") + 1) * max(step, 0))
    return jinja2.filters.do_indent(text, width, first, blank)


def _check_bits(bits: int) -> None:
    if bits > _MAX_BITS:
        raise TemplateTooLarge(f"a number of more than {_MAX_BITS} bits")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
