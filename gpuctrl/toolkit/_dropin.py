"""Drop-in mode: the runtimes go into a file of gpuctrl's own; the main config only imports it.

The invariant: the configuration containerd loads with the drop-in is the one it loaded
before plus the NVIDIA runtimes, whatever other files the config imports. containerd 1.x
loads the main file, then its imports (globs sorted) and theirs, and an imported CRI table
REPLACES the whole CRI table loaded before it (containerd#5837): so for a version 2 config the
drop-in carries the CRI table of the last file before it that has one (their effective CRI
settings) plus the runtimes. containerd 2.x (version 3) deep-merges plugin tables: the drop-in
carries only the runtimes, copied from the merged settings. A file loaded after the drop-in
that would undo it is refused. The drop-in's version is the main file's, never higher; it is
derived again on every install, so ``gpuctrl toolkit run`` follows later edits of its sources.
CRI-O reads ``crio.conf.d/*`` after ``crio.conf``, last wins per option.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from gpuctrl.toolkit import _toml as t
from gpuctrl.toolkit._containerd import CRI, load_config, runtime_tables
from gpuctrl.toolkit._errors import InvalidConfig
from gpuctrl.toolkit._imports import Source, add_import, covers
from gpuctrl.toolkit._layout import parse_layout
from gpuctrl.toolkit._settings import Change, Edit, Settings

__all__ = ["check_later", "containerd_drop_in", "crio_drop_in", "import_drop_in"]

_BANNER = "# Written by `gpuctrl toolkit install`; `gpuctrl toolkit cleanup` removes it.\n"


def import_drop_in(main: str, config_path: str, drop_in: str) -> Edit:
    """The main config ``main`` made to import ``drop_in`` (unchanged when an absolute glob
    of its ``imports`` already names it).

    Raises :class:`InvalidConfig` for a main config that cannot import (version 1) or that
    :func:`load_config` refuses.
    """
    data, version = load_config(main)
    if version == 1:
        raise InvalidConfig(
            "version 1 configs (no 'version' key) cannot use drop-in files: run without"
            " --drop-in, or migrate the file with 'containerd config migrate'"
        )
    imports = data.get("imports", [])
    if not isinstance(imports, list) or not all(isinstance(i, str) for i in imports):
        raise InvalidConfig("key 'imports' is not a list of file names")
    if covers(imports, config_path, drop_in):
        return Edit(main)
    lines = main.splitlines(keepends=True)
    expected = copy.deepcopy(data)
    changes = []
    if not data:
        newline = parse_layout(main).newline
        t.insert_lines(lines, len(lines), [f"version = 2{newline}"], newline)
        changes.append(Change("key", ("version",), None, 2))
        expected["version"] = 2
    layout = parse_layout("".join(lines))
    changes.append(add_import(lines, layout, data, drop_in))
    expected["imports"] = [*imports, drop_in]
    return Edit(t.verify("".join(lines), expected), tuple(changes))


def containerd_drop_in(
    version: int,
    before: Sequence[Source],
    after: Sequence[Source],
    drop_in: str,
    settings: Settings,
) -> Edit:
    """The drop-in's text, for a main config of ``version`` (2 or 3): ``before`` are the files
    containerd loads before ``drop_in`` (the main file first), ``after`` those it loads after.

    Raises :class:`InvalidConfig` naming a file in ``after`` that would undo the drop-in.
    """
    cri = ("plugins", CRI[version])
    tables = [s.data for s in before if isinstance(t.get_in(s.data, cri), dict)]
    if version == 2:
        effective = copy.deepcopy(t.get_in(tables[-1], cri)) if tables else {}
        table = copy.deepcopy(effective)
    else:
        effective = {}
        for data in tables:
            effective = _merged(effective, t.get_in(data, cri))
        table = {}
    _, runtimes, notes = runtime_tables({cri[0]: {cri[1]: effective}}, cri, settings)
    for name, runtime in runtimes.items():
        t.set_in(table, ("containerd", "runtimes", name), runtime)
    for path, key, value in settings.keys(()):
        t.set_in(table, (*path, key), value)
    check_later(version, after, drop_in, settings)
    import tomlkit  # only drop-in mode needs it: keep it out of the agent's start-up

    document = {"version": version, "plugins": {cri[1]: table}}
    return Edit(t.verify(_BANNER + tomlkit.dumps(document), document), (), notes)


def _merged(base: Any, over: Any) -> Any:
    """``over`` deep-merged into ``base`` as containerd 2.x merges imported plugin tables."""
    if not isinstance(base, dict) or not isinstance(over, dict):
        return copy.deepcopy(over)
    out = copy.deepcopy(base)
    for key, value in over.items():
        out[key] = _merged(out.get(key), value)
    return out


def check_later(
    version: int, later: Sequence[Source], ours: str, settings: Settings, in_place: bool = False
) -> None:
    """Refuse files that containerd loads after ``ours`` (the file holding the NVIDIA
    runtimes) and that replace its CRI table (version 2: containerd 1.x) or override one of
    install's keys in it (version 3: containerd 2.x merges) - or, ``in_place`` (``ours`` is the
    main config), that define runtimes the copies would have to be made from."""
    cri = ("plugins", CRI[version])
    keys: list[tuple[str, ...]] = [
        ("containerd", "runtimes", name) for name, _ in settings.runtimes()
    ]
    keys += [(*path, key) for path, key, _ in settings.keys(())]
    for source in later:
        theirs = t.get_in(source.data, cri)
        if not isinstance(theirs, dict):
            continue
        if version == 2:
            raise InvalidConfig(
                f"{source.path} is loaded after {ours} and has a [{t.dotted(cri)}] table, which"
                " replaces the whole CRI table before it on containerd 1.x: use a drop-in"
                " (--drop-in) that containerd loads after it"
            )
        if in_place and t.get_in(theirs, ("containerd", "runtimes")) is not t.MISSING:
            keys = [("containerd", "runtimes")]
        for path in keys:
            if t.get_in(theirs, path) is not t.MISSING:
                raise InvalidConfig(
                    f"{source.path} is loaded after {ours} and sets {t.dotted((*cri, *path))},"
                    " which overrides install's: use a drop-in (--drop-in) that containerd"
                    " loads after it"
                )


def crio_drop_in(settings: Settings) -> str:
    """A CRI-O drop-in defining the NVIDIA runtimes (and the default runtime if asked)."""
    import tomlkit

    runtime: dict[str, Any] = {}
    if settings.set_as_default:
        runtime["default_runtime"] = settings.runtime_name
    runtime["runtimes"] = {
        name: {"runtime_path": binary, "runtime_type": "oci"}
        for name, binary in settings.runtimes()
    }
    document = {"crio": {"runtime": runtime}}
    return t.verify(_BANNER + tomlkit.dumps(document), document)
