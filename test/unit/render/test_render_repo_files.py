"""`check_repo_config` on repository files of every family: good and bad, with exact messages."""

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from api.v1alpha1 import load_cluster_policy
from api.v1alpha1._driver import FORBIDDEN_HOST_ROOTS
from controllers.render import (
    ClusterFacts,
    ConfigMapFacts,
    NodeFacts,
    RepoProblem,
    check_repo_config,
)
from controllers.render._repo import MAX_PER_KEY

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
LOCAL = "spec.driver.repoConfig.nodeLocalPaths"
OS_IDS = {"apt": ("ubuntu", "22.04"), "yum": ("rhel", "9.4"), "zypper": ("sles", "15.6")}
SUFFIX = {"list": "apt", "sources": "apt", "repo": "yum"}


def _node(name: str, os_id: str, version: str) -> NodeFacts:
    return NodeFacts(
        name=name,
        labels={
            "nvidia.com/gpu.present": "true",
            "feature.node.kubernetes.io/system-os_release.ID": os_id,
            "feature.node.kubernetes.io/system-os_release.VERSION_ID": version,
        },
    )


def _check(
    data: dict[str, str],
    families: tuple[str, ...] = ("apt",),
    local: tuple[str, ...] = ("/opt/local",),
    **driver: Any,
) -> list[str]:
    repo: dict[str, Any] = {"configMapName": "repo", "nodeLocalPaths": list(local)}
    policy = load_cluster_policy({"spec": {"driver": {"repoConfig": repo, **driver}}})
    nodes = tuple(_node(f"n-{f}", *OS_IDS[f]) for f in families)
    facts = ClusterFacts(nodes=nodes, config_maps=(ConfigMapFacts(name="repo", data=data),))
    return [str(p) for p in check_repo_config(policy, facts, now=NOW)]


def _only(key: str, text: str, family: str) -> list[str]:
    """The problems of one file read by ``family``, /opt/local node-local (the warning when no
    entry uses it is left out: a test of its own covers it)."""
    unused = f"warning: {LOCAL}[0]: no enabled repository"
    return [p for p in _check({key: text}, (family,)) if not p.startswith(unused)]


GOOD = [
    pytest.param(
        "a.list", "deb [signed-by=/opt/local/k.gpg] file:///opt/local ./\n", id="list-flat"
    ),
    pytest.param(
        "a.list",
        "# comment\n\ndeb [ arch=amd64 signed-by=/opt/local/k.gpg ] file:/opt/local/d jammy main"
        " restricted  # trailing comment\ndeb-src file:///opt/local/src stable main\n",
        id="list-options-comments",
    ),
    pytest.param(
        "a.list",
        "deb [signed-by=/usr/share/keyrings/ubuntu-archive-keyring.gpg] "
        "http://mirror.internal/ubuntu jammy main\ndeb file:///opt/local ./\n",
        id="list-image-keyring",
    ),
    pytest.param(
        "a.list",
        "deb [signed-by=0123456789ABCDEF0123456789ABCDEF01234567] file:///opt/local ./\n",
        id="list-fingerprint",
    ),
    pytest.param("a.list", "deb\tfile:///opt/local\t./\r\n", id="list-tabs-crlf"),
    pytest.param(
        "a.sources",
        "Types: deb\nURIs: file:///opt/local\nSuites: ./\n\n"
        "Enabled: no\nTypes: deb\nURIs: /not-a-uri\nSigned-By: not-a-key\n",
        id="deb822-disabled-stanza-only-needs-types",
    ),
    pytest.param(
        "a.sources",
        "# local\nTypes: deb\nURIs: file:///opt/local\nSuites: ./\n"
        "Signed-By: /opt/local/keyring.gpg\n",
        id="deb822-flat",
    ),
    pytest.param(
        "a.sources",
        "Types: deb deb-src\nURIs: file:///opt/local/a\n  file:///opt/local/b\n"
        "Suites: jammy jammy-updates\nComponents: main\nArchitectures: amd64\n\n"
        "\n# a second stanza, disabled: its path need not resolve\n"
        "Enabled: no\nTypes: deb\nURIs: file:///mnt/cdrom\nSuites: ./\n",
        id="deb822-stanzas-continuation-disabled",
    ),
    pytest.param(
        "a.sources",
        "types: deb\nuris: file:///opt/local\nsuites: ./\n"
        "Signed-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n mQINBGBvkey\n"
        " -----END PGP PUBLIC KEY BLOCK-----\n",
        id="deb822-inline-key-lowercase-fields",
    ),
    pytest.param(
        "a.repo",
        "; local\n[local]\nname=Local\nbaseurl=file:///opt/local/rpm\n"
        "  file:///opt/local/rpm2\nenabled=1\ngpgcheck=1\n"
        "gpgkey=file:///opt/local/RPM-GPG-KEY file:///etc/pki/rpm-gpg/RPM-GPG-KEY-redhat\n\n"
        "[mirror]\nbaseurl = https://mirror.internal/$releasever/$basearch\n\n"
        "[off]\nenabled=0\nbaseurl=file:///srv/elsewhere\n",
        id="repo-sections-continuation-disabled",
    ),
    pytest.param(
        "a.repo", "[m]\nmirrorlist=file:///opt/local/mirrors.txt\n", id="repo-local-mirrorlist"
    ),
]


