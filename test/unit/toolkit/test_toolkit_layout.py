"""The line-level header scanner and key spelling."""

from __future__ import annotations

import pytest

from gpuctrl.toolkit._errors import InvalidConfig
from gpuctrl.toolkit._layout import format_key, parse_layout


@pytest.mark.parametrize(
    ("text", "paths"),
    [
        ("[a]\nx = 1\n", [("a",)]),
        ("  [ a . \"b.c\" . 'd' ]  # note\n", [("a", "b.c", "d")]),
        ("[[arr]]\n[arr.sub]\n", [("arr",), ("arr", "sub")]),
        ('x = """\n[not.a.header]\n"""\n[real]\n', [("real",)]),
        ("x = '''\n[not]\n'''\n[real]\n", [("real",)]),
        ('x = """ends \\""" here"""\n[real]\n', [("real",)]),
        ("x = [\n  [1, 2],\n  [3],\n]\n[real]\n", [("real",)]),
        ('x = "[not]" # [nor]\n[real]\n', [("real",)]),
        ('["quoted \\"key\\""]\n', [('quoted "key"',)]),
    ],
    ids=[
        "plain",
        "spaced-quoted",
        "array-of-tables",
        "multi-line-basic",
        "multi-line-literal",
        "escaped-quotes",
        "multi-line-array",
        "strings-and-comments",
        "escapes",
    ],
)
def test_headers(text: str, paths: list[tuple[str, ...]]) -> None:
    assert [h.path for h in parse_layout(text).headers] == paths


def test_block_end_skips_trailing_blank_lines() -> None:
    layout = parse_layout("[a]\nx = 1\n\n\n[b]\n")
    assert layout.block_end(layout.headers[0]) == 2
    assert layout.block_end(layout.headers[1]) == 5


def test_newline_style() -> None:
    assert parse_layout("a = 1\r\n[b]\r\n").newline == "\r\n"
    assert parse_layout("a = 1\n[b]\n").newline == "\n"


def test_unreadable_header_names_its_line() -> None:
    with pytest.raises(InvalidConfig, match="line 2"):
        parse_layout("a = 1\n[b c]\n")


@pytest.mark.parametrize(
    ("key", "quote", "spelled"),
    [
        ("runc", '"', "runc"),
        ("nvidia-cdi", '"', "nvidia-cdi"),
        ("io.containerd.grpc.v1.cri", '"', '"io.containerd.grpc.v1.cri"'),
        ("io.containerd.cri.v1.runtime", "'", "'io.containerd.cri.v1.runtime'"),
        ("it's", "'", '"it\'s"'),
    ],
)
def test_format_key(key: str, quote: str, spelled: str) -> None:
    assert format_key(key, quote) == spelled
