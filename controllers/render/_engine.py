"""The template engine: Jinja2 templates shipped in ``controllers/render/templates``.

Templates write YAML; every value that comes from data is written with the ``j`` filter (JSON,
keys sorted), which is valid YAML whatever the value holds, so no input can change the shape
of an object.
"""

from __future__ import annotations

import json
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
_ENVIRONMENT.filters["j"] = lambda value: json.dumps(value, sort_keys=True)
# libyaml's safe loader when PyYAML was built with it: the same documents, ~10x faster to
# parse (a render is mostly YAML parsing, and the operator renders on every owned-object event).
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def render_template(name: str, **context: Any) -> list[dict[str, Any]]:
    """The objects template ``name`` yields for ``context`` (its non-empty YAML documents)."""
    text = _ENVIRONMENT.get_template(name).render(**context)
    return [doc for doc in yaml.load_all(text, Loader=_LOADER) if doc]