@pytest.mark.parametrize(("key", "text"), GOOD)
def test_good_files_have_no_problem(key: str, text: str) -> None:
    assert _only(key, text, SUFFIX[key.rsplit(".", 1)[1]]) == []


def test_good_zypper_file_with_a_dir_uri() -> None:
    text = "[local]\nbaseurl=dir:///opt/local/rpm\ngpgkey=file:///opt/local/key\n"
    assert _only("local.repo", text, "zypper") == []
    # yum does not read dir: URIs from disk, so nothing local is needed for it.
    assert _check({"local.repo": text}, ("yum",), local=()) == [
        "error: ConfigMap 'repo' key 'local.repo' line 3: gpgkey 'file:///opt/local/key': the "
        f"key file /opt/local/key is inside no {LOCAL} entry, so the driver container cannot "
        "see it (add '/opt/local' or a folder above it)"
    ]


def _err(key: str, line: int, message: str) -> str:
    return f"error: ConfigMap 'repo' key '{key}' line {line}: {message}"


def _warn(key: str, line: int, message: str) -> str:
    return f"warning: ConfigMap 'repo' key '{key}' line {line}: {message}"


def _unseen(field: str, value: str, what: str, path: str, folder: str) -> str:
    return (
        f"{field} {value!r}: the {what} {path} is inside no {LOCAL} entry, so the driver "
        f"container cannot see it (add {folder!r} or a folder above it)"
    )


