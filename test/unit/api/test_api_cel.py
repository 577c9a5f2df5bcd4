"""The CEL rules: carried by the committed CRDs, evaluated offline with the same verdict and
message, written only with what both Kubernetes and cel-python provide."""

import posixpath
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from api.v1alpha1 import InvalidPolicy, load_cluster_policy
from api.v1alpha1._cel import Rule, failed_message, interpolated, quoted
from api.v1alpha1._driver import FORBIDDEN_HOST_ROOTS, SHADOWED_IMAGE_FOLDERS

CRD_DIR = Path(__file__).parents[3] / "config" / "crd"
_NO_DEADLINE = settings(deadline=None)  # the first evaluation of a rule compiles it


def _schema(kind: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRD_DIR / f"gpuctrl.io_{kind}.yaml").read_text())
    return dict(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


SCHEMAS = {"ClusterPolicy": _schema("clusterpolicies"), "PodPolicy": _schema("podpolicies")}


def _node(kind: str, path: str) -> dict[str, Any]:
    """The schema node at ``path`` (``spec.driver.env[].name``) of ``kind``'s CRD."""
    node = SCHEMAS[kind]
    for part in path.split("."):
        name, items = part.removesuffix("[]"), part.endswith("[]")
        node = node["properties"][name]
        if items:
            node = node["items"]
    return node


def _nodes(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = [(path, schema)]
    for key, child in schema.get("properties", {}).items():
        found += _nodes(child, f"{path}.{key}".lstrip("."))
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            found += _nodes(schema[key], f"{path}[]")
    return found


def _rules(kind: str, path: str) -> list[dict[str, str]]:
    return list(_node(kind, path).get("x-kubernetes-validations", []))


HOST_FOLDER = "spec.driver.repoConfig.nodeLocalPaths[]"
CARRIED = [
    ("ClusterPolicy", HOST_FOLDER, "is not absolute"),
    ("ClusterPolicy", HOST_FOLDER, "is not normalised"),
    ("ClusterPolicy", HOST_FOLDER, "would expose the whole host"),
    ("ClusterPolicy", HOST_FOLDER, "a system folder"),
    ("ClusterPolicy", HOST_FOLDER, "holds "),
    ("ClusterPolicy", HOST_FOLDER, "would hide the driver image"),
    ("ClusterPolicy", "spec.driver.repoConfig.nodeLocalPaths", "is listed twice"),
    ("ClusterPolicy", "spec.driver.version", "an image needs a version"),
    ("ClusterPolicy", "spec.toolkit.version", "an image needs a version"),
    ("ClusterPolicy", "spec.toolkit.runtimeImage.version", "an image needs a version"),
    ("ClusterPolicy", "spec.validator.version", "an image needs a version"),
    ("ClusterPolicy", "spec.devicePlugin.version", "an image needs a version"),
    ("ClusterPolicy", "spec.daemonsets.priorityClassName", "is not a valid object name"),
    ("ClusterPolicy", "spec.driver.imagePullSecrets[]", "is not a valid object name"),
    ("ClusterPolicy", "spec.driver.repoConfig.configMapName", "is not a valid object name"),
    ("ClusterPolicy", "spec.driver.certConfig.name", "is not a valid object name"),
    ("ClusterPolicy", "spec.validator.workloads.runtimeClassName", "is not a valid object name"),
    ("ClusterPolicy", "spec.operator.runtimeClass", "is not a DNS label"),
    ("ClusterPolicy", "spec.toolkit.containerd.runtimeClassName", "is not a DNS label"),
    ("ClusterPolicy", "spec.validator.cuda.env[].name", "is not a valid variable name"),
    ("ClusterPolicy", "spec.daemonsets.tolerations[]", "an empty key requires operator Exists"),
    ("ClusterPolicy", "spec.validator.workloads.tolerations[]", "value must be empty"),
    ("ClusterPolicy", "spec.daemonsets.tolerations[]", "only allowed with effect NoExecute"),
    ("PodPolicy", "spec.targets.selector.matchExpressions[]", "needs values"),
    ("PodPolicy", "spec.targets.selector.matchExpressions[]", "takes no values"),
]


@pytest.mark.parametrize(
    ("kind", "path", "message"), [pytest.param(*c, id=f"{c[1]}:{c[2]}") for c in CARRIED]
)
def test_the_crd_carries_the_rule_at_its_field(kind: str, path: str, message: str) -> None:
    texts = [r.get("message", "") + r.get("messageExpression", "") for r in _rules(kind, path)]
    assert any(message in text for text in texts), texts


def test_unknown_fields_are_kept_only_in_embedded_kubernetes_objects() -> None:
    # A Kubernetes Affinity and PodSecurityContext are copied into pods whole; everything
    # else a user types has a schema, so a misspelt field is refused.
    preserved = [
        f"{kind}:{path}"
        for kind, schema in SCHEMAS.items()
        for path, node in _nodes(schema)
        if node.get("x-kubernetes-preserve-unknown-fields")
    ]
    assert preserved == [
        "ClusterPolicy:spec.daemonsets.affinity",
        "ClusterPolicy:spec.validator.workloads.securityContext",
    ]


# What Kubernetes' CEL (standard library and macros) and cel-python both provide.
_SHARED_FUNCTIONS = {
    "has",
    "size",
    "startsWith",
    "endsWith",
    "contains",
    "matches",
    "all",
    "exists",
    "exists_one",
    "filter",
    "map",
}
_STRINGS = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")


def test_rules_call_only_functions_both_evaluators_have() -> None:
    expressions = [
        text
        for schema in SCHEMAS.values()
        for _, node in _nodes(schema)
        for rule in node.get("x-kubernetes-validations", [])
        for text in (rule["rule"], rule.get("messageExpression", ""))
    ]
    assert len(expressions) >= 2 * len(CARRIED)
    called = {
        name for text in expressions for name in re.findall(r"(\w+)\(", _STRINGS.sub("''", text))
    }
    assert called <= _SHARED_FUNCTIONS


def _problems(mapping: dict[str, Any]) -> list[str]:
    try:
        load_cluster_policy(mapping)
    except InvalidPolicy as error:
        return [str(p) for p in error.problems]
    return []


def _crd_messages(kind: str, path: str, value: Any) -> list[str]:
    """The messages of the CRD's rules at ``path`` that ``value`` breaks, evaluated here."""
    found = (failed_message(rule, value) for rule in _rules(kind, path))
    return [message for message in found if message is not None]


def _expected_host_folder_problems(path: str) -> list[str]:
    """The node-local path rules as docs/air-gapped.md states them, written without CEL."""
    if not path.startswith("/"):
        return [f"'{path}' is not absolute"]
    if posixpath.normpath(path) != path or path.startswith("//"):
        return [f"'{path}' is not normalised (no '..', '.', '//' or trailing '/')"]
    if path == "/":
        return ["'/' would expose the whole host"]
    found = [
        f"'{path}' is under {root}, a system folder"
        for root in FORBIDDEN_HOST_ROOTS
        if path == root or path.startswith(root + "/")
    ]
    held = [r for r in FORBIDDEN_HOST_ROOTS if r.startswith(path + "/")]
    found += [f"'{path}' holds {held[0]}, a system folder"] if held else []
    if path in SHADOWED_IMAGE_FOLDERS:
        found.append(f"'{path}' would hide the driver image's own {path}")
    return found


_SEGMENT = st.sampled_from(["", ".", "..", "...", ".a", "..a", "a.", "opt", "x-y", "lib", "src"])
_PATH = st.builds(
    lambda start, parts: start + "/".join(parts),
    st.sampled_from(["", "/", "//", "./"]),
    st.lists(
        st.one_of(_SEGMENT, st.sampled_from(FORBIDDEN_HOST_ROOTS + SHADOWED_IMAGE_FOLDERS)),
        max_size=4,
    ),
)


@_NO_DEADLINE
@given(_PATH)
@example("/var")
@example("/var/lib")
@example("/etc/")
@example("/usr/src")
@example("/var/lib/kubelet-packages")
def test_host_folder_rules_match_their_statement(path: str) -> None:
    expected = _expected_host_folder_problems(path)
    assert _crd_messages("ClusterPolicy", HOST_FOLDER, path) == expected
    mapping = {
        "spec": {"driver": {"repoConfig": {"configMapName": "repo", "nodeLocalPaths": [path]}}}
    }
    field = "spec.driver.repoConfig.nodeLocalPaths[0]"
    assert _problems(mapping) == [f"{field}: {message}" for message in expected]


@_NO_DEADLINE
@given(st.lists(st.sampled_from(["/opt/a", "/opt/b", "/srv/r"]), max_size=4))
def test_a_folder_listed_twice_is_named(paths: list[str]) -> None:
    twice = [p for p in paths if paths.count(p) > 1]
    expected = [f"'{twice[0]}' is listed twice"] if twice else []
    assert _crd_messages("ClusterPolicy", "spec.driver.repoConfig.nodeLocalPaths", paths) == (
        expected
    )


_SECTIONS = st.sampled_from(["driver", "toolkit", "validator", "devicePlugin"])


@_NO_DEADLINE
@given(_SECTIONS, st.sampled_from(["", "v1.2", "550.127.05", "sha256:" + "a" * 64, "latest"]))
def test_an_operand_image_without_a_version_is_refused(section: str, version: str) -> None:
    expected = ["an image needs a version: a tag or a sha256: digest"] if not version else []
    assert _crd_messages("ClusterPolicy", f"spec.{section}.version", version) == expected
    problems = _problems({"spec": {section: {"version": version}}})
    assert problems == [f"spec.{section}.version: {m}" for m in expected]


def _is_dns_subdomain(name: str) -> bool:
    # Kubernetes' IsDNS1123Subdomain, stated label by label.
    labels = name.split(".")
    alphabet = set("abcdefghijklmnopqrstuvwxyz0123456789-")
    return 0 < len(name) <= 253 and all(
        label and set(label) <= alphabet and label[0] != "-" and label[-1] != "-"
        for label in labels
    )


@_NO_DEADLINE
@given(st.text(alphabet="ab9-._A/", max_size=12))
@example("")
@example("a..b")
@example("-a")
def test_object_names_get_kubernetes_verdict(name: str) -> None:
    messages = _crd_messages("ClusterPolicy", "spec.daemonsets.priorityClassName", name)
    expected = [] if _is_dns_subdomain(name) else [f"'{name}' is not a valid object name"]
    assert [m.split(" (")[0] for m in messages] == expected
    problems = _problems({"spec": {"daemonsets": {"priorityClassName": name}}})
    assert problems == [f"spec.daemonsets.priorityClassName: {m}" for m in messages]


@_NO_DEADLINE
@given(st.text(max_size=20))
@example("it's")
@example('a "quoted" \\ backslash')
def test_quoted_text_evaluates_to_itself(text: str) -> None:
    rule = {"rule": "false", "messageExpression": quoted(text) + " + '!'"}
    assert failed_message(rule, None) == text + "!"


@_NO_DEADLINE
@given(st.text(alphabet="ab'\"\\ {}", max_size=8))
def test_interpolated_templates_put_self_in_place(value: str) -> None:
    rule = {"rule": "false", "messageExpression": interpolated("'{self}' is {self}, see 'x'")}
    assert failed_message(rule, value) == f"'{value}' is {value}, see 'x'"


@pytest.mark.parametrize(
    ("rule", "value", "expected"),
    [
        pytest.param({"rule": "self > 1", "message": "m"}, 2, None, id="holds"),
        pytest.param({"rule": "self > 1", "message": "small"}, 1, "small", id="message"),
        pytest.param(
            {"rule": "self > 1", "message": "m", "messageExpression": "'  '"},
            1,
            "m",
            id="blank-expression-falls-back",
        ),
        pytest.param({"rule": "self > 1"}, 1, "failed rule: self > 1", id="default"),
        pytest.param(
            {"rule": "self.missing", "message": "m"},
            {},
            "rule 'self.missing' could not be evaluated",
            id="error",
        ),
    ],
)
def test_failed_message_follows_the_apiserver(
    rule: dict[str, str], value: Any, expected: str | None
) -> None:
    message = failed_message(rule, value)
    assert message == expected if expected is None else str(message).startswith(expected)


def test_a_rule_needs_a_message() -> None:
    with pytest.raises(ValueError, match="needs a message"):
        Rule(rule="true")
