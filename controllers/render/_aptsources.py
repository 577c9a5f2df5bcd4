"""apt's repository files: one-line ``*.list`` and deb822 ``*.sources``, as apt 2.x reads them.

One-line: ``deb [opt=value ...] URI suite [component ...]``, ``#`` starts a comment anywhere.
deb822: stanzas of ``Field: value`` separated by blank lines, continuation lines indented,
``#`` lines are comments; ``Types``, ``URIs`` and ``Suites`` are required, ``Components``
too unless every suite is an exact path (ends in ``/``); ``Enabled: no`` disables a stanza;
``Signed-By`` holds key files, fingerprints, or an armored key inline.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass

from controllers.render._repofile import (
    Entry,
    Finding,
    LocalPath,
    ParsedFile,
    file_lines,
    local_path,
)

__all__ = ["parse_deb822", "parse_one_line"]

_TYPES = ("deb", "deb-src")
# URIs apt reads from the local file system (mirror+file: a local mirror list).
_LOCAL_SCHEMES = ("file", "copy", "mirror+file")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_FINGERPRINT = re.compile(r"^(?:[0-9A-Fa-f]{16}|[0-9A-Fa-f]{40}|[0-9A-Fa-f]{64})!?$")
_TRUE = ("yes", "true", "with", "on", "enable", "1")
_FALSE = ("no", "false", "without", "off", "disable", "0")
_INLINE_KEY = "-----BEGIN PGP PUBLIC KEY BLOCK-----"
_FIELD = re.compile(r"^([A-Za-z0-9][!-9;-~]*)\s*:(.*)$")


@dataclass
class _Collector:
    """Findings and local paths gathered while one entry is parsed."""

    findings: list[Finding]
    paths: list[LocalPath]

    def error(self, line: int, message: str) -> None:
        self.findings.append(Finding(line, "error", message))

    def warning(self, line: int, message: str) -> None:
        self.findings.append(Finding(line, "warning", message))


def parse_one_line(text: str) -> ParsedFile:
    """The entries of a one-line ``.list`` file and its mistakes."""
    entries: list[Entry] = []
    findings: list[Finding] = []
    for number, raw in enumerate(file_lines(text), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        found = _Collector(findings, [])
        _one_line(number, line, found)
        entries.append(Entry(number, True, tuple(found.paths)))
    return ParsedFile(tuple(entries), tuple(findings))


def _one_line(number: int, line: str, found: _Collector) -> None:
    kind, _, rest = line.partition(" ")
    rest = rest.strip()
    if kind not in _TYPES:
        found.error(number, f"type {kind!r} is neither deb nor deb-src")
        return
    if rest.startswith("["):
        options, bracket, rest = rest[1:].partition("]")
        if not bracket:
            found.error(number, "'[' opens options that no ']' closes")
            return
        for option in options.split():
            _one_line_option(number, option, found)
    words = rest.split()
    if not words:
        found.error(number, "no URI: expected 'deb [options] URI suite [component ...]'")
        return
    _uri(number, "URI", words[0], found)
    if len(words) < 2:
        found.error(number, f"no suite after {words[0]!r}")
        return
    _suite_and_components(number, [words[1]], words[2:], found)


def _one_line_option(number: int, option: str, found: _Collector) -> None:
    name, equals, value = option.partition("=")
    name = name.rstrip("+-")
    if not equals or not name or not value:
        found.error(number, f"option {option!r} is not name=value")
        return
    if name == "signed-by":
        for key in value.split(","):
            _signed_by(number, "signed-by", key, found)
    elif name in ("trusted", "allow-insecure"):
        _insecure(number, f"{name}={value}", value, found)


def _insecure(number: int, option: str, value: str, found: _Collector) -> None:
    if value.lower() in _TRUE:
        found.warning(number, f"{option}: apt installs from it without checking its signature")


def _uri(number: int, field: str, uri: str, found: _Collector) -> None:
    if not _SCHEME.match(uri):
        found.error(number, f"{uri!r} is not a URI (no scheme such as http:// or file://)")
        return
    try:
        path = local_path(uri, _LOCAL_SCHEMES)
    except ValueError as error:
        found.error(number, str(error))
        return
    if path is not None:
        found.paths.append(LocalPath(number, field, uri, path, is_key=False))


def _signed_by(number: int, field: str, key: str, found: _Collector) -> None:
    if key.startswith("/"):
        path = posixpath.normpath("/" + key.lstrip("/"))
        found.paths.append(LocalPath(number, field, key, path, is_key=True))
    elif not _FINGERPRINT.match(key):
        found.error(
            number, f"{field} {key!r} is neither an absolute key file path nor a key fingerprint"
        )


def _suite_and_components(
    number: int, suites: list[str], components: list[str], found: _Collector
) -> None:
    exact = [s for s in suites if s.endswith("/")]
    if exact and components:
        found.error(number, f"suite {exact[0]!r} is an exact path, which takes no components")
    elif len(exact) < len(suites) and not components:
        suite = next(s for s in suites if not s.endswith("/"))
        found.error(
            number,
            f"suite {suite!r} needs at least one component (or an exact path ending in '/')",
        )


# deb822


@dataclass(frozen=True)
class _Field:
    line: int
    name: str  # as written
    lines: tuple[tuple[int, str], ...]  # (line, text) of the value; " ." lines are empty

    @property
    def value(self) -> str:
        return "\n".join(text for _, text in self.lines).strip()

    def words(self) -> Iterator[tuple[int, str]]:
        """Each whitespace- or comma-separated word of the value with its line."""
        for number, text in self.lines:
            for word in re.split(r"[\s,]+", text):
                if word:
                    yield number, word


def parse_deb822(text: str) -> ParsedFile:
    """The stanzas of a deb822 ``.sources`` file and its mistakes."""
    entries: list[Entry] = []
    findings: list[Finding] = []
    for start, fields in _stanzas(text, findings):
        found = _Collector(findings, [])
        enabled = _stanza(start, fields, found)
        entries.append(Entry(start, enabled, tuple(found.paths)))
    return ParsedFile(tuple(entries), tuple(findings))


def _stanzas(text: str, findings: list[Finding]) -> Iterator[tuple[int, dict[str, _Field]]]:
    """Each stanza's first line and fields by lower-case name; syntax errors go to findings."""
    fields: dict[str, _Field] = {}
    start = 0
    last: str | None = None
    for number, raw in enumerate([*file_lines(text), ""], start=1):
        if raw.startswith("#"):
            continue
        if not raw.strip():
            if fields:
                yield start, fields
            fields, last = {}, None
            continue
        if raw[0] in " \t":
            if last is None:
                findings.append(Finding(number, "error", "a continuation line before any field"))
                continue
            previous = fields[last]
            extra = "" if raw.strip() == "." else raw.strip()
            lines = (*previous.lines, (number, extra))
            fields[last] = _Field(previous.line, previous.name, lines)
            continue
        match = _FIELD.match(raw)
        if match is None:
            findings.append(Finding(number, "error", f"{raw.strip()!r} is not 'Field: value'"))
            last = None
            continue
        name, value = match.group(1), match.group(2).strip()
        if not fields:
            start = number
        if name.lower() in fields:
            findings.append(Finding(number, "error", f"field {name!r} is given twice"))
            last = None
            continue
        fields[name.lower()] = _Field(number, name, ((number, value),))
        last = name.lower()