BAD = [
    # apt one-line
    pytest.param(
        "a.list",
        "dab file:///opt/local ./\n",
        [_err("a.list", 1, "type 'dab' is neither deb nor deb-src")],
        id="list-type",
    ),
    pytest.param(
        "a.list",
        "deb [arch=amd64 file:///opt/local ./\n",
        [_err("a.list", 1, "'[' opens options that no ']' closes")],
        id="list-unclosed-options",
    ),
    pytest.param(
        "a.list",
        "deb [arch] file:///opt/local ./\n",
        [_err("a.list", 1, "option 'arch' is not name=value")],
        id="list-option-without-value",
    ),
    pytest.param(
        "a.list",
        "deb\n",
        [_err("a.list", 1, "no URI: expected 'deb [options] URI suite [component ...]'")],
        id="list-no-uri",
    ),
    pytest.param(
        "a.list",
        "\n\ndeb file:///opt/local\n",
        [_err("a.list", 3, "no suite after 'file:///opt/local'")],
        id="list-no-suite",
    ),
    pytest.param(
        "a.list",
        "deb /opt/local ./\n",
        [_err("a.list", 1, "'/opt/local' is not a URI (no scheme such as http:// or file://)")],
        id="list-no-scheme",
    ),
    pytest.param(
        "a.list",
        "deb file:///opt/local stable\n",
        [
            _err(
                "a.list",
                1,
                "suite 'stable' needs at least one component (or an exact path ending in '/')",
            )
        ],
        id="list-no-component",
    ),
    pytest.param(
        "a.list",
        "deb file:///opt/local ./ main\n",
        [_err("a.list", 1, "suite './' is an exact path, which takes no components")],
        id="list-exact-suite-with-component",
    ),
    pytest.param(
        "a.list",
        "deb file:///srv/pkgs ./\n",
        [
            _err(
                "a.list",
                1,
                _unseen("URI", "file:///srv/pkgs", "repository", "/srv/pkgs", "/srv/pkgs"),
            )
        ],
        id="list-uri-not-node-local",
    ),
    pytest.param(
        "a.list",
        "deb file:///opt/local/../../etc/secret ./\n",
        [
            _err(
                "a.list",
                1,
                _unseen(
                    "URI",
                    "file:///opt/local/../../etc/secret",
                    "repository",
                    "/etc/secret",
                    "/etc/secret",
                ),
            )
        ],
        id="list-dotdot-escapes",
    ),
    pytest.param(
        "a.list",
        "deb file://server/opt/local ./\n",
        [
            _err(
                "a.list", 1, "'file://server/opt/local' names host 'server'; a local URI names none"
            )
        ],
        id="list-file-uri-with-host",
    ),
    pytest.param(
        "a.list",
        "deb [signed-by=/srv/keys/k.gpg] file:///opt/local ./\n",
        [
            _err(
                "a.list",
                1,
                _unseen("signed-by", "/srv/keys/k.gpg", "key file", "/srv/keys/k.gpg", "/srv/keys"),
            )
        ],
        id="list-signed-by-not-node-local",
    ),
    pytest.param(
        "a.list",
        "deb [signed-by=mykey] file:///opt/local ./\n",
        [
            _err(
                "a.list",
                1,
                "signed-by 'mykey' is neither an absolute key file path nor a key fingerprint",
            )
        ],
        id="list-signed-by-garbage",
    ),
    pytest.param(
        "a.list",
        "deb [trusted=yes] file:///opt/local ./\n",
        [_warn("a.list", 1, "trusted=yes: apt installs from it without checking its signature")],
        id="list-trusted",
    ),
    # deb822
    pytest.param(
        "a.sources",
        "Types: deb\nSuites: ./\n",
        [_err("a.sources", 1, "the stanza has no URIs field")],
        id="deb822-no-uris",
    ),
    pytest.param(
        "a.sources",
        "Types: deb\nURIs: file:///opt/local\nSuites: ./\n\nEnabled: no\nURIs: file:///x\n",
        [_err("a.sources", 5, "the stanza has no Types field")],
        id="deb822-disabled-stanza-still-needs-types",
    ),
    pytest.param(
        "a.sources",
        "Types: deb rpm\nURIs: file:///opt/local\nSuites: ./\n",
        [_err("a.sources", 1, "type 'rpm' is neither deb nor deb-src")],
        id="deb822-type",
    ),
    pytest.param(
        "a.sources",
        "Types: deb\nURIs: file:///opt/local\nSuites: jammy\n",
        [
            _err(
                "a.sources",
                3,
                "suite 'jammy' needs at least one component (or an exact path ending in '/')",
            )
        ],
        id="deb822-no-components",
    ),
    pytest.param(
        "a.sources",
        "Types: deb\nURIs: file:///opt/local\nSuites: ./\nComponents: main\n",
        [_err("a.sources", 4, "suite './' is an exact path, which takes no components")],
        id="deb822-exact-suite-components",
    ),
    pytest.param(
        "a.sources",
        "Types: deb\nURIs: file:///opt/local\n  file:///mnt/usb\nSuites: ./\n",
        [
            _err(
                "a.sources",
                3,
                _unseen("URIs", "file:///mnt/usb", "repository", "/mnt/usb", "/mnt/usb"),
            )
        ],
        id="deb822-continued-uri-not-node-local",
    ),
    pytest.param(
        "a.sources",
        "Types: deb\nURIs: file:///opt/local\nSuites: ./\nSigned-By: /tmp/keyring.gpg\n",
        [
            _err(
                "a.sources",
                4,
                _unseen("Signed-By", "/tmp/keyring.gpg", "key file", "/tmp/keyring.gpg", "/tmp"),
            )
        ],
        id="deb822-signed-by-not-node-local",
    ),
    pytest.param(
        "a.sources",
        "Types: deb\nURIs: file:///opt/local\nSuites: ./\n"
        "Signed-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n mQINBGBvkey\n",
        [
            _err(
                "a.sources",
                4,
                "Signed-By: an inline key must run from -----BEGIN PGP PUBLIC KEY BLOCK----- to "
                "-----END PGP PUBLIC KEY BLOCK----- (empty lines written as ' .')",
            )
        ],
        id="deb822-inline-key-truncated",
    ),
    pytest.param(
        "a.sources",
        "Types: deb\nURIs: file:///opt/local\nSuites: ./\nEnabled: maybe\n",
        [
            _warn(
                "a.sources",
                4,
                "Enabled: 'maybe' is neither yes nor no: apt takes the stanza as enabled",
            )
        ],
        id="deb822-enabled-value",
    ),
    pytest.param(
        "a.sources",
        " indented first\nTypes: deb\nURIs: file:///opt/local\nSuites: ./\n",
        [_warn("a.sources", 1, "a continuation line before any field belongs to no field")],
        id="deb822-continuation-first",
    ),
    pytest.param(
        "a.sources",
        "Types: deb\nURIs //opt/local\nSuites: ./\n",
        [
            _err("a.sources", 1, "the stanza has no URIs field"),
            _err("a.sources", 2, "'URIs //opt/local' is not 'Field: value'"),
        ],
        id="deb822-no-colon",
    ),
    pytest.param(
        "a.sources",
        "Types: deb\nURIs: file:///opt/local\nURIs: file:///opt/local/b\nSuites: ./\n",
        [_err("a.sources", 3, "field 'URIs' is given twice")],
        id="deb822-duplicate-field",
    ),
    pytest.param(
        "a.sources",
        "Types: deb\nURIs: file:///opt/local\nSuites: ./\nTrusted: yes\n",
        [
            _warn(
                "a.sources", 4, "Trusted: yes: apt installs from it without checking its signature"
            )
        ],
        id="deb822-trusted",
    ),
    pytest.param(
        "a.sources",
        "Types: deb\nURIs file:///opt/local\nSuites: ./\n",  # a field named "URIs file"
        [_err("a.sources", 1, "the stanza has no URIs field")],
        id="deb822-colon-in-the-value-makes-a-field-name",
    ),
    pytest.param(
        "a.list",
        "deb [signed-by=/opt/local/k.gpg] file:///opt/local ./\ndeb-src copy:/opt/local/ ./\n",
        [
            _err(
                "a.list",
                2,
                "suite './' of '/opt/local/' is listed with Signed-By '(none)' here and "
                "'/opt/local/k.gpg' at key 'a.list' line 1: apt refuses to read the sources",
            )
        ],
        id="list-signed-by-conflict",
    ),
    # yum / dnf
    pytest.param(
        "a.repo",
        "baseurl=file:///opt/local\n[x]\nbaseurl=file:///opt/local\n",
        [_err("a.repo", 1, "'baseurl=file:///opt/local' comes before any [id] section")],
        id="repo-option-before-section",
    ),
    pytest.param(
        "a.repo",
        "[x]\nname=X\n",
        [_err("a.repo", 1, "[x] has no baseurl, mirrorlist or metalink")],
        id="repo-no-baseurl",
    ),
    pytest.param(
        "a.repo",
        "[bad id]\nbaseurl=file:///opt/local\n",
        [_err("a.repo", 1, "repository id [bad id] may hold only letters, digits and '-_.:'")],
        id="repo-bad-id",
    ),
    pytest.param(
        "a.repo",
        "[x]\nbaseurl=file:///opt/local\n[x]\nbaseurl=file:///opt/local\n",
        [_err("a.repo", 3, "repository [x] is defined twice")],
        id="repo-duplicate-id",
    ),
    pytest.param(
        "a.repo",
        "[x]\nbaseurl=file:///opt/local\nbaseurl=file:///opt/local/b\n",
        [_err("a.repo", 3, "'baseurl' is given twice in this section")],
        id="repo-duplicate-option",
    ),
    pytest.param(
        "a.repo",
        "[x]\nbaseurl file:///opt/local\n",
        [
            _err("a.repo", 1, "[x] has no baseurl, mirrorlist or metalink"),
            _err("a.repo", 2, "'baseurl file:///opt/local' is neither [id] nor key=value"),
        ],
        id="repo-no-equals",
    ),
    pytest.param(
        "a.repo",
        "[x]\nbaseurl=file:///opt/local\nenabled=maybe\n",
        [_err("a.repo", 3, "enabled='maybe' is neither 1 nor 0")],
        id="repo-enabled-value",
    ),
    pytest.param(
        "a.repo",
        "[x]\nBaseURL=file:///opt/local\n",
        [
            _err("a.repo", 1, "[x] has no baseurl, mirrorlist or metalink"),
            _err("a.repo", 2, "'BaseURL' is not read: dnf and zypper know only 'baseurl'"),
        ],
        id="repo-option-case",
    ),
    pytest.param(
        "a.repo",
        "[x]\nbaseurl=/opt/local\n",
        [
            _err(
                "a.repo",
                2,
                "baseurl '/opt/local' is not a URL (no scheme such as https:// or file://)",
            )
        ],
        id="repo-no-scheme",
    ),
    pytest.param(
        "a.repo",
        "[x]\nbaseurl=file:///var/repo\n",
        [
            _err(
                "a.repo",
                2,
                _unseen("baseurl", "file:///var/repo", "repository", "/var/repo", "/var/repo"),
            )
        ],
        id="repo-baseurl-not-node-local",
    ),
    pytest.param(
        "a.repo",
        "[x]\nbaseurl=file:///opt/local\ngpgkey=file:///root/key\n",
        [
            _err(
                "a.repo", 3, _unseen("gpgkey", "file:///root/key", "key file", "/root/key", "/root")
            )
        ],
        id="repo-gpgkey-not-node-local",
    ),
    pytest.param(
        "a.repo",
        "[x]\nbaseurl=file:///opt/local\ngpgcheck=0\n",
        [_warn("a.repo", 3, "[x] gpgcheck=0: packages are not verified")],
        id="repo-gpgcheck-off",
    ),
]


