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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

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
_FINGERPRINT = re.compile(r"^[0-9A-Fa-f]{40}!?$")  # apt 2.6 takes v4 fingerprints only
_TRUE = ("yes", "true", "with", "on", "enable", "1")
_FALSE = ("no", "false", "without", "off", "disable", "0")
_INLINE_KEY = "-----BEGIN PGP PUBLIC KEY BLOCK-----"
# Options of a source's Release file: apt refuses a source listed twice with different values
# (set or unset) of one of them.
_RELEASE_OPTIONS = (
    "allow-downgrade-to-insecure",
    "allow-insecure",
    "allow-weak",
    "check-date",
    "check-valid-until",
    "date-max-future",
    "inrelease-path",
    "trusted",
    "valid-until-max",
    "valid-until-min",
)
# apt's tag files: the name runs to the first colon (so "URIs file:///x" is a field named
# "URIs file"), surrounding blanks dropped.
_FIELD = re.compile(r"^([^:\s][^:]*?)\s*:(.*)$")


@dataclass
class _Collector:
    """Findings, local paths and sources gathered while one entry is parsed."""

    findings: list[Finding]
    paths: list[LocalPath] = field(default_factory=list)
    sources: list[tuple[str, str]] = field(default_factory=list)
    signed_by: str = ""
    release: dict[str, str] = field(default_factory=dict)

    def entry(self, line: int, enabled: bool) -> Entry:
        release = tuple(sorted(self.release.items()))
        return Entry(line, enabled, tuple(self.paths), tuple(self.sources), self.signed_by, release)

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
        found = _Collector(findings)
        _one_line(number, line, found)
        entries.append(found.entry(number, True))
    return ParsedFile(tuple(entries), tuple(findings))


def _one_line(number: int, line: str, found: _Collector) -> None:
    kind, *tail = line.split(None, 1)
    rest = tail[0] if tail else ""
    if kind not in _TYPES:
        found.error(number, f"type {kind!r} is neither deb nor deb-src")
        return
    if rest.startswith("["):
        options, bracket, rest = rest[1:].partition("]")
        if not bracket:
            found.error(number, "'[' opens options that no ']' closes")
            return
        _one_line_options(number, options.split(), found)
    words = rest.split()
    if not words:
        found.error(number, "no URI: expected 'deb [options] URI suite [component ...]'")
        return
    _uri(number, "URI", words[0], found)
    if len(words) < 2:
        found.error(number, f"no suite after {words[0]!r}")
        return
    _suite_and_components(number, [words[1]], words[2:], found)
    found.sources.append((_site(words[0]), words[1]))


def _one_line_options(number: int, options: list[str], found: _Collector) -> None:
    """Check ``[options]``: as in apt, ``name=`` replaces an earlier value, ``name+=`` adds to
    it and ``name-=`` takes away from it."""
    values: dict[str, list[str]] = {}
    for option in options:
        name, equals, value = option.partition("=")
        if not equals or not name.rstrip("+-") or not value:
            found.error(number, f"option {option!r} is not name=value")
            continue
        given = value.split(",")
        if name.endswith("+"):
            values.setdefault(name[:-1], []).extend(given)
        elif name.endswith("-"):
            values[name[:-1]] = [v for v in values.get(name[:-1], []) if v not in given]
        else:
            values[name] = given
    if values.get("signed-by"):
        found.signed_by = ",".join(values["signed-by"])
        for key in values["signed-by"]:
            _signed_by(number, "signed-by", key, found)
    for name in _RELEASE_OPTIONS:
        if name in values:
            found.release[name] = ",".join(values[name])
    for name in ("trusted", "allow-insecure"):
        if name in values:
            value = ",".join(values[name])
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


def _site(uri: str) -> str:
    """What apt tells sources apart by: the URI less its access method, ending in '/'."""
    parts = urlsplit(uri)
    return f"//{parts.netloc}{parts.path.rstrip('/')}/"


def signed_by_conflicts(files: Sequence[tuple[str, ParsedFile]]) -> list[tuple[str, Finding]]:
    """(key, error) for each enabled entry that lists a source an earlier one (in ``files``'
    order, apt's reading order) lists with another Signed-By or Release option (``trusted``,
    ``check-valid-until``, ...): apt then reads no source at all. As in apt, an entry without
    Signed-By before one with it is no conflict; for the options, unset differs from set.
    """
    first: dict[tuple[str, str], tuple[str, Entry]] = {}
    keyring: dict[tuple[str, str], tuple[str, Entry]] = {}  # who set each source's Signed-By
    found: list[tuple[str, Finding]] = []
    for key, parsed in files:
        for entry in parsed.entries:
            for source in entry.sources if entry.enabled else ():
                problem = _conflict(source, key, entry, first, keyring)
                if problem is not None:
                    found.append((key, Finding(entry.line, "error", problem)))
                    break
    return found


