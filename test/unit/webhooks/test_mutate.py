"""`mutate`: PodPolicies applied to a pod, as a JSON Patch; table-driven."""

from __future__ import annotations

from typing import Any

import jsonpatch
import pytest

from api.v1alpha1 import PodPolicy
from webhooks._mutate import InvalidPod, mutate

WORKLOAD = {"app.kubernetes.io/component": "validator-workloads"}


def policy(name: str, **spec: Any) -> PodPolicy:
    return PodPolicy.model_validate({"metadata": {"name": name}, "spec": spec})


def pod(labels: dict[str, str] | None = WORKLOAD, **extra: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"generateName": "cuda-"}
    if labels is not None:
        metadata["labels"] = dict(labels)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [{"name": "main", "image": "cuda"}]},
        **extra,
    }


CASES = [
    pytest.param(
        pod(),
        [policy("istio", meshes=["istio"])],
        [{"op": "add", "path": "/metadata/labels/sidecar.istio.io~1inject", "value": "false"}],
        id="istio-label-slash-escaped",
    ),
    pytest.param(
        pod(),
        [policy("a", annotations={"x~y/z": "1"})],
        [{"op": "add", "path": "/metadata/annotations", "value": {"x~y/z": "1"}}],
        id="absent-annotations-added-whole",
    ),
    pytest.param(
        pod(),
        [policy("a", labels={"k~1": "new"})],
        [{"op": "add", "path": "/metadata/labels/k~01", "value": "new"}],
        id="tilde-escaped-add",
    ),
    pytest.param(
        pod({**WORKLOAD, "app": "gpuctrl-validator", "team": "ml"}),
        [policy("a", labels={"app": "not-the-daemonset", "team": "other", "new": "x"})],
        [{"op": "add", "path": "/metadata/labels/new", "value": "x"}],
        id="labels-the-pod-came-with-kept",
    ),
    pytest.param(
        pod({**WORKLOAD, "sidecar.istio.io/inject": "true"}),
        [policy("istio", meshes=["istio"])],
        [{"op": "replace", "path": "/metadata/labels/sidecar.istio.io~1inject", "value": "false"}],
        id="opt-out-replaces-the-pods-own-mesh-setting",
    ),
    pytest.param(
        pod({**WORKLOAD, "sidecar.istio.io/inject": "false"}),
        [policy("istio", meshes=["istio"])],
        [],
        id="already-equal-no-op",
    ),
    pytest.param(
        pod({"app.kubernetes.io/component": "driver"}),
        [policy("istio", meshes=["istio"])],
        [],
        id="other-component-untouched",
    ),
    pytest.param(
        pod(None),
        [
            policy(
                "sel",
                targets={"components": [], "selector": {"matchLabels": {}}},
                labels={"a": "b"},
            )
        ],
        [{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}],
        id="absent-labels-empty-selector-matches",
    ),
    pytest.param(
        pod({"tier": "gpu", "env": "prod"}),
        [
            policy(
                "sel",
                targets={
                    "components": [],
                    "selector": {
                        "matchExpressions": [
                            {"key": "tier", "operator": "In", "values": ["gpu"]},
                            {"key": "env", "operator": "NotIn", "values": ["dev"]},
                            {"key": "skip", "operator": "DoesNotExist"},
                            {"key": "env", "operator": "Exists"},
                        ]
                    },
                },
                labels={"a": "b"},
            )
        ],
        [{"op": "add", "path": "/metadata/labels/a", "value": "b"}],
        id="match-expressions-all-true",
    ),
    pytest.param(
        pod({"tier": "gpu", "skip": ""}),
        [
            policy(
                "sel",
                targets={
                    "components": [],
                    "selector": {"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]},
                },
                labels={"a": "b"},
            )
        ],
        [],
        id="does-not-exist-fails-on-empty-value",
    ),
    pytest.param(
        pod(),
        [policy("r", resources={"limits": {"cpu": "1"}, "requests": {"memory": "64Mi"}})],
        [
            {
                "op": "add",
                "path": "/spec/containers/0/resources",
                "value": {"limits": {"cpu": "1"}, "requests": {"memory": "64Mi"}},
            }
        ],
        id="resources-on-container-without-any",
    ),
]


@pytest.mark.parametrize(("original", "policies", "expected"), CASES)
def test_mutate_patch_and_idempotence(
    original: dict[str, Any], policies: list[PodPolicy], expected: list[dict[str, Any]]
) -> None:
    mutation = mutate(original, policies)
    assert list(mutation.patch) == expected
    result = jsonpatch.apply_patch(original, list(mutation.patch))
    assert list(mutate(result, policies).patch) == [], "a second call must return no patch"


def test_resources_set_named_entries_and_keep_others_on_every_container() -> None:
    original = pod()
    original["spec"]["containers"].append(
        {"name": "two", "resources": {"limits": {"cpu": "4", "memory": "1Gi"}}}
    )
    original["spec"]["initContainers"] = [{"name": "init", "resources": None}]
    mutation = mutate(original, [policy("r", resources={"limits": {"cpu": "500m"}})])
    result = jsonpatch.apply_patch(original, list(mutation.patch))
    assert result["spec"]["containers"][1]["resources"]["limits"] == {
        "cpu": "500m",
        "memory": "1Gi",
    }
    assert result["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "500m"}}
    assert result["spec"]["initContainers"][0]["resources"] == {"limits": {"cpu": "500m"}}


def test_policies_apply_in_name_order_and_a_conflict_warns_naming_both() -> None:
    policies = [policy("zeta", labels={"team": "z"}), policy("alpha", labels={"team": "a"})]
    mutation = mutate(pod(), policies)
    result = jsonpatch.apply_patch(pod(), list(mutation.patch))
    assert result["metadata"]["labels"]["team"] == "z", "the later name wins"
    assert len(mutation.warnings) == 1
    assert "zeta" in mutation.warnings[0]
    assert "alpha" in mutation.warnings[0]
    assert mutation.changed_by == ("alpha", "zeta")


def test_agreeing_policies_do_not_warn() -> None:
    policies = [policy("a", meshes=["istio"]), policy("b", meshes=["istio", "linkerd"])]
    mutation = mutate(pod(), policies)
    assert mutation.warnings == ()
    assert mutation.changed_by == ("a", "b")


def test_a_label_added_by_one_policy_can_target_the_next() -> None:
    policies = [
        policy("a", labels={"gpu": "yes"}),
        policy(
            "b",
            targets={"components": [], "selector": {"matchLabels": {"gpu": "yes"}}},
            annotations={"seen": "b"},
        ),
    ]
    mutation = mutate(pod(), policies)
    result = jsonpatch.apply_patch(pod(), list(mutation.patch))
    assert result["metadata"]["annotations"] == {"seen": "b"}
    assert list(mutate(result, policies).patch) == []


def test_the_request_object_is_not_changed() -> None:
    def full() -> dict[str, Any]:
        made = pod({**WORKLOAD, "x": "y"}, spec={})
        made["metadata"]["annotations"] = {"a": "b"}
        made["spec"] = {
            "initContainers": [{"name": "i", "resources": {"limits": {"cpu": "2"}}}],
            "containers": [{"name": "c", "resources": {"requests": {"memory": "1Gi"}}}],
        }
        return made

    original = full()
    everything = policy(
        "a",
        meshes=["istio", "linkerd"],
        resources={"limits": {"cpu": "1"}, "requests": {"memory": "2Gi"}},
    )
    assert mutate(original, [everything]).patch
    assert original == full()


@pytest.mark.parametrize(
    ("broken", "where"),
    [
        pytest.param({"metadata": []}, "metadata", id="metadata-list"),
        pytest.param({"metadata": {"labels": {"a": 1}}}, "metadata.labels", id="label-int"),
        pytest.param({"spec": {"containers": {}}}, "spec.containers", id="containers-map"),
        pytest.param({"spec": {"containers": [1]}}, r"spec.containers\[0\]", id="container-int"),
        pytest.param(
            {"spec": {"initContainers": [{"resources": {"limits": []}}]}},
            r"initContainers\[0\].resources.limits",
            id="limits-list",
        ),
    ],
)
def test_a_pod_of_the_wrong_shape_is_named(broken: dict[str, Any], where: str) -> None:
    with pytest.raises(InvalidPod, match=where):
        mutate(broken, [policy("a", meshes=["istio"])])


REFUSED = [
    ("labels", "app"),
    ("labels", "app.kubernetes.io/managed-by"),
    ("labels", "gpuctrl.io/policy"),
    ("labels", "sidecar.istio.io/inject"),
    ("annotations", "container.apparmor.security.beta.kubernetes.io/main"),
    ("annotations", "seccomp.security.alpha.kubernetes.io/pod"),
    ("annotations", "cdi.k8s.io/gpu"),
    ("annotations", "sidecar.istio.io/proxyImage"),
    ("annotations", "sidecar.istio.io/userVolume"),
    ("annotations", "linkerd.io/inject"),
    ("annotations", "config.linkerd.io/skip-outbound-ports"),
    ("annotations", "consul.hashicorp.com/connect-inject"),
    ("annotations", "io.kubernetes.cri-o.Devices"),
    ("annotations", "run.oci.keep_original_groups"),
]


@pytest.mark.parametrize(("kind", "key"), REFUSED)
def test_a_refused_key_is_never_set_even_from_a_policy_that_skipped_validation(
    kind: str, key: str
) -> None:
    mutation = mutate(pod(), [policy("bad", **{kind: {key: "unconfined"}, "meshes": ["kuma"]})])
    result = jsonpatch.apply_patch(pod(), list(mutation.patch))
    assert key not in (result["metadata"].get(kind) or {})
    assert result["metadata"]["labels"]["kuma.io/sidecar-injection"] == "disabled"
    (warning,) = mutation.warnings
    assert warning.startswith(f"PodPolicy bad may not set {kind[:-1]} {key}:")


def test_a_later_policy_cannot_undo_a_mesh_opt_out() -> None:
    policies = [
        policy("a-opt-out", meshes=["istio", "linkerd"]),
        policy(
            "z-undo",
            labels={"sidecar.istio.io/inject": "true"},
            annotations={"linkerd.io/inject": "enabled"},
        ),
    ]
    mutation = mutate(pod(), policies)
    result = jsonpatch.apply_patch(pod(), list(mutation.patch))
    assert result["metadata"]["labels"]["sidecar.istio.io/inject"] == "false"
    assert result["metadata"]["annotations"]["linkerd.io/inject"] == "disabled"
    assert len(mutation.warnings) == 2
    assert all(w.startswith("PodPolicy z-undo may not set") for w in mutation.warnings)


def test_a_label_set_by_an_earlier_policy_may_be_changed_by_a_later_one() -> None:
    """Only what the pod was created with is kept; between policies the later name wins."""
    mutation = mutate(pod(), [policy("a", labels={"t": "1"}), policy("b", labels={"t": "2"})])
    result = jsonpatch.apply_patch(pod(), list(mutation.patch))
    assert result["metadata"]["labels"]["t"] == "2"