@pytest.mark.parametrize(("key", "text", "expected"), BAD)
def test_bad_files_name_key_line_and_mistake(key: str, text: str, expected: list[str]) -> None:
    assert _only(key, text, SUFFIX[key.rsplit(".", 1)[1]]) == expected


def test_signed_by_conflicts_span_keys_in_apts_reading_order() -> None:
    data = {
        "b.list": "deb http://mirror/debian/ bookworm contrib\n",
        "a.sources": "Types: deb\nURIs: http://mirror/debian\nSuites: bookworm\n"
        "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n",
        "c.sources": "Enabled: no\nTypes: deb\nURIs: http://mirror/debian\nSuites: bookworm\n",
        # apt adopts the first Signed-By it meets: none before one is no conflict
        "d.list": "deb https://other/ x main\n"
        "deb [signed-by=/opt/local/k.gpg] https://other/ x a\n",
        "e.list": "deb [trusted=yes] https://other/ x b\n",
    }
    assert _check(data, local=("/opt/local",)) == [
        _err(
            "b.list",
            1,
            "suite 'bookworm' of 'mirror/debian/' is listed with Signed-By '(none)' here and "
            "'/usr/share/keyrings/debian-archive-keyring.gpg' at key 'a.sources' line 1: apt "
            "refuses to read the sources",
        ),
        _err(
            "e.list",
            1,
            "suite 'x' of 'other/' is listed with trusted 'yes' here and '(unset)' at key "
            "'d.list' line 1: apt refuses to read the sources",
        ),
        _warn("e.list", 1, "trusted=yes: apt installs from it without checking its signature"),
    ]


