"""Hypothesis: generated containerd configs (versions 1-3, any table order, indentation, quote
style, blank lines, comments, CRLF, final newline or not) have the corpus's properties."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuctrl.toolkit import Settings, add_runtimes, revert_changes
from gpuctrl.toolkit._containerd import DEFAULT_RUNC

CRI = {None: "cri", 2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
OURS = Settings("/usr/local/nvidia/toolkit", set_as_default=True)
KEEP = Settings("/usr/local/nvidia/toolkit")

scalars = st.one_of(
    st.booleans(),
    st.integers(-1000, 1000),
    st.text(st.characters(codec="ascii", categories=["L", "N", "P", "Zs"]), max_size=12),
    st.lists(st.sampled_from(["a", "b/c", "d e"]), max_size=2),
)
leaves = st.dictionaries(st.sampled_from(["k_one", "k_two", "Root", "snap"]), scalars, max_size=3)


@st.composite
def configs(draw: st.DrawFn, versions: tuple[int | None, ...] = (None, 2, 3)) -> tuple[str, bool]:
    """A config text of one of ``versions`` (None: no version key, i.e. version 1), and whether
    it already had a runtime named like one of ours."""
    version = draw(st.sampled_from(versions))
    cri = ("plugins", CRI[version])
    names = draw(st.lists(st.sampled_from(["runc", "crun", "kata", "nvidia"]), unique=True))
    tables: dict[tuple[str, ...], dict[str, Any]] = {}
    for name in names:
        path = (*cri, "containerd", "runtimes", name)
        kinds = ["io.containerd.runc.v2", "io.containerd.kata.v2"] if name == "kata" else []
        kind = draw(st.sampled_from(kinds or ["io.containerd.runc.v2"]))
        tables[path] = draw(leaves) | {"runtime_type": kind}
        if draw(st.booleans()) or name == "nvidia":  # an nvidia one runs NVIDIA's runtime
            options = {"SystemdCgroup": draw(st.booleans())} | draw(leaves)
            if name == "nvidia":
                options["BinaryName"] = "/usr/local/nvidia/toolkit/nvidia-container-runtime"
            tables[(*path, "options")] = options
    if draw(st.booleans()):
        default = draw(st.sampled_from([*names, "runc"]))
        tables[(*cri, "containerd")] = draw(leaves) | {"default_runtime_name": default}
    for path in draw(
        st.lists(st.sampled_from([("grpc",), (*cri,), ("plugins", "x.y")]), unique=True)
    ):
        tables[path] = draw(leaves)
    top = {"version": version} if version else {}
    order = draw(st.permutations(list(tables)))
    return _emit(draw, top | draw(leaves), [(p, tables[p]) for p in order]), "nvidia" in names


def _emit(
    draw: st.DrawFn, top: dict[str, Any], tables: list[tuple[tuple[str, ...], dict[str, Any]]]
) -> str:
    step = draw(st.sampled_from(["", "  ", "\t"]))
    quote = draw(st.sampled_from(['"', "'"]))
    blank = draw(st.booleans())
    nl = draw(st.sampled_from(["\n", "\r\n"]))
    rows = [f"{k} = {_value(v, quote)}" for k, v in top.items()]
    for path, body in tables:
        indent = step * (len(path) - 1)
        if blank and rows:
            rows.append("")
        if draw(st.booleans()):
            rows.append(f"{indent}# about {path[-1]}")
        spelled = ".".join(
            k if k.replace("_", "").isalnum() else f"{quote}{k}{quote}" for k in path
        )
        rows.append(f"{indent}[{spelled}]")
        rows += [f"{indent}{step}{k} = {_value(v, quote)}" for k, v in body.items()]
    text = nl.join(rows)
    return text + nl if draw(st.booleans()) else text


def _value(value: Any, quote: str) -> str:
    if isinstance(value, str) and quote == "'" and "'" not in value:
        return f"'{value}'"
    return json.dumps(value)


@settings(max_examples=100, deadline=None)
@given(config=configs(), ours=st.sampled_from([OURS, KEEP]))
def test_generated_pure_properties(
    config: tuple[str, bool], ours: Settings, runc: Callable[[bytes | None], Any], copies: Any
) -> None:
    text, had_ours = config
    tomllib.loads(text)
    edit = add_runtimes(text, ours)
    runtimes = _plugin(edit.text)["containerd"]["runtimes"]
    assert {name: runtimes[name] for name, _ in ours.runtimes()} == copies(text, ours)
    if copies(edit.text, ours) == copies(text, ours):  # else the agent edits the original
        again = add_runtimes(edit.text, ours)
        assert (again.text, again.changes) == (edit.text, ())
    reverted = revert_changes(edit.text, edit.changes)
    assert tomllib.loads(reverted) == tomllib.loads(text)
    if not had_ours:
        assert reverted == text
    assert runc(edit.text.encode()) == runc(text.encode())
    assert runc(reverted.encode()) == runc(text.encode())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs())
def test_generated_round_trip_and_third_party_edit(
    config: tuple[str, bool], properties: Any
) -> None:
    text, had_ours = config
    properties.round_trip(text.encode(), OURS, drop_in=False)
    properties.third_party_edit(text.encode(), OURS, exact=not had_ours)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs(versions=(2, 3)), ours=st.sampled_from([OURS, KEEP]))
def test_generated_drop_in_round_trip(
    config: tuple[str, bool], ours: Settings, properties: Any, copies: Any, drop_in: Any
) -> None:
    """Drop-in mode: install -> cleanup restores both files, install twice == once; the
    drop-in holds the runtimes and (version 2: containerd 1.x replaces the whole plugin table)
    every other setting of the main file's CRI table unchanged."""
    text, _ = config
    properties.round_trip(text.encode(), ours, drop_in=True)
    _, drop = drop_in(text, "/etc/containerd/config.toml", "/d/99-nvidia.toml", ours)
    plugin, original = _plugin(drop), _plugin(text)
    containerd = plugin["containerd"]
    runtimes = containerd["runtimes"]
    assert {name: runtimes.pop(name) for name, _ in ours.runtimes()} == copies(text, ours)
    if ours.set_as_default:
        assert containerd.pop("default_runtime_name") == ours.runtime_name
        original.get("containerd", {}).pop("default_runtime_name", None)
    if tomllib.loads(text).get("version") == 2:
        theirs = original.get("containerd", {}).get("runtimes", {})
        if not theirs:  # containerd's built-in runc, spelled out
            assert runtimes.pop("runc") == DEFAULT_RUNC
        for name, _ in ours.runtimes():
            theirs.pop(name, None)
        assert _pruned(plugin) == _pruned(original)


def _plugin(text: str) -> dict[str, Any]:
    """The CRI plugin's table of a config (empty if it has none)."""
    data = tomllib.loads(text)
    version = data.get("version")
    for key in ("plugins", CRI[version]):
        data = data.get(key, {})
    return data


def _pruned(table: dict[str, Any]) -> dict[str, Any]:
    """``table`` without empty tables (at any depth)."""
    out = {k: _pruned(v) if isinstance(v, dict) else v for k, v in table.items()}
    return {k: v for k, v in out.items() if v != {}}
