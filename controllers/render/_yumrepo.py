"""``*.repo`` files of yum/dnf and zypper: INI sections, one repository each.

A section ``[id]`` holds ``key=value`` options (``#`` and ``;`` lines are comments, indented
lines continue the previous value); keys are case-sensitive (``BASEURL`` is not read), boolean
values are not. dnf separates the URLs of an option with spaces or commas, zypper with spaces
only (``a,b`` is one URL to it: an error here). A repository needs ``baseurl`` (or ``mirrorlist`` /
``metalink``); ``enabled`` and ``gpgcheck`` are booleans; ``gpgkey`` lists key URLs. zypper
also reads ``dir:`` URIs from the local file system.
"""

from __future__ import annotations

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

__all__ = ["YUM", "ZYPPER", "Dialect", "parse_repo_file"]


@dataclass(frozen=True)
class Dialect:
    """How one package manager reads a ``.repo`` file: the URI schemes that name local paths
    and what separates the URLs of one option."""

    schemes: tuple[str, ...]
    separators: str  # a regular expression
    comma_separates: bool


YUM = Dialect(("file",), r"[\s,]+", comma_separates=True)  # dnf: spaces or commas
ZYPPER = Dialect(("file", "dir"), r"\s+", comma_separates=False)  # zypper: spaces only
_ID = re.compile(r"^[A-Za-z0-9_.:-]+$")
_SECTION = re.compile(r"^\[(.*)\]$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_TRUE = ("1", "yes", "true", "on")
_FALSE = ("0", "no", "false", "off")
_URL_LISTS = ("baseurl", "mirrorlist", "metalink", "gpgkey")
_READ = (*_URL_LISTS, "enabled", "gpgcheck")  # options are case-sensitive, values are not


@dataclass
class _Section:
    line: int
    name: str
    options: dict[str, tuple[int, list[tuple[int, str]]]]  # key -> (line, value lines)

    def words(self, key: str, separators: str = r"\s+") -> Iterator[tuple[int, str]]:
        for number, text in self.options[key][1] if key in self.options else ():
            for word in re.split(separators, text):
                if word:
                    yield number, word

    def value(self, key: str) -> str:
        return " ".join(word for _, word in self.words(key))


def parse_repo_file(text: str, dialect: Dialect) -> ParsedFile:
    """The ``[id]`` sections of a ``.repo`` file as ``dialect`` reads them, and its mistakes."""
    findings: list[Finding] = []
    entries = tuple(_entry(section, dialect, findings) for section in _sections(text, findings))
    return ParsedFile(entries, tuple(findings))


def _sections(text: str, findings: list[Finding]) -> list[_Section]:
    sections: list[_Section] = []
    names: set[str] = set()
    last: str | None = None
    for number, raw in enumerate(file_lines(text), start=1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if raw[0] in " \t" and last is not None and sections:
            sections[-1].options[last][1].append((number, line))
            continue
        last = None
        match = _SECTION.match(line)
        if match:
            _add_section(sections, names, number, match.group(1).strip(), findings)
            continue
        key, equals, value = line.partition("=")
        key = key.strip()
        if not equals or not key:
            findings.append(Finding(number, "error", f"{line!r} is neither [id] nor key=value"))
        elif key != key.lower() and key.lower() in _READ:
            message = f"{key!r} is not read: dnf and zypper know only {key.lower()!r}"
            findings.append(Finding(number, "error", message))
        elif not sections:
            findings.append(Finding(number, "error", f"{line!r} comes before any [id] section"))
        elif key in sections[-1].options:
            findings.append(Finding(number, "error", f"{key!r} is given twice in this section"))
        else:
            sections[-1].options[key] = (number, [(number, value.strip())])
            last = key
    return sections


def _add_section(
    sections: list[_Section], names: set[str], number: int, name: str, findings: list[Finding]
) -> None:
    if not _ID.match(name):
        message = f"repository id [{name}] may hold only letters, digits and '-_.:'"
        findings.append(Finding(number, "error", message))
    if name in names:
        findings.append(Finding(number, "error", f"repository [{name}] is defined twice"))
    names.add(name)
    sections.append(_Section(number, name, {}))


def _entry(section: _Section, dialect: Dialect, findings: list[Finding]) -> Entry:
    where = f"[{section.name}]"
    enabled = _boolean(section, "enabled", True, findings)
    if not _boolean(section, "gpgcheck", True, findings):
        line = section.options["gpgcheck"][0]
        message = f"{where} gpgcheck={section.value('gpgcheck')}: packages are not verified"
        findings.append(Finding(line, "warning", message))
    if not any(section.value(key) for key in ("baseurl", "mirrorlist", "metalink")):
        message = f"{where} has no baseurl, mirrorlist or metalink"
        findings.append(Finding(section.line, "error", message))
    paths: list[LocalPath] = []
    for key in _URL_LISTS:
        for number, url in section.words(key, dialect.separators):
            if "," in url and not dialect.comma_separates:
                message = f"{key} {url!r}: zypper reads this as one URL; separate URLs with spaces"
                findings.append(Finding(number, "error", message))
                continue
            path = _url(number, key, url, dialect.schemes, findings)
            if path is not None:
                paths.append(LocalPath(number, key, url, path, is_key=key == "gpgkey"))
    return Entry(section.line, enabled, tuple(paths))


def _boolean(section: _Section, key: str, default: bool, findings: list[Finding]) -> bool:
    if key not in section.options:
        return default
    value = section.value(key).lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    line = section.options[key][0]
    findings.append(Finding(line, "error", f"{key}={value!r} is neither 1 nor 0"))
    return default


def _url(
    number: int, key: str, url: str, schemes: tuple[str, ...], findings: list[Finding]
) -> str | None:
    if not _SCHEME.match(url):
        message = f"{key} {url!r} is not a URL (no scheme such as https:// or file://)"
        findings.append(Finding(number, "error", message))
        return None
    try:
        return local_path(url, schemes)
    except ValueError as error:
        findings.append(Finding(number, "error", f"{key} {error}"))
        return None