def test_zypper_reads_repo_files_with_the_same_rules() -> None:
    assert _only("a.repo", "[x]\nbaseurl=dir:///srv/x\n", "zypper") == [
        _err("a.repo", 2, _unseen("baseurl", "dir:///srv/x", "repository", "/srv/x", "/srv/x"))
    ]


def test_zypper_separates_urls_with_spaces_only_and_dnf_also_with_commas() -> None:
    text = "[x]\nbaseurl=file:///opt/local/a,file:///opt/local/b\n"
    message = (
        "baseurl 'file:///opt/local/a,file:///opt/local/b': zypper reads this as one URL;"
        " separate URLs with spaces"
    )
    assert _only("a.repo", text, "zypper") == [_err("a.repo", 2, message)]
    assert _only("a.repo", text, "yum") == []


def test_a_mixed_cluster_checks_each_key_for_the_families_that_read_it() -> None:
    data = {
        "apt.list": "deb file:///srv/apt ./\n",
        "dnf.repo": "[x]\nname=X\n",
        "notes.txt": "hello",
    }
    assert _check(data, ("apt", "yum", "zypper"), local=("/srv/apt",)) == [
        _err("dnf.repo", 1, "[x] has no baseurl, mirrorlist or metalink"),
        "warning: ConfigMap 'repo' key 'notes.txt': no GPU node's package manager reads it "
        "(apt reads *.list, *.sources; yum reads *.repo; zypper reads *.repo), so it is "
        "mounted nowhere",
    ]


