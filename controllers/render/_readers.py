"""How each OS family's package manager reads a repository file, and what folders it needs.

Shared by the renderer (which host folders a driver mounts) and `check_repo_config` (whether
the paths resolve), so both read a file the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from controllers.render import _yumrepo
from controllers.render._aptsources import parse_deb822, parse_one_line
from controllers.render._facts import ConfigMapFacts
from controllers.render._osfamily import APT, YUM, ZYPPER, OsFamily
from controllers.render._repofile import ParsedFile
from controllers.render._yumrepo import parse_repo_file

__all__ = ["inside", "parse", "used_folders"]

_PARSERS: dict[tuple[str, str], Callable[[str], ParsedFile]] = {
    (APT.name, ".list"): parse_one_line,
    (APT.name, ".sources"): parse_deb822,
    (YUM.name, ".repo"): lambda text: parse_repo_file(text, _yumrepo.YUM),
    (ZYPPER.name, ".repo"): lambda text: parse_repo_file(text, _yumrepo.ZYPPER),
}


def parse(family: OsFamily, key: str, text: str) -> ParsedFile:
    """File ``key`` as ``family``'s package manager reads it; the family must read the key."""
    suffix = next(s for s in family.suffixes if key.endswith(s))
    return _PARSERS[family.name, suffix](text)


def inside(path: str, folder: str) -> bool:
    """Whether normalised ``path`` is ``folder`` or below it."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def used_folders(family: OsFamily, config_map: ConfigMapFacts, folders: Iterable[str]) -> list[str]:
    """Those of ``folders`` that an enabled entry of a key ``family`` reads refers into, sorted.

    A file that does not parse still counts for the entries that do.
    """
    wanted = sorted(set(folders))
    used: set[str] = set()
    for key, text in config_map.data.items():
        if not family.reads(key):
            continue
        for entry in parse(family, key, text).entries:
            if entry.enabled:
                used.update(f for p in entry.paths for f in wanted if inside(p.path, f))
    return [f for f in wanted if f in used]
