"""The template sandbox under generated attacks: a Pod or a `TemplateError`, nothing run."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuctrl.validator import TemplateError, TemplateSource, builtin_template, render_template

SOURCE = TemplateSource("gpu-operator/gpuctrl-validator-workloads", "cuda.yaml")
VARIABLES = {
    "namespace": "gpu-operator",
    "node_name": "gpu-node-1",
    "image": "registry.example/cuda-sample:vectoradd",
    "image_pull_policy": "IfNotPresent",
    "runtime_class_name": "nvidia",
}

# Audit events (PEP 578) that rendering itself raises: Jinja2 compiles and runs the template
# and rewrites tracebacks through frames. Anything else - a file opened, a process started, a
# socket, a function's globals read - means the template reached outside the sandbox.
_RENDERING_EVENTS = frozenset({"compile", "exec", "code.__new__"})
_TRACEBACK_ATTRIBUTES = frozenset({"tb_frame", "f_code", "f_back", "tb_next"})
_MODULE_LOADING = frozenset({"import", "marshal.loads", "sys._getframe", "os.listdir"})


class _AuditLog:
    """Audit events raised while `recording`; a hook cannot be removed, so one serves all."""

    def __init__(self) -> None:
        self.recording = False
        self.events: list[tuple[str, tuple[Any, ...]]] = []
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if self.recording:
            self.events.append((event, args))

    @contextmanager
    def record(self) -> Iterator[list[tuple[str, tuple[Any, ...]]]]:
        self.events = []
        self.recording = True
        try:
            yield self.events
        finally:
            self.recording = False


_AUDIT = _AuditLog()


def _escapes(events: list[tuple[str, tuple[Any, ...]]]) -> list[str]:
    """The events that rendering alone does not raise."""
    found = []
    for event, args in events:
        if event in _RENDERING_EVENTS:
            continue
        if event == "object.__getattr__" and args[1] in _TRACEBACK_ATTRIBUTES:
            continue
        if event in _MODULE_LOADING or (event == "open" and str(args[0]).endswith(".pyc")):
            continue  # a module loaded on first use (an escape would need os, sys, ... first)
        found.append(f"{event}{args!r:.200}")
    return found


# Pieces of attacks seen in the wild (SSTI payloads) and of the language itself.
_ATOMS = st.sampled_from(
    [
        "image", "namespace", "node_name", "''", "'__class__'", "'{0.__class__}'", "'%s'",
        "'%999999999d'", "0", "9", "100000", "()", "[]", "{}", "self", "lipsum", "cycler",
        "range", "config", "request", "joiner", "namespace", "true", "none", "loop",
    ]
)  # fmt: skip
_SUFFIXES = st.sampled_from(
    [
        ".__class__", ".__mro__", ".__subclasses__()", ".__init__", ".__globals__",
        "['__globals__']", "['__builtins__']", "['os']", ".popen('id')", ".read()", "[0]",
        "[1:]", "[-1]", "|attr('__class__')", "|format(image)", "|map('upper')", "|lower",
        "|replace('a', image)", "|indent(99999)", "|tojson", "|string", "|length", "()",
        "(1)", "|list", "|join(image)", "|first", "|default(image)", "|truncate(5)",
        "|int", "|float", "|selectattr('x')", "|e", "|safe", " is callable", " is defined",
    ]
)  # fmt: skip
_OPERATORS = st.sampled_from([" * ", " ** ", " % ", " ~ ", " + ", " // ", " / ", " - ", " and "])
_STATEMENTS = st.sampled_from(
    [
        "{% include 'x' %}", "{% import 'x' as y %}", "{% from 'x' import y %}",
        "{% extends 'x' %}", "{% for c in image %}{{ c }}{% endfor %}", "{% set a = image %}",
        "{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", "{% if image %}", "{% endif %}",
        "{% else %}", "{{", "}}", "{%", "%}", "{#", "#}", "{% raw %}", "{% endraw %}",
        "{% filter upper %}", "{% endfilter %}", "{% with a = image %}", "{% endwith %}",
        "{% call m() %}", "{% endcall %}", "{% do image %}", "{% block b %}", "{% endblock %}",
    ]
)  # fmt: skip


@st.composite
def _expressions(draw: st.DrawFn) -> str:
    terms = [
        draw(_ATOMS) + "".join(draw(st.lists(_SUFFIXES, max_size=4)))
        for _ in range(draw(st.integers(1, 3)))
    ]
    operators = [draw(_OPERATORS) for _ in terms[1:]]
    return terms[0] + "".join(op + term for op, term in zip(operators, terms[1:], strict=True))


_FRAGMENTS = st.one_of(
    _expressions().map(lambda expression: "{{ " + expression + " }}"), _STATEMENTS
)
_HEAD = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  containers:\n"


@st.composite
def _templates(draw: st.DrawFn) -> str:
    lines = ["    - name: main", "      image: {{ image }}"]
    for _ in range(draw(st.integers(1, 4))):
        lines.insert(draw(st.integers(0, len(lines))), "      args: [" + draw(_FRAGMENTS) + "]")
    return _HEAD + "\n".join(lines) + "\n"


def test_the_audit_log_sees_an_escape() -> None:
    # The property below is only as good as its detector: it must see a file being opened.
    with _AUDIT.record() as events, open(os.devnull, "rb"):
        pass

    assert any(escape.startswith("open(") for escape in _escapes(events))


def _warm_up() -> None:
    """Render once through every path, so that modules loaded on first use are loaded."""
    paths = (builtin_template("cuda.yaml"), "{% endraw %}", "{{ 1 // 0 }}", "{{ x.y }}", "a: [")
    for text in paths:
        with suppress(TemplateError):
            render_template(text, SOURCE, VARIABLES)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_templates())
def test_any_template_gives_a_pod_or_a_template_error_and_runs_nothing(text: str) -> None:
    _warm_up()

    error: TemplateError | None = None
    with _AUDIT.record() as events:
        try:
            pod = render_template(text, SOURCE, VARIABLES)
        except TemplateError as raised:
            error = raised

    assert _escapes(events) == []
    if error is None:
        assert pod["kind"] == "Pod"
    else:
        assert error.source == SOURCE
        assert error.line is None or 1 <= error.line <= text.count("\n") + 1