def test_a_key_for_an_os_no_gpu_node_runs_is_a_warning_and_not_checked() -> None:
    assert _check({"broken.repo": "garbage"}, ("apt",), local=()) == [
        "warning: ConfigMap 'repo' key 'broken.repo': no GPU node's package manager reads it "
        "(apt reads *.list, *.sources; yum reads *.repo; zypper reads *.repo), so it is "
        "mounted nowhere",
        "warning: ConfigMap 'repo' has no key that apt reads (*.list, *.sources): drivers on "
        "ubuntu, debian nodes keep their image's default repositories",
    ]


def test_an_unused_node_local_path_is_a_warning() -> None:
    data = {"a.list": "deb file:///opt/local ./\n", "b.sources": _DISABLED}
    assert _check(data, local=("/opt/local", "/srv/only-disabled")) == [
        f"warning: {LOCAL}[1]: no enabled repository of ConfigMap 'repo' refers to "
        "/srv/only-disabled, so it is mounted nowhere"
    ]


_DISABLED = "Enabled: no\nTypes: deb\nURIs: file:///srv/only-disabled\nSuites: ./\n"


def test_without_gpu_nodes_every_key_is_checked_for_every_family_that_reads_it() -> None:
    data = {"a.repo": "[x]\nbaseurl=dir:///srv/x\n", "notes.txt": "x"}
    assert _check(data, (), local=()) == [
        _err("a.repo", 2, _unseen("baseurl", "dir:///srv/x", "repository", "/srv/x", "/srv/x"))
    ]


def test_missing_config_map_and_unknown_os_are_errors() -> None:
    policy = load_cluster_policy({"spec": {"driver": {"repoConfig": {"configMapName": "gone"}}}})
    facts = ClusterFacts(nodes=(_node("a", "arch", "rolling"),))
    assert [str(p) for p in check_repo_config(policy, facts, now=NOW)] == [
        "error: spec.driver.repoConfig.configMapName: GPU nodes run OS 'arch', whose folder is "
        "unknown (centos, debian, ol, rhcos, rhel, rocky, sl-micro, sles, ubuntu)",
        "error: spec.driver.repoConfig.configMapName: ConfigMap 'gone' not found in namespace "
        "'gpuctrl'",
    ]


