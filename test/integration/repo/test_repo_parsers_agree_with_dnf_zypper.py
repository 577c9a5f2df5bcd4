"""gpuctrl reads ``.repo`` files as the real dnf and zypper do.

Files are generated from the INI dialect both read (sections, ``key=value`` with any spacing,
``#``/``;`` comments, blank lines, several URLs on one line or on continuation
lines, booleans spelled every accepted way, ``file://`` and remote URLs), and each is read by
Debian's dnf (its Python API, ``Base.read_all_repos``, with only that file in ``reposdir``) and
zypper (``zypper --root R lr -d`` with only that file in ``R/etc/zypp/repos.d``). Where gpuctrl
accepts a file, both tools load the same repositories, enabled or not as gpuctrl says, naming
the same local repository folders and key files (the paths the driver container must see).
Where dnf skips a file or zypper refuses it, gpuctrl reports an error. gpuctrl is stricter
than both on purpose (a repository without a URL, an unknown boolean, a key given twice, an
option both tools ignore because of its case, such as ``BASEURL``, found by this test): those
inputs are not generated.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controllers.render._osfamily import YUM, ZYPPER, OsFamily
from controllers.render._readers import parse

DNF_PYTHON = "/usr/bin/python3"
pytestmark = [
    pytest.mark.skipif(shutil.which("zypper") is None, reason="needs zypper (Debian's package)"),
    pytest.mark.skipif(
        subprocess.run([DNF_PYTHON, "-c", "import dnf"], capture_output=True).returncode != 0,
        reason="needs dnf's Python API (Debian's python3-dnf)",
    ),
    pytest.mark.skipif(os.geteuid() != 0, reason="runs zypper on a root of its own, as root"),
]
EXAMPLES = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Read every repository of one reposdir with dnf's own parser (libdnf's ConfigParser): no
# network, nothing cached. A file dnf cannot parse is skipped with a warning on stderr.
DNF_READ = """
import json, sys, dnf
base = dnf.Base()
base.conf.reposdir = [sys.argv[1]]
base.conf.substitutions["releasever"] = "9"
base.read_all_repos()
print(json.dumps({r.id: {"enabled": bool(r.enabled), "urls": list(r.baseurl),
                         "keys": list(r.gpgkey)} for r in base.repos.all()}))