def _conflict(
    source: tuple[str, str],
    key: str,
    entry: Entry,
    first: dict[tuple[str, str], tuple[str, Entry]],
    keyring: dict[tuple[str, str], tuple[str, Entry]],
) -> str | None:
    where = f"suite {source[1]!r} of {source[0].removeprefix('//')!r}"
    first_key, earliest = first.setdefault(source, (key, entry))
    ours, theirs = dict(entry.release), dict(earliest.release)
    for name in sorted(ours.keys() | theirs.keys()):
        if ours.get(name) != theirs.get(name):
            return (
                f"{where} is listed with {name} {ours.get(name, '(unset)')!r} here and "
                f"{theirs.get(name, '(unset)')!r} at key {first_key!r} line {earliest.line}: "
                "apt refuses to read the sources"
            )
    setter_key, setter = keyring.setdefault(source, (key, entry))
    if not setter.signed_by:  # apt adopts the first Signed-By it meets
        keyring[source] = (key, entry)
    elif setter.signed_by != entry.signed_by:
        return (
            f"{where} is listed with Signed-By {entry.signed_by or '(none)'!r} here and "
            f"{setter.signed_by!r} at key {setter_key!r} line {setter.line}: apt refuses to "
            "read the sources"
        )
    return None


# deb822


@dataclass(frozen=True)
class _Field:
    line: int
    name: str  # as written
    lines: list[tuple[int, str]]  # (line, text) of the value; " ." lines are empty

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
        found = _Collector(findings)
        enabled = _stanza(start, fields, found)
        entries.append(found.entry(start, enabled))
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
                message = "a continuation line before any field belongs to no field"
                findings.append(Finding(number, "warning", message))
                continue
            extra = "" if raw.strip() == "." else raw.strip()
            fields[last].lines.append((number, extra))
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
        fields[name.lower()] = _Field(number, name, [(number, value)])
        last = name.lower()


def _stanza(start: int, fields: dict[str, _Field], found: _Collector) -> bool:
    """Check one stanza; whether it is enabled. Like apt, only the Types of a disabled stanza
    are checked."""
    enabled = _enabled(fields, found)
    required = ("Types", "URIs", "Suites") if enabled else ("Types",)
    missing = [name for name in required if name.lower() not in fields]
    if missing:
        found.error(start, f"the stanza has no {', '.join(missing)} field")
    if "types" in fields:
        for number, kind in fields["types"].words():
            if kind not in _TYPES:
                found.error(number, f"type {kind!r} is neither deb nor deb-src")
    if not enabled:
        return False
    if "uris" in fields:
        for number, uri in fields["uris"].words():
            _uri(number, "URIs", uri, found)
    if "suites" in fields:
        components = fields["components"].value.split() if "components" in fields else []
        line = fields["components"].line if components else fields["suites"].line
        _suite_and_components(line, fields["suites"].value.split(), components, found)
        uris = [uri for _, uri in fields["uris"].words()] if "uris" in fields else []
        suites = fields["suites"].value.split()
        found.sources += [(_site(uri), suite) for uri in uris for suite in suites]
    if "signed-by" in fields:
        _deb822_signed_by(fields["signed-by"], found)
    for name in _RELEASE_OPTIONS:
        if name in fields:
            found.release[name] = fields[name].value
    for name in ("trusted", "allow-insecure"):
        if name in fields:
            option = f"{fields[name].name}: {fields[name].value}"
            _insecure(fields[name].line, option, fields[name].value.strip(), found)
    return True


def _enabled(fields: dict[str, _Field], found: _Collector) -> bool:
    if "enabled" not in fields:
        return True
    value = fields["enabled"].value.lower()
    if value not in _TRUE + _FALSE:
        message = f"Enabled: {value!r} is neither yes nor no: apt takes the stanza as enabled"
        found.warning(fields["enabled"].line, message)
    return value not in _FALSE


def _deb822_signed_by(field: _Field, found: _Collector) -> None:
    value = field.value.strip()
    found.signed_by = value if _INLINE_KEY in value else ",".join(w for _, w in field.words())
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