def _stanza(start: int, fields: dict[str, _Field], found: _Collector) -> bool:
    """Check one stanza; whether it is enabled."""
    enabled = True
    if "enabled" in fields:
        value = fields["enabled"].value.strip().lower()
        if value not in _TRUE + _FALSE:
            found.error(fields["enabled"].line, f"Enabled: {value!r} is neither yes nor no")
        enabled = value not in _FALSE
    missing = [name for name in ("Types", "URIs", "Suites") if name.lower() not in fields]
    if missing:
        found.error(start, f"the stanza has no {', '.join(missing)} field")
    if "types" in fields:
        for number, kind in fields["types"].words():
            if kind not in _TYPES:
                found.error(number, f"type {kind!r} is neither deb nor deb-src")
    if "uris" in fields:
        for number, uri in fields["uris"].words():
            _uri(number, "URIs", uri, found)
    if "suites" in fields:
        components = fields["components"].value.split() if "components" in fields else []
        line = fields["components"].line if components else fields["suites"].line
        _suite_and_components(line, fields["suites"].value.split(), components, found)
    if "signed-by" in fields:
        _deb822_signed_by(fields["signed-by"], found)
    for name in ("trusted", "allow-insecure"):
        if name in fields:
            option = f"{fields[name].name}: {fields[name].value}"
            _insecure(fields[name].line, option, fields[name].value.strip(), found)
    return enabled


def _deb822_signed_by(field: _Field, found: _Collector) -> None:
    value = field.value.strip()
    if _INLINE_KEY in value:
        if not value.startswith(_INLINE_KEY) or not value.endswith(
            "-----END PGP PUBLIC KEY BLOCK-----"
        ):
            found.error(
                field.line,
                "Signed-By: an inline key must run from -----BEGIN PGP PUBLIC KEY BLOCK----- "
                "to -----END PGP PUBLIC KEY BLOCK----- (empty lines written as ' .')",
            )
        return
    if not value:
        found.error(field.line, "Signed-By is empty")
    for number, key in field.words():
        _signed_by(number, "Signed-By", key, found)
