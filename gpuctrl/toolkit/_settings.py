"""What install is asked to do, and what it records having done."""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Literal

from gpuctrl.toolkit._errors import InvalidConfig

__all__ = ["Change", "Edit", "Settings"]

RuntimeKind = Literal["containerd", "crio"]

# The runtimes install adds, after NVIDIA's toolkit: (name suffix of the binary, runtime name).
_VARIANTS = (("", None), (".cdi", "nvidia-cdi"), (".legacy", "nvidia-legacy"))
# A RuntimeClass handler is a DNS label; runc is containerd's built-in runtime.
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_RESERVED = ("runc",)


@dataclass(frozen=True)
class Settings:
    """The runtime configuration install asks for (``runtime_dir`` holds NVIDIA's binaries)."""

    runtime_dir: str
    runtime_name: str = "nvidia"  # renames the first runtime only, as NVIDIA's installer does
    set_as_default: bool = False
    enable_cdi: bool = False  # containerd's own CDI support, for the device plugin's CDI devices

    def __post_init__(self) -> None:
        """Refuse settings that cannot be right whatever the config: raises
        :class:`InvalidConfig` naming the bad value."""
        if not posixpath.isabs(self.runtime_dir):
            raise InvalidConfig(
                f"--runtime-dir {self.runtime_dir!r} is not an absolute path: containerd would"
                " resolve it against its own working directory"
            )
        name = self.runtime_name
        if not _NAME.fullmatch(name):
            raise InvalidConfig(
                f"--runtime-name {name!r} is not a runtime name: lower-case letters, digits and"
                " '-', at most 63, starting and ending with a letter or digit (a RuntimeClass"
                " handler)"
            )
        others = [n for suffix, n in _VARIANTS if n]
        if name in _RESERVED or name in others:
            taken = "containerd's own runtime" if name in _RESERVED else "another NVIDIA runtime"
            raise InvalidConfig(f"--runtime-name {name!r} is {taken}: choose another name")

    def runtimes(self) -> tuple[tuple[str, str], ...]:
        """``(runtime name, binary path)`` of each runtime install adds, in order."""
        return tuple(
            (
                name or self.runtime_name,
                posixpath.join(self.runtime_dir, f"nvidia-container-runtime{suffix}"),
            )
            for suffix, name in _VARIANTS
        )

    def keys(self, cri: tuple[str, ...]) -> tuple[tuple[tuple[str, ...], str, str | bool], ...]:
        """``(table, key, value)`` of each key install sets under the CRI plugin table ``cri``."""
        keys: list[tuple[tuple[str, ...], str, str | bool]] = []
        if self.set_as_default:
            keys.append(((*cri, "containerd"), "default_runtime_name", self.runtime_name))
        if self.enable_cdi:
            keys.append((cri, "enable_cdi", True))
        return tuple(keys)


@dataclass(frozen=True)
class Change:
    """One edit install made to a file: enough to undo it when someone edited the file since.

    ``kind`` is ``table`` (a runtime table at ``path``; ``previous`` holds the TOML lines it
    replaced, or None when it was added), ``key`` (``path`` set to ``value``; ``previous`` is the
    value before, None when the key was absent), ``header`` (an empty table header install
    wrote for ``path``) or ``import`` (``value`` added to ``imports``; ``previous`` is None when
    install created the ``imports`` key).
    """

    kind: Literal["table", "key", "header", "import"]
    path: tuple[str, ...]
    previous: str | int | None = None
    value: str | int | None = None


@dataclass(frozen=True)
class Edit:
    """A document after an edit, the changes made to get there (empty: nothing to do), and
    notes for the user about choices the edit made."""

    text: str
    changes: tuple[Change, ...] = ()
    notes: tuple[str, ...] = ()
