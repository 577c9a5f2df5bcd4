"""What install is asked to do, and what it records having done."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Literal

__all__ = ["Change", "Edit", "Settings"]

RuntimeKind = Literal["containerd", "crio"]

# The runtimes install adds, after NVIDIA's toolkit: (name suffix of the binary, runtime name).
_VARIANTS = (("", None), (".cdi", "nvidia-cdi"), (".legacy", "nvidia-legacy"))


@dataclass(frozen=True)
class Settings:
    """The runtime configuration install asks for (``runtime_dir`` holds NVIDIA's binaries)."""

    runtime_dir: str
    runtime_name: str = "nvidia"  # renames the first runtime only, as NVIDIA's installer does
    set_as_default: bool = False

    def runtimes(self) -> tuple[tuple[str, str], ...]:
        """``(runtime name, binary path)`` of each runtime install adds, in order."""
        return tuple(
            (
                name or self.runtime_name,
                posixpath.join(self.runtime_dir, f"nvidia-container-runtime{suffix}"),
            )
            for suffix, name in _VARIANTS
        )


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
    """A document after an edit, and the changes made to get there (empty: nothing to do)."""

    text: str
    changes: tuple[Change, ...] = ()
