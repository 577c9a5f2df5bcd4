"""The install's RBAC: no wildcard anywhere, and the manager holds every rule it grants operands.

The apiserver refuses a Role or ClusterRole whose rules its creator does not hold itself
(escalation check), so every operand rule the renderer produces for the samples must be
covered by the manager's ClusterRole (anywhere) or its Role in that rule's namespace.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from install_manifests import CONFIG, NAMESPACE, documents, kustomize

from controllers._kinds import OWNED
from controllers.render import render
from controllers.render._inputs import read_inputs

ROOT = Path(__file__).parents[3]
SAMPLES = sorted((CONFIG / "samples").glob("clusterpolicy-*.yaml"))
NODES = ROOT / "test" / "data" / "render" / "nodes.yaml"

Atom = tuple[str, str, str, str | None]  # (apiGroup, resource, verb, resourceName or None)


def atoms(rules: Iterable[dict[str, Any]]) -> set[Atom]:
    """Each rule expanded into one (group, resource, verb, name) per combination."""
    out: set[Atom] = set()
    for rule in rules:
        names = rule.get("resourceNames") or [None]
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                for verb in rule["verbs"]:
                    out |= {(group, resource, verb, name) for name in names}
    return out


def uncovered(wanted: set[Atom], held: set[Atom]) -> set[Atom]:
    """The atoms of ``wanted`` that ``held`` does not grant (an unnamed atom covers any name)."""
    return {a for a in wanted if a not in held and (*a[:3], None) not in held}


def held_by(account: str, objects: list[dict[str, Any]]) -> tuple[set[Atom], dict[str, set[Atom]]]:
    """What ServiceAccount gpuctrl/``account`` holds: cluster-wide, and per namespace."""
    roles = {
        (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objects
    }
    cluster: set[Atom] = set()
    namespaced: dict[str, set[Atom]] = {}
    for binding in objects:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        subjects = binding.get("subjects", [])
        if {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE} not in subjects:
            continue
        namespace = binding["metadata"].get("namespace", "")
        ref = binding["roleRef"]
        role = roles[(ref["kind"], namespace if ref["kind"] == "Role" else "", ref["name"])]
        granted = atoms(role["rules"])
        if binding["kind"] == "ClusterRoleBinding":
            cluster |= granted
        else:
            namespaced.setdefault(namespace, set()).update(granted)
    return cluster, namespaced


INSTALL = kustomize(CONFIG / "default")
RBAC_KINDS = ("Role", "ClusterRole")
RBAC_GROUP = "rbac.authorization.k8s.io"


def test_no_wildcard_in_any_rule() -> None:
    rules = [r for o in INSTALL if o["kind"] in RBAC_KINDS for r in o["rules"]]
    assert len(rules) > 10
    for rule in rules:
        for field in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
            assert "*" not in rule.get(field, []), rule
            assert not any("*" in value for value in rule.get(field, [])), rule


def test_each_component_has_its_own_account() -> None:
    accounts = {o["metadata"]["name"] for o in INSTALL if o["kind"] == "ServiceAccount"}
    assert accounts == {"gpuctrl-manager", "gpuctrl-webhook"}
    for deployment in (o for o in INSTALL if o["kind"] == "Deployment"):
        component = deployment["metadata"]["labels"]["app.kubernetes.io/component"]
        assert (
            deployment["spec"]["template"]["spec"]["serviceAccountName"] == f"gpuctrl-{component}"
        )


def test_the_webhook_reaches_only_its_own_secret_and_configuration() -> None:
    cluster, namespaced = held_by("gpuctrl-webhook", INSTALL)
    assert {a for a in cluster if a[1] == "mutatingwebhookconfigurations"} == {
        (
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations",
            verb,
            "gpuctrl-pod-policy",
        )
        for verb in ("get", "list", "watch", "update", "patch")
    }
    secrets = {a for a in namespaced[NAMESPACE] if a[1] == "secrets"}
    # Only gpuctrl-webhook-tls, and no create (it cannot carry a name): the install ships it.
    assert secrets == {
        ("", "secrets", verb, "gpuctrl-webhook-tls")
        for verb in ("get", "list", "watch", "update", "patch")
    }
    assert not {a for a in cluster if a[1] == "secrets"}
    # PodPolicy status is the manager's to write.
    assert not {a for a in cluster if a[1].endswith("/status")}
    assert set(namespaced) == {NAMESPACE}


def test_manager_can_only_touch_secrets_nowhere() -> None:
    cluster, namespaced = held_by("gpuctrl-manager", INSTALL)
    for held in (cluster, *namespaced.values()):
        assert not {a for a in held if a[1] == "secrets"}
    assert ("coordination.k8s.io", "leases", "update", "gpuctrl-manager") in namespaced[NAMESPACE]
    assert ("coordination.k8s.io", "leases", "update", None) not in namespaced[NAMESPACE]


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.stem for s in SAMPLES])
def test_operand_rbac_is_a_subset_of_the_managers(sample: Path) -> None:
    given = read_inputs([sample, NODES], NAMESPACE)
    objects = render(given.policy, given.facts)
    operand_roles = [o for o in objects if o["kind"] in RBAC_KINDS]
    assert {o["metadata"]["name"] for o in operand_roles} >= {"gpuctrl-validator", "gpuctrl-driver"}
    cluster, namespaced = held_by("gpuctrl-manager", INSTALL)
    for role in operand_roles:
        namespace = role["metadata"].get("namespace")
        held = cluster | (namespaced.get(namespace, set()) if namespace else set())
        missing = uncovered(atoms(role["rules"]), held)
        assert not missing, f"{role['kind']} {namespace}/{role['metadata']['name']}: {missing}"


def test_manager_writes_no_rbac_but_what_it_renders() -> None:
    # Server-side apply patches (creates when new), prune deletes: both only for the names the
    # renderer gives the samples' RBAC objects, in their namespace ("": cluster-scoped).
    rendered: dict[str, set[Atom]] = {}
    for sample in SAMPLES:
        given = read_inputs([sample, NODES], NAMESPACE)
        for obj in render(given.policy, given.facts):
            resource = OWNED[(obj["apiVersion"], obj["kind"])]
            if resource.group == RBAC_GROUP:
                writes = {
                    (RBAC_GROUP, resource.plural, verb, obj["metadata"]["name"])
                    for verb in ("patch", "delete")
                }
                rendered.setdefault(obj["metadata"].get("namespace", ""), set()).update(writes)
    cluster, namespaced = held_by("gpuctrl-manager", INSTALL)
    held = {"": cluster, **namespaced}
    assert set(rendered) <= set(held)
    for namespace, atoms_held in held.items():
        writes = {
            a
            for a in atoms_held
            if a[0] == RBAC_GROUP and a[2] not in ("get", "list", "watch", "create")
        }
        assert writes == rendered.get(namespace, set()), namespace or "cluster-wide"


def test_manager_may_set_blocking_owner_references_to_its_policies() -> None:
    # OwnerReferencesPermissionEnforcement admits blockOwnerDeletion only from who may update
    # the owner's finalizers; every operand object carries one to its ClusterPolicy.
    cluster, _ = held_by("gpuctrl-manager", INSTALL)
    assert ("gpuctrl.io", "clusterpolicies/finalizers", "update", None) in cluster


def test_subset_check_finds_a_missing_rule() -> None:
    # The check itself: a rule the manager lacks, or holds only for another name, is found.
    held = atoms(
        [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "resourceNames": ["a"]}]
    )
    assert uncovered(atoms([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]), held)
    named = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "resourceNames": ["a"]}]
    assert not uncovered(atoms(named), held)
    assert uncovered(atoms([{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]), held)


def test_rbac_files_hold_only_rbac_and_accounts() -> None:
    kinds = {
        o["kind"] for f in (CONFIG / "rbac").glob("*.yaml") for o in documents(f) if "kind" in o
    }
    assert kinds <= {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
