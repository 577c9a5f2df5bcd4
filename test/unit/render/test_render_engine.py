"""The render's ``j`` filter: whatever a value holds, the YAML it writes reads back as that
value, with libyaml's loader (the one the render uses) and with PyYAML's own. Mapping keys are
Kubernetes' (ASCII, at most 317 characters): YAML's flow-mapping keys end at 1,024."""

from __future__ import annotations

import json
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from controllers.render._engine import _LOADER, _yaml_json

# Keys as Kubernetes has them (label, annotation and resource names: ASCII, at most 317
# characters): YAML reads a flow-mapping key of at most 1,024 characters as written.
_KEYS = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=317)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=12,
)


@given(_JSON)
def test_any_value_reads_back_as_itself(value: Any) -> None:
    text = _yaml_json(value)
    assert yaml.load(text, Loader=_LOADER) == value
    assert yaml.load(text, Loader=yaml.SafeLoader) == value


def test_a_character_beyond_the_basic_plane_is_one_character() -> None:
    """JSON's surrogate pair (\\ud800\\udc00) is no character to YAML: libyaml refused it and
    PyYAML made two lone surrogates of it (an annotation value '𐀀' broke the render)."""
    assert json.dumps("𐀀") == '"\\ud800\\udc00"'
    assert _yaml_json("𐀀") == '"\\U00010000"'
    assert yaml.load(_yaml_json({"team": "𐀀"}), Loader=_LOADER) == {"team": "𐀀"}
    # An escaped backslash before "u" in the data stays text.
    assert yaml.load(_yaml_json("\\ud800\\udc00"), Loader=_LOADER) == "\\ud800\\udc00"