"""


@dataclass(frozen=True)
class Repo:
    """A repository as a tool loaded it: enabled, its repository URLs and key URLs."""

    enabled: bool
    urls: tuple[str, ...]
    keys: tuple[str, ...]


def _dnf(text: str) -> tuple[dict[str, Repo], str]:
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "x.repo").write_text(text)
        done = subprocess.run(
            [DNF_PYTHON, "-c", DNF_READ, folder],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    repos = {
        name: Repo(r["enabled"], tuple(r["urls"]), tuple(r["keys"]))
        for name, r in json.loads(done.stdout).items()
    }
    return repos, done.stderr


def _zypper(text: str) -> tuple[dict[str, Repo], str]:
    with tempfile.TemporaryDirectory() as root:
        folder = Path(root, "etc", "zypp", "repos.d")
        folder.mkdir(parents=True)
        (folder / "x.repo").write_text(text)
        done = subprocess.run(
            ["zypper", "--root", root, "--non-interactive", "--xmlout", "lr", "-d"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    stream = ElementTree.fromstring(done.stdout)
    errors = [m.text or "" for m in stream.iter("message") if m.get("type") == "error"]
    repos = {
        repo.get("alias", ""): Repo(
            repo.get("enabled") == "1",
            tuple(url.text or "" for url in repo.iter("url")),
            tuple((repo.get("gpgkey") or "").split()),
        )
        for repo in stream.iter("repo")
    }
    return repos, "\n".join(errors)


def _path(url: str) -> str | None:
    """The local path a URL names (``file:///p``, zypper's ``file:/p`` and ``dir:/p``)."""
    for scheme in ("file://", "file:", "dir://", "dir:"):
        if url.startswith(scheme):
            return "/" + url.removeprefix(scheme).lstrip("/")
    return None


def _local(urls: tuple[str, ...]) -> set[str]:
    return {path for url in urls if (path := _path(url)) is not None}


_SPACE = st.sampled_from(["", " ", "  ", "\t"])
_TRUE = st.sampled_from(["1", "yes", "true", "on", "True", "YES"])
_FALSE = st.sampled_from(["0", "no", "false", "off", "False", "NO"])
_FOLDER = st.sampled_from(["/opt/repo", "/srv/mirror/rhel9", "/var/local/r-1", "/mnt/r.d"])
_URL = st.one_of(
    _FOLDER.map(lambda folder: f"file://{folder}"),
    st.sampled_from(["https://mirror.example/rhel9/x86_64", "http://10.0.0.1/repo"]),
)
_KEY = st.one_of(
    _FOLDER.map(lambda folder: f"file://{folder}/RPM-GPG-KEY"),
    st.just("https://mirror.example/key.asc"),
)
_COMMENT = st.sampled_from(["# a comment", "; another", "#baseurl=file:///commented/out", ""])


@st.composite
def _option(draw: st.DrawFn, key: str, value: str) -> str:
    return f"{key}{draw(_SPACE)}={draw(_SPACE)}{value}"


@st.composite
def _section(draw: st.DrawFn, name: str, max_keys: int, separators: list[str]) -> str:
    lines = [f"[{name}]"]
    options: list[str] = [draw(_option("name", f"Repository {name}"))]
    urls = draw(st.lists(_URL, min_size=1, max_size=3, unique=True))
    if len(urls) > 1 and draw(st.booleans()):  # one per continuation line
        first, *rest = urls
        options.append(draw(_option("baseurl", first)) + "".join(f"\n  {u}" for u in rest))
    else:
        separator = draw(st.sampled_from(separators))
        options.append(draw(_option("baseurl", separator.join(urls))))
    if draw(st.booleans()):
        enabled = draw(st.one_of(_TRUE, _FALSE))
        options.append(draw(_option("enabled", enabled)))
    if draw(st.booleans()):
        options.append(draw(_option("gpgcheck", draw(_TRUE))))
    keys = draw(st.lists(_KEY, max_size=max_keys, unique=True))
    if keys:
        options.append(draw(_option("gpgkey", " ".join(keys))))
    for option in draw(st.permutations(options)):
        lines += [draw(_COMMENT), option]
    return "\n".join(line for line in lines if line is not None)


@st.composite
def _good_file(draw: st.DrawFn, max_keys: int, separators: list[str]) -> tuple[str, list[str]]:
    names = draw(
        st.lists(
            st.sampled_from(["local", "base", "r-1", "app_2", "x.y"]),
            min_size=1,
            max_size=3,
            unique=True,
        )
    )
    sections = [draw(_section(name, max_keys, separators)) for name in names]
    return "\n\n".join(sections) + "\n", names


def _agree(
    text: str,
    names: list[str],
    family: OsFamily,
    read: Callable[[str], tuple[dict[str, Repo], str]],
) -> None:
    """gpuctrl accepts ``text`` and reads the repositories ``names`` as ``read`` does."""
    parsed = parse(family, "x.repo", text)
    errors = [f for f in parsed.findings if f.severity == "error"]
    assert errors == [], f"{text}\ngpuctrl: {errors}"
    repos, said = read(text)
    assert sorted(repos) == sorted(names), f"{text}\n{said}"
    for name, entry in zip(names, parsed.entries, strict=True):
        repo = repos[name]
        assert repo.enabled == entry.enabled, f"[{name}] enabled\n{text}"
        urls = {p.path for p in entry.paths if not p.is_key}
        keys = {p.path for p in entry.paths if p.is_key}
        assert urls == _local(repo.urls), f"[{name}] local repositories\n{text}\n{said}"
        assert keys == _local(repo.keys), f"[{name}] local keys\n{text}\n{said}"


@EXAMPLES
@given(_good_file(max_keys=2, separators=[" ", ",", ", "]))
def test_dnf_reads_what_gpuctrl_reads(file: tuple[str, list[str]]) -> None:
    _agree(*file, YUM, _dnf)


# `zypper lr` prints only a repository's first key; zypper splits URLs on spaces only.
@EXAMPLES
@given(_good_file(max_keys=1, separators=[" ", "  "]))
def test_zypper_reads_what_gpuctrl_reads(file: tuple[str, list[str]]) -> None:
    _agree(*file, ZYPPER, _zypper)


_BROKEN = [
    pytest.param("baseurl=file:///opt/repo\n[local]\nname=x\n", id="option-before-any-section"),
    pytest.param("[local]\nbaseurl file:///opt/repo\n", id="line-without-equals"),
    pytest.param("[local\nbaseurl=file:///opt/repo\n", id="unclosed-section"),
    pytest.param("[my repo]\nbaseurl=file:///opt/repo\n", id="space-in-id"),
]


def test_a_comma_joined_url_is_one_url_to_zypper_and_an_error() -> None:
    text = "[local]\nbaseurl=file:///opt/a,file:///opt/b\n"
    repos, _ = _zypper(text)
    assert _local(repos["local"].urls) == {"/opt/a,file:///opt/b"}  # not what was meant
    (error,) = [f for f in parse(ZYPPER, "x.repo", text).findings if f.severity == "error"]
    assert "zypper reads this as one URL; separate URLs with spaces" in error.message
    dnf_repos, _ = _dnf(text)
    assert _local(dnf_repos["local"].urls) == {"/opt/a", "/opt/b"}
    assert [f for f in parse(YUM, "x.repo", text).findings if f.severity == "error"] == []


def test_an_option_in_capitals_is_read_by_neither_and_an_error() -> None:
    text = "[local]\nBASEURL=file:///opt/a\n"
    for family, read in ((YUM, _dnf), (ZYPPER, _zypper)):
        assert read(text)[0]["local"].urls == ()
        errors = [f.message for f in parse(family, "x.repo", text).findings]
        assert "'BASEURL' is not read: dnf and zypper know only 'baseurl'" in errors


@pytest.mark.parametrize("text", _BROKEN)
def test_what_dnf_or_zypper_refuses_is_an_error(text: str) -> None:
    dnf_repos, dnf_said = _dnf(text)
    zypper_repos, zypper_said = _zypper(text)
    refused_by = [
        tool
        for tool, repos, said in (
            ("dnf", dnf_repos, dnf_said),
            ("zypper", zypper_repos, zypper_said),
        )
        if said.strip() or not repos
    ]
    assert refused_by, f"neither tool refuses {text!r}: the case does not test anything"
    for family in (YUM, ZYPPER):
        errors = [f for f in parse(family, "x.repo", text).findings if f.severity == "error"]
        assert errors, f"{family.name} accepts {text!r}, which {refused_by} refuse"
