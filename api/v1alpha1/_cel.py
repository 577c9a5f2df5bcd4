"""CEL validation rules, declared once beside the field or model they check.

A `Rule` is a Kubernetes ``x-kubernetes-validations`` entry. `cel_rules` puts rules into a
field's or model's JSON schema, so ``make manifests`` emits them into the CRDs and the
apiserver refuses a bad object at apply time; `failed_message` evaluates the very same text
offline with cel-python (``celpy``), for `api.v1alpha1.validate`, ``gpuctrl render`` and the
controllers (objects stored before a rule existed, or on a cluster without the CRD's rules).

Rules use only what both Kubernetes and cel-python provide: the standard functions (``size``,
``startsWith``, ``endsWith``, ``contains``, ``matches``, with RE2 syntax) and macros (``has``,
``all``, ``exists``, ``exists_one``, ``filter``, ``map``), no Kubernetes extension library;
and none of ``fieldPath``/``reason`` (Kubernetes 1.28), as the CRDs target 1.27. The
apiserver rejects a CRD whose rules could cost too much, so each string or list a rule reads
needs ``maxLength``/``maxItems`` (the models' ``max_length``).
"""

from __future__ import annotations

import functools
import string
from dataclasses import dataclass
from typing import Any

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

__all__ = ["Rule", "cel_rules", "failed_message", "interpolated", "literal", "quoted"]


@dataclass(frozen=True)
class Rule:
    """A CEL rule on one schema node, as in ``x-kubernetes-validations``.

    ``rule`` is true when ``self`` (the node's value) is valid; ``message_expression`` is a
    CEL expression of type string telling what is wrong when it is not, ``message`` a fixed
    text used when there is no expression (at least one must be set).
    """

    rule: str
    message: str = ""
    message_expression: str = ""

    def __post_init__(self) -> None:
        if not (self.message or self.message_expression):
            raise ValueError(f"rule {self.rule!r} needs a message or a message expression")

    def wire(self) -> dict[str, str]:
        """The ``x-kubernetes-validations`` entry of this rule."""
        out = {"rule": self.rule}
        if self.message:
            out["message"] = self.message
        if self.message_expression:
            out["messageExpression"] = self.message_expression
        return out


def cel_rules(*rules: Rule) -> dict[str, Any]:
    """The ``json_schema_extra`` that declares ``rules`` on a field, a type or a model."""
    return {"x-kubernetes-validations": [rule.wire() for rule in rules]}


def quoted(text: str) -> str:
    """The CEL string literal of ``text`` (a regular expression's backslashes kept)."""
    quote = '"' if "'" in text and '"' not in text else "'"
    escaped = "".join(_escaped(ch, quote) for ch in text)
    return f"{quote}{escaped}{quote}"


def _escaped(ch: str, quote: str) -> str:
    if ch in ("\\", quote):
        return "\\" + ch
    if ch < " " or ch == "\x7f":
        return f"\\x{ord(ch):02x}"
    return ch


def interpolated(template: str, **expressions: str) -> str:
    """The CEL string expression of ``template``, each ``{name}`` in it replaced by the value
    of CEL expression ``expressions[name]`` (``{self}`` by the node's value, a string)."""
    parts = []
    for text, name, _, _ in string.Formatter().parse(template):
        if text:
            parts.append(quoted(text))
        if name is not None:
            parts.append("self" if name == "self" else expressions[name])
    return " + ".join(parts)


def literal(items: tuple[str, ...]) -> str:
    """The CEL list literal of the strings ``items``."""
    return "[" + ", ".join(quoted(item) for item in items) + "]"


def failed_message(rule: dict[str, str], value: Any) -> str | None:
    """None when ``x-kubernetes-validations`` entry ``rule`` holds for ``self`` = wire
    ``value``, else its message (from ``messageExpression`` when that gives a non-blank text,
    as the apiserver does; a rule that cannot be evaluated fails with the reason)."""
    activation = {"self": json_to_cel(value)}
    verdict = _evaluate(rule["rule"], activation)
    if isinstance(verdict, celtypes.BoolType):
        if verdict:
            return None
    else:
        return f"rule {rule['rule']!r} could not be evaluated: {verdict}"
    text = _evaluate(rule.get("messageExpression", ""), activation)
    if isinstance(text, str) and text.strip():
        return str(text)
    return rule.get("message") or f"failed rule: {rule['rule']}"


def _evaluate(expression: str, activation: dict[str, Any]) -> Any:
    """The value of ``expression`` (None when empty), or the error that stopped it."""
    if not expression:
        return None
    try:
        return _program(expression).evaluate(activation)
    except CELEvalError as error:
        return error


_ENVIRONMENT = celpy.Environment()


@functools.cache
def _program(expression: str) -> celpy.Runner:
    return _ENVIRONMENT.program(_ENVIRONMENT.compile(expression))
