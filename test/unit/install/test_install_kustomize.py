"""`kubectl kustomize config/default`: the complete install, hardened, the same with every
kustomize (Debian's kubectl 1.20 has v2.0.3, the oldest; a newer one when the machine has it)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
from install_manifests import CONFIG, NAMESPACE, REPO, by_key, kubectls, kustomize

from api.v1alpha1._component import AGENT_VERSION
from webhooks._configuration import webhook_configuration

INSTALL = kustomize(CONFIG / "default")
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def objects(kind: str) -> list[dict[str, Any]]:
    return [o for o in INSTALL if o["kind"] == kind]


def test_renders_the_complete_install() -> None:
    kinds = {(o["kind"], o["metadata"]["name"]) for o in INSTALL}
    assert {
        ("Namespace", "gpuctrl"),
        ("CustomResourceDefinition", "clusterpolicies.gpuctrl.io"),
        ("CustomResourceDefinition", "podpolicies.gpuctrl.io"),
        ("ServiceAccount", "gpuctrl-manager"),
        ("ServiceAccount", "gpuctrl-webhook"),
        ("ClusterRole", "gpuctrl-manager"),
        ("ClusterRole", "gpuctrl-webhook"),
        ("Role", "gpuctrl-manager"),
        ("Role", "gpuctrl-webhook"),
        ("Deployment", "gpuctrl-manager"),
        ("Deployment", "gpuctrl-webhook"),
        ("PodDisruptionBudget", "gpuctrl-manager"),
        ("PodDisruptionBudget", "gpuctrl-webhook"),
        ("Service", "gpuctrl-webhook"),
        ("MutatingWebhookConfiguration", "gpuctrl-pod-policy"),
        ("Secret", "gpuctrl-webhook-tls"),
        ("NetworkPolicy", "gpuctrl-webhook"),
    } <= kinds
    by_key(INSTALL)  # no object twice
    for obj in INSTALL:
        if obj["kind"] not in (
            "Namespace",
            "CustomResourceDefinition",
            "ClusterRole",
            "ClusterRoleBinding",
            "MutatingWebhookConfiguration",
        ):
            assert obj["metadata"]["namespace"] in (NAMESPACE, "default"), obj["metadata"]


@pytest.mark.parametrize("kubectl", kubectls(), ids=lambda p: str(p))
def test_every_kustomize_renders_the_same_objects(kubectl: Path) -> None:
    assert by_key(kustomize(CONFIG / "default", kubectl)) == by_key(INSTALL)


def test_targets_current_apis_only() -> None:
    # Kubernetes 1.27+: no API removed by then (policy/v1beta1, extensions, ...v1beta1).
    for obj in INSTALL:
        assert not obj["apiVersion"].endswith(("v1beta1", "v1alpha1")), obj["apiVersion"]
    assert {o["apiVersion"] for o in objects("PodDisruptionBudget")} == {"policy/v1"}


def test_image_is_the_package_version_pulled_if_not_present() -> None:
    assert VERSION == AGENT_VERSION
    for deployment in objects("Deployment"):
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            assert container["image"] == f"ghcr.io/gpuctrl/gpuctrl:{VERSION}"
            assert container["imagePullPolicy"] == "IfNotPresent"


@pytest.mark.parametrize("name", ["gpuctrl-manager", "gpuctrl-webhook"])
def test_deployment_is_hardened_and_redundant(name: str) -> None:
    deployment = next(o for o in objects("Deployment") if o["metadata"]["name"] == name)
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 2
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "hostNetwork" not in pod
    assert "hostPID" not in pod
    for volume in pod.get("volumes", []):
        assert set(volume) == {"name", "emptyDir"}, volume
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    (container,) = pod["containers"]
    context = container["securityContext"]
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert "privileged" not in context
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    assert "memory" in container["resources"]["limits"]
    for port in container["ports"]:
        assert port["protocol"] == "TCP"
    # The operator's own pods never match the webhook's objectSelector.
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert "app.kubernetes.io/managed-by" not in labels
    budget = next(o for o in objects("PodDisruptionBudget") if o["metadata"]["name"] == name)
    assert budget["spec"]["minAvailable"] == 1
    assert (
        budget["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    )


def test_manager_elects_a_leader_and_webhook_manages_its_certificates() -> None:
    args = {
        o["metadata"]["name"]: o["spec"]["template"]["spec"]["containers"][0]["args"]
        for o in objects("Deployment")
    }
    assert args["gpuctrl-manager"][0] == "manager"
    assert {"--leader-elect", f"--namespace={NAMESPACE}"} <= set(args["gpuctrl-manager"])
    assert args["gpuctrl-webhook"][0] == "webhook"
    assert {
        "--manage-certificates",
        "--service-name=gpuctrl-webhook",
        "--bind-address=:9443",
    } <= set(args["gpuctrl-webhook"])


def test_services_carry_protocol_and_match_their_pods() -> None:
    deployments = {o["metadata"]["name"]: o for o in objects("Deployment")}
    for service in objects("Service"):
        for port in service["spec"]["ports"]:
            assert port["protocol"] == "TCP"
        owner = "gpuctrl-" + service["spec"]["selector"]["app.kubernetes.io/component"]
        pod = deployments[owner]["spec"]["template"]
        assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
        names = {p["name"] for p in pod["spec"]["containers"][0]["ports"]}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= names


def test_webhook_configuration() -> None:
    (configuration,) = objects("MutatingWebhookConfiguration")
    name = configuration["metadata"]["name"]
    assert name == "gpuctrl-pod-policy"
    # Called before Istio's injector, whose configurations the apiserver calls after ours.
    assert sorted([name, "istio-sidecar-injector", "istio-revision-tag-default"])[0] == name
    service = {
        "name": "gpuctrl-webhook",
        "namespace": NAMESPACE,
        "path": "/mutate-v1-pod",
        "port": 443,
    }
    # The same webhooks as the ones `gpuctrl webhook --webhook-url` keeps, but for the caBundle.
    expected = webhook_configuration({"service": service}, b"", NAMESPACE)["webhooks"]
    for webhook in expected:
        del webhook["clientConfig"]["caBundle"]
    assert configuration["webhooks"] == expected
    policies = {w["name"]: w["failurePolicy"] for w in configuration["webhooks"]}
    # An outage never keeps an operand off a node; workload pods keep their mesh opt-out.
    assert policies == {"pod-policy.gpuctrl.io": "Fail", "operand-pod-policy.gpuctrl.io": "Ignore"}


def test_the_webhooks_network_policy_admits_its_three_ports_only() -> None:
    """Issue 25: ingress to the webhook's pods is named port by port (the apiserver's source is
    the cluster's to narrow), and every port it names is one the pod serves."""
    (policy,) = objects("NetworkPolicy")
    (deployment,) = [d for d in objects("Deployment") if d["metadata"]["name"] == "gpuctrl-webhook"]
    template = deployment["spec"]["template"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= template["metadata"]["labels"].items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    served = {p["name"] for p in template["spec"]["containers"][0]["ports"]}
    rules = {rule["ports"][0]["port"]: rule.get("from") for rule in policy["spec"]["ingress"]}
    assert set(rules) == served == {"webhook", "metrics", "health"}
    assert all(len(rule["ports"]) == 1 for rule in policy["spec"]["ingress"])
    assert rules["webhook"], "an empty from would admit everything: the sources are listed"
