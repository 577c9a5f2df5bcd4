"""The template engine: Jinja2 templates shipped in ``controllers/render/templates``.

Templates write YAML; every value that comes from data is written with the ``j`` filter (JSON,
keys sorted, a character beyond U+FFFF in YAML's ``\\U`` escape), which YAML reads back as the
same value whatever it holds (mapping keys up to 1,024 characters as written; Kubernetes' keys
are ASCII and at most 317), so no input can change the shape of an object.
"""

from __future__ import annotations

import json
import re
from typing import Any

import jinja2
import yaml

__all__ = ["render_template"]

_ENVIRONMENT = jinja2.Environment(
    loader=jinja2.PackageLoader("controllers.render", "templates"),
    undefined=jinja2.StrictUndefined,
    autoescape=False,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)
# JSON escapes a character beyond U+FFFF as a UTF-16 surrogate pair (\ud800\udc00), which
# YAML does not read as one character (libyaml refuses it, PyYAML makes two lone surrogates):
# write YAML's own \U escape for it. Escaped backslashes are matched first, so a literal
# "\\ud800" in the data is left alone.
_PAIR = re.compile(r"(\\\\)|\\u(d[89ab][0-9a-f]{2})\\u(d[c-f][0-9a-f]{2})")


def _yaml_json(value: Any) -> str:
    """``value`` as JSON (keys sorted) that YAML reads back as ``value``."""
    return _PAIR.sub(_astral, json.dumps(value, sort_keys=True))


def _astral(match: re.Match[str]) -> str:
    if match.group(1):
        return match.group(1)
    high, low = int(match.group(2), 16), int(match.group(3), 16)
    return f"\\U{0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00):08x}"


_ENVIRONMENT.filters["j"] = _yaml_json
# libyaml's safe loader when PyYAML was built with it: the same documents, ~10x faster to
# parse (a render is mostly YAML parsing, and the operator renders on every owned-object event).
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def render_template(name: str, **context: Any) -> list[dict[str, Any]]:
    """The objects template ``name`` yields for ``context`` (its non-empty YAML documents)."""
    text = _ENVIRONMENT.get_template(name).render(**context)
    return [doc for doc in yaml.load_all(text, Loader=_LOADER) if doc]
