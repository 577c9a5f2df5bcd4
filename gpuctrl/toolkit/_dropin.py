"""Drop-in mode: the runtimes go into a file of gpuctrl's own; the main config only imports it.

containerd 1.x replaces a whole plugin table with an imported one (containerd#5837), so for a
version 2 config the drop-in carries the main file's complete CRI table plus the runtimes; for
version 3 (containerd 2.x deep-merges) it carries only the runtimes. The drop-in's version is
the main file's, never higher. CRI-O reads ``crio.conf.d/*`` after ``crio.conf``, last wins.
"""

from __future__ import annotations

import copy
from typing import Any

from gpuctrl.toolkit import _toml as t
from gpuctrl.toolkit._containerd import cri_path, load_config, runtime_tables
from gpuctrl.toolkit._errors import InvalidConfig
from gpuctrl.toolkit._imports import add_import, covers
from gpuctrl.toolkit._layout import format_key, parse_layout
from gpuctrl.toolkit._settings import Change, Edit, Settings

__all__ = ["containerd_drop_in", "crio_drop_in"]

_BANNER = "# Written by `gpuctrl toolkit install`; `gpuctrl toolkit cleanup` removes it.\n"


def containerd_drop_in(
    main: str, config_path: str, drop_in: str, settings: Settings
) -> tuple[Edit, str]:
    """The main config ``main`` made to import ``drop_in``, and the drop-in's text.

    Raises :class:`InvalidConfig` for a main config that cannot import (version 1) or that
    :func:`load_config` refuses.
    """
    data, version = load_config(main)
    if version == 1:
        raise InvalidConfig(
            "version 1 configs (no 'version' key) cannot use drop-in files: run without"
            " --drop-in, or migrate the file with 'containerd config migrate'"
        )
    cri = cri_path(data, version)
    plugin = t.get_in(data, cri)
    table: dict[str, Any] = (
        copy.deepcopy(plugin) if version == 2 and plugin is not t.MISSING else {}
    )
    _, runtimes = runtime_tables(data, cri, settings)
    for name, runtime in runtimes.items():
        t.set_in(table, ("containerd", "runtimes", name), runtime)
    if settings.set_as_default:
        t.set_in(table, ("containerd", "default_runtime_name"), settings.runtime_name)
    import tomlkit  # only drop-in mode needs it: keep it out of the agent's start-up

    document = {"version": version, "plugins": {cri[1]: table}}
    text = t.verify(_BANNER + tomlkit.dumps(document), document)
    return _import(main, data, config_path, drop_in), text


def crio_drop_in(settings: Settings) -> str:
    """A CRI-O drop-in defining the NVIDIA runtimes (and the default runtime if asked)."""
    rows = [_BANNER]
    if settings.set_as_default:
        rows += ["[crio.runtime]\n", f"default_runtime = {t.string(settings.runtime_name)}\n"]
    for name, binary in settings.runtimes():
        rows += [
            "\n" if len(rows) > 1 else "",
            f"[crio.runtime.runtimes.{format_key(name)}]\n",
            f"runtime_path = {t.string(binary)}\n",
            'runtime_type = "oci"\n',
        ]
    text = "".join(rows)
    t.load(text)
    return text


def _import(main: str, data: dict[str, Any], config_path: str, drop_in: str) -> Edit:
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