def test_a_disabled_driver_or_no_repo_config_has_no_problem() -> None:
    facts = ClusterFacts(nodes=(_node("a", "ubuntu", "22.04"),))
    for spec in ({"driver": {"enabled": False, "repoConfig": {"configMapName": "x"}}}, {}):
        assert check_repo_config(load_cluster_policy({"spec": spec}), facts, now=NOW) == []


def test_problems_are_values_with_a_severity() -> None:
    problem = RepoProblem("warning", "m")
    assert str(problem) == "warning: m"
    assert problem == RepoProblem("warning", "m")
    with pytest.raises(AttributeError):
        problem.message = "x"  # type: ignore[misc]


# Properties


@given(st.text(max_size=300), st.sampled_from(["a.list", "a.sources", "a.repo", "x"]))
def test_any_text_gives_problems_never_an_exception(text: str, key: str) -> None:
    problems = _check({key: text}, ("apt", "yum", "zypper"))
    assert all(p.startswith(("error: ", "warning: ")) for p in problems)


_SEGMENT = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=6)
_PATHS = st.lists(_SEGMENT, min_size=1, max_size=4).map(lambda parts: "/" + "/".join(parts))


def _nests(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer + "/")


@given(_PATHS, _PATHS, st.sampled_from(["list", "sources", "repo"]))
def test_a_local_uri_is_an_error_exactly_when_no_node_local_path_holds_it(
    repository: str, local: str, kind: str
) -> None:
    # A host folder the API refuses (/dev, /proc, ... or one holding them) is no node-local path.
    assume(not any(_nests(local, root) or _nests(root, local) for root in FORBIDDEN_HOST_ROOTS))
    text = {
        "list": f"deb file://{repository} ./\n",
        "sources": f"Types: deb\nURIs: file://{repository}\nSuites: ./\n",
        "repo": f"[r]\nbaseurl=file://{repository}\n",
    }[kind]
    family = SUFFIX[kind]
    errors = [p for p in _check({f"r.{kind}": text}, (family,), (local,)) if p.startswith("error")]
    inside = repository == local or repository.startswith(local + "/")
    assert (errors == []) == inside, errors


@pytest.mark.parametrize(
    ("key", "text", "line"),
    [
        pytest.param("a.list", "# x\x0c y\r\ndeb /x ./\r\n", 2, id="list-formfeed-crlf"),
        pytest.param(
            "a.sources", "# x\u2028 y\nTypes: deb\nURIs: /x\nSuites: ./\n", 3, id="deb822"
        ),
        pytest.param("a.repo", "# x\x1c\r\n[r]\r\nbaseurl=/x\r\n", 3, id="repo"),
    ],
)
def test_lines_are_counted_at_newlines_only(key: str, text: str, line: int) -> None:
    problems = _only(key, text, SUFFIX[key.rsplit(".", 1)[1]])
    assert len(problems) == 1
    assert problems[0].startswith(f"error: ConfigMap 'repo' key '{key}' line {line}: "), problems


@pytest.mark.parametrize(
    ("key", "line", "count"),
    [
        pytest.param("a.sources", "Types: deb\nURIs: file:///opt/local\nSuites: ./\n", 1, id="one"),
        pytest.param("a.sources", " x\n", 300_000, id="deb822-continuations"),
        pytest.param("a.sources", "URIs:\n" + " file:///opt/local\n" * 100_000, 1, id="long-field"),
        pytest.param("a.repo", "[r]\nbaseurl=/x\n", 50_000, id="repo-sections"),
        pytest.param("a.list", "dab x\n", 150_000, id="list-lines"),
    ],
)
@pytest.mark.slow
def test_a_hostile_mebibyte_is_checked_and_reported_in_bounded_lines(
    key: str, line: str, count: int
) -> None:
    # Linear work (the file is the apiserver's 1 MiB at most) and at most MAX_PER_KEY + 1
    # problems per key, so whoever edits the ConfigMap cannot flood Events or stall checks.
    problems = _only(key, line * count, SUFFIX[key.rsplit(".", 1)[1]])
    assert len(problems) <= MAX_PER_KEY + 1
    if count > MAX_PER_KEY:
        assert problems[-1].endswith("not shown")
