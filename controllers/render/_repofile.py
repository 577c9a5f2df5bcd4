"""What a parsed repository file says: its entries, the node paths they need, and its mistakes.

The parsers (`_aptsources`, `_yumrepo`) turn a file's text into a `ParsedFile`; `_repo` decides
whether the paths resolve inside the driver container. Line numbers count from 1.
"""

from __future__ import annotations

import posixpath
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import unquote, urlsplit

__all__ = ["Entry", "Finding", "LocalPath", "ParsedFile", "Severity", "file_lines", "local_path"]

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Finding:
    """A mistake (or a risk, when a warning) on ``line`` of a file."""

    line: int
    severity: Severity
    message: str


@dataclass(frozen=True)
class LocalPath:
    """A path on the node that an entry reads: a ``file://`` repository or a key file."""

    line: int
    field: str  # the field as written: "URIs", "Signed-By", "baseurl", "gpgkey", ...
    value: str  # the value as written
    path: str  # the absolute, normalised path it names
    is_key: bool  # a key file rather than a repository


@dataclass(frozen=True)
class Entry:
    """One repository: an apt line or deb822 stanza, or a ``[id]`` section of a .repo file."""

    line: int
    enabled: bool  # disabled entries are parsed, but their paths need not resolve
    paths: tuple[LocalPath, ...] = ()
    # apt only: the (site and path, suite) pairs the entry lists, and its Signed-By as written
    # ("" when none); apt refuses one source listed with two Signed-By values.
    sources: tuple[tuple[str, str], ...] = ()
    signed_by: str = ""
    release: tuple[tuple[str, str], ...] = ()  # apt only: options every listing must agree on


@dataclass(frozen=True)
class ParsedFile:
    """The entries of a file and what is wrong in it."""

    entries: tuple[Entry, ...] = ()
    findings: tuple[Finding, ...] = field(default=())


def local_path(uri: str, schemes: Collection[str]) -> str | None:
    """The node path of ``uri`` when its scheme is one of ``schemes`` (local ones), else None.

    Raises ValueError when a local URI names a host or a relative path. The path is
    percent-decoded and normalised, so ``file:///opt/r/../../etc`` names ``/etc``.
    """
    scheme, colon, _ = uri.partition(":")
    if not colon or scheme.lower() not in schemes:
        return None
    parts = urlsplit(uri)
    if parts.netloc not in ("", "localhost"):
        raise ValueError(f"{uri!r} names host {parts.netloc!r}; a local URI names none")
    path = unquote(parts.path)
    if not path.startswith("/"):
        raise ValueError(f"{uri!r} does not name an absolute path")
    return posixpath.normpath("/" + path.lstrip("/"))


def file_lines(text: str) -> list[str]:
    """The lines of ``text`` as package managers count them: split at ``\n`` only (not at the
    other characters `str.splitlines` knows), a ``\r`` before it dropped."""
    return [line.removesuffix("\r") for line in text.split("\n")]
