"""gpuctrl's apt parsers reject a ``.list`` / ``.sources`` file exactly when Debian's apt does.

Files are generated from apt's grammar (types, options, URIs, suites, components, deb822
fields, comments, continuation lines, several stanzas, ``Enabled``), good and bad, and each is
read by the real ``apt-cache policy`` with only that file in ``Dir::Etc::SourceParts``. Where
gpuctrl is deliberately stricter than apt's parser (a ``file://`` URI naming a host, a field
given twice, a truncated inline key, a deb822 line that is not ``Field: value``, which apt
rejects or, when another stanza follows, silently drops with its stanza) those inputs are left
out of the generators; path resolution (nodeLocalPaths) is not apt's parser's
business and is not compared.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controllers.render._aptsources import signed_by_conflicts
from controllers.render._osfamily import APT
from controllers.render._readers import parse

pytestmark = [
    pytest.mark.skipif(shutil.which("apt-cache") is None, reason="needs Debian's apt"),
    pytest.mark.skipif(os.geteuid() != 0, reason="runs Debian's apt as root"),
]
EXAMPLES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _apt_rejects(key: str, text: str) -> tuple[bool, str]:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        parts = root / "parts"
        for folder in (parts, root / "state" / "lists", root / "cache"):
            folder.mkdir(parents=True)
        (parts / key).write_text(text)
        done = subprocess.run(
            [
                "apt-cache",
                *("-o", "Dir::Etc::SourceList=/dev/null"),
                *("-o", f"Dir::Etc::SourceParts={parts}"),
                *("-o", f"Dir::State={root / 'state'}"),
                *("-o", f"Dir::Cache={root / 'cache'}"),
                *("-o", "Debug::NoLocking=1"),
                "policy",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    return done.returncode != 0, done.stderr


def _agree(key: str, text: str) -> None:
    parsed = parse(APT, key, text)
    found = [*parsed.findings, *(f for _, f in signed_by_conflicts([(key, parsed)]))]
    ours = [f for f in found if f.severity == "error"]
    rejected, said = _apt_rejects(key, text)
    assert bool(ours) == rejected, f"{text!r}\napt: {said or 'accepted'}\ngpuctrl: {ours}"


def _mostly(good: list[str], bad: list[str]) -> st.SearchStrategy[str]:
    """Mostly a good value (seven in eight), so that accepted files are common too."""
    return st.sampled_from(good * 7 * len(bad) + bad * len(good))


def _rarely() -> st.SearchStrategy[bool]:
    """True one time in eight."""
    return st.sampled_from([False] * 7 + [True])


_URIS = _mostly(
    [
        "file:///opt/local",
        "file:/opt/local",
        "copy:/opt/local",
        "mirror+file:/opt/mirrors.txt",
        "http://mirror.internal/ubuntu",
        "https://mirror.internal/debian/",
    ],
    ["/opt/local", "opt/local"],
)
_EXACT = st.sampled_from(["./", "sub/dir/"])
_SUITES = st.sampled_from(["stable", "jammy-updates", "jammy/updates"])
_COMPONENTS = st.sampled_from([["main"]] * 3 + [["main", "non-free-firmware"]] * 3 + [[]])
_KEYS = _mostly(
    [
        "/opt/local/keyring.gpg",
        "/usr/share/keyrings/debian-archive-keyring.gpg",
        "0123456789ABCDEF0123456789ABCDEF01234567",
        "0123456789abcdef0123456789abcdef01234567!",
    ],
    ["0123456789ABCDEF", "mykey", "./relative.gpg"],
)
_OPTIONS = st.one_of(
    _KEYS.map(lambda key: f"signed-by={key}"),
    _mostly(
        [
            "arch=amd64",
            "arch=amd64,arm64",
            "arch+=i386",
            "lang-=de",
            "trusted=yes",
            "check-valid-until=no",
        ],
        ["arch", "=x", "arch="],
    ),
)
_SPACE = st.sampled_from([" ", "  ", "\t"])


@st.composite
def _suite_and_components(draw: st.DrawFn) -> list[str]:
    """A suite and components, mostly as apt wants them (none after an exact suite)."""
    if draw(st.booleans()):
        wrong = draw(_rarely())
        return [draw(_EXACT), *(["main"] if wrong else [])]
    return [draw(_SUITES), *draw(_COMPONENTS)]


@st.composite
def _one_line(draw: st.DrawFn) -> str:
    words = [draw(_mostly(["deb", "deb-src"], ["dab", "rpm"]))]
    if draw(st.booleans()):
        options = draw(st.lists(_OPTIONS, max_size=3))
        close = draw(_mostly(["]"], [""]))
        pad = draw(st.sampled_from(["", " "]))
        words.append(f"[{pad}{' '.join(options)}{pad}{close}")
    tail = [draw(_URIS), *draw(_suite_and_components())]
    keep = draw(st.sampled_from([len(tail)] * 14 + [0, 1]))  # mostly all of it
    words += tail[:keep]
    line = draw(_SPACE).join(words)
    if draw(st.booleans()):
        line += " # a comment"
    return line


@EXAMPLES
@given(st.lists(st.one_of(_one_line(), st.just("# comment"), st.just("")), max_size=3))
def test_one_line_files(lines: list[str]) -> None:
    _agree("gen.list", "\n".join(lines) + "\n")


_INLINE_KEY = (
    "\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n mDMEZ0key\n -----END PGP PUBLIC KEY BLOCK-----"
)


def _present(draw: st.DrawFn) -> bool:
    return not draw(_rarely())


@st.composite
def _stanza(draw: st.DrawFn) -> str:
    fields: list[str] = []
    if _present(draw):
        fields.append("Types: " + draw(_mostly(["deb", "deb deb-src"], ["rpm", "deb rpm"])))
    if _present(draw):
        uris = draw(st.lists(_URIS, min_size=1, max_size=2))
        fields.append("URIs: " + draw(st.sampled_from([" ", "\n  "])).join(uris))
    if _present(draw):
        suite, *components = draw(_suite_and_components())
        fields.append(f"Suites: {suite}")
        if components:
            fields.append("Components: " + " ".join(components))
    if draw(st.booleans()):
        fields.append("Signed-By: " + draw(st.one_of(_KEYS, st.just(_INLINE_KEY))))
    if draw(st.booleans()):
        fields.append("Enabled: " + draw(st.sampled_from(["yes", "no", "false", "0", "maybe"])))
    if draw(st.booleans()):
        fields.append(draw(st.sampled_from(["Architectures: amd64", "X-Note: x", "# inside"])))
    if draw(_rarely()):
        fields.append("URIs file:///x")  # a field named "URIs file"
    return "\n".join(draw(st.permutations(fields)))


@EXAMPLES
@given(st.lists(_stanza(), min_size=1, max_size=3), st.sampled_from(["\n\n", "\n\n\n# c\n"]))
def test_deb822_files(stanzas: list[str], separator: str) -> None:
    _agree("gen.sources", separator.join(s for s in stanzas if s) + "\n")
