"""The Helm chart, rendered by Helm's own engine (helm-python-sdk bundles Helm v4's library).

Default values render the objects of ``kubectl kustomize config/default`` (less Helm's labels,
the Namespace, which ``helm install --create-namespace`` makes, and the CRDs, which Helm takes
from crds/) plus the ClusterPolicy; the samples' values render the samples; NVIDIA's default
values (test/data/nvidia/, their facts in gpuctrl's own layout) and a values file written for
NVIDIA's chart render valid objects; bad values fail the generated schema with the value's path.
test_install_nvidia_values.py holds the chart to `gpuctrl migrate`'s meaning of NVIDIA's values.
"""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from install_manifests import (
    CHART,
    CONFIG,
    REPO,
    by_key,
    documents,
    helm_crds,
    helm_render,
    kubectls,
    kustomize,
    without_helm_labels,
)

from api.chartgen import chart_files
from api.crdgen import crd_files
from api.v1alpha1 import load_cluster_policy, load_pod_policy
from controllers.render import ClusterFacts, render
from webhooks._configuration import webhook_configuration

helm = pytest.importorskip("helm_python", reason="the chart tests need `make test`'s helm extra")

VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
SAMPLES = CONFIG / "samples"
DATA = REPO / "test" / "data"
HELM_ONLY = {"ClusterPolicy", "PodPolicy"}


def render_file(path: Path, namespace: str = "gpuctrl") -> list[dict[str, Any]]:
    return helm_render(yaml.safe_load(path.read_text()) or {}, namespace=namespace)


def only(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind]
    return found


def notes(values: dict[str, Any]) -> str:
    with helm.Chart.load(str(CHART)) as chart:
        return chart.render(values, name="gpuctrl", namespace="gpuctrl")[
            "gpuctrl/templates/NOTES.txt"
        ]


def test_generated_chart_files_are_current() -> None:
    for name, text in chart_files(CONFIG).items():
        committed = CHART / name
        assert committed.exists(), f"{committed} missing: run `make manifests`"
        assert committed.read_text() == text, f"{name} is stale: run `make manifests`"


def test_chart_and_app_version_are_the_package_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == VERSION


def test_default_values_render_the_kustomize_install() -> None:
    rendered = helm_render()
    install = kustomize(CONFIG / "default")
    expected = by_key(
        o for o in install if o["kind"] not in ("Namespace", "CustomResourceDefinition")
    )
    got = by_key(without_helm_labels(o) for o in rendered if o["kind"] not in HELM_ONLY)
    assert sorted(got) == sorted(expected)
    for key, obj in expected.items():
        assert got[key] == obj, key
    # Helm's labels are there, on every object but never on a pod template.
    for obj in rendered:
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        template = obj.get("spec", {}).get("template", {})
        assert "app.kubernetes.io/managed-by" not in template.get("metadata", {}).get("labels", {})


@pytest.mark.parametrize("kubectl", kubectls(), ids=str)
def test_cert_manager_values_render_the_cert_manager_overlay(kubectl: Path) -> None:
    overlay = kustomize(CONFIG / "certmanager", kubectl)
    expected = by_key(
        o for o in overlay if o["kind"] not in ("Namespace", "CustomResourceDefinition")
    )
    rendered = helm_render({"webhook": {"certManager": {"enabled": True}}})
    got = by_key(without_helm_labels(o) for o in rendered if o["kind"] not in HELM_ONLY)
    assert sorted(got) == sorted(expected)
    for key, obj in expected.items():
        assert got[key] == obj, key


def test_crds_are_the_generated_ones() -> None:
    assert helm_crds() == [yaml.safe_load(text) for _, text in sorted(crd_files().items())]


@pytest.mark.parametrize("sample", ["minimal", "airgapped", "servicemesh", "sharing"])
def test_sample_values_render_the_sample(sample: Path) -> None:
    rendered = render_file(SAMPLES / "helm" / f"values-{sample}.yaml")
    expected = documents(SAMPLES / f"clusterpolicy-{sample}.yaml")
    policy = load_cluster_policy(only(rendered, "ClusterPolicy"))
    assert policy.spec == load_cluster_policy(only(expected, "ClusterPolicy")).spec
    assert policy.metadata["name"] == "gpu-cluster-policy"
    for kind in ("PodPolicy", "ConfigMap"):
        want = [o for o in expected if o["kind"] == kind]
        got = [without_helm_labels(o) for o in rendered if o["kind"] == kind]
        if kind == "PodPolicy":
            got = [{**o, "metadata": {"name": o["metadata"]["name"]}} for o in got]
            assert [load_pod_policy(o) for o in got] == [load_pod_policy(o) for o in want]
        else:  # the chart labels what it makes from values (devicePlugin.config.create)
            assert [_content(o) for o in got] == [_content(o) for o in want]


def _content(config_map: dict[str, Any]) -> tuple[str, str, dict[str, str]]:
    meta = config_map["metadata"]
    return meta["name"], meta["namespace"], config_map["data"]


def test_nvidias_own_values_render_a_valid_install() -> None:
    rendered = render_file(DATA / "nvidia" / "gpu-operator-values.yaml")
    policy = load_cluster_policy(only(rendered, "ClusterPolicy"))
    spec = policy.spec
    # NVIDIA's "" names are unset, not invalid names.
    assert spec.driver.repo_config.config_map_name is None
    assert spec.driver.cert_config.name is None
    assert spec.driver.version == "595.91.07"
    # NVIDIA's toolkit image is the runtime's source; gpuctrl's image runs both agents.
    runtime = spec.toolkit.runtime_image
    assert (runtime.repository, runtime.image, runtime.version) == (
        "nvcr.io/nvidia/k8s",
        "container-toolkit",
        "v1.20.0",
    )
    assert (spec.toolkit.repository, spec.toolkit.image, spec.toolkit.version) == (
        "ghcr.io/gpuctrl",
        "gpuctrl",
        VERSION,
    )
    assert (spec.validator.repository, spec.validator.image) == ("ghcr.io/gpuctrl", "gpuctrl")
    assert spec.daemonsets.rolling_update.max_unavailable == 1
    # NVIDIA's operator placement applies to gpuctrl's manager; its image does not.
    manager = next(o for o in rendered if o["metadata"]["name"] == "gpuctrl-manager")
    pod = manager["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["containers"][0]["image"] == f"ghcr.io/gpuctrl/gpuctrl:{VERSION}"
    assert pod["containers"][0]["resources"]["limits"] == {"cpu": "500m", "memory": "350Mi"}


def test_nvidias_values_report_what_gpuctrl_ignores() -> None:
    values = yaml.safe_load((DATA / "nvidia" / "gpu-operator-values.yaml").read_text())
    ignored = re.findall(r"^  (\S+)$", notes(values), flags=re.MULTILINE)
    assert ignored == [
        "driver.kernelModuleType",
        "driver.licensingConfig",
        "driver.startupProbe",
        "operator.image",
        "operator.imagePullPolicy",
        "operator.logging",
        "operator.repository",
        "operator.upgradeCRD",
        "validator.image",
        "validator.repository",
    ]
    # NVIDIA's operands enabled by default, named as `gpuctrl migrate` names them.
    assert (
        "Operands gpuctrl lacks (not deployed): vgpuDeviceManager,"
        " vfioManager, sandboxDevicePlugin, ccManager, kataSandboxDevicePlugin"
    ) in notes(values)
    assert "ignored" not in notes({})
    assert "lacks" not in notes({})


def test_values_written_for_nvidias_chart_with_a_node_local_repo_and_istio() -> None:
    rendered = render_file(DATA / "install" / "values-nvidia-style.yaml", namespace="gpu-operator")
    policy = load_cluster_policy(only(rendered, "ClusterPolicy"))
    repo = policy.spec.driver.repo_config
    assert (repo.config_map_name, repo.node_local_paths) == ("local-repo", ["/opt/local-packages"])
    assert policy.spec.driver.cert_config.name is None
    assert policy.spec.toolkit.install_dir == "/usr/local/nvidia"
    # NVIDIA's meaning, as migrate gives it: CONTAINERD_CONFIG is the agent's config path, and
    # WITH_WORKLOAD, which gpuctrl's agent does not read, is left out (NOTES names it).
    assert policy.spec.toolkit.containerd.config_path == "/etc/containerd/config.toml"
    assert not policy.spec.toolkit.env
    assert not policy.spec.validator.plugin.env
    (config_map,) = [o for o in rendered if o["kind"] == "ConfigMap"]
    assert config_map["metadata"] == {"name": "local-repo", "namespace": "gpu-operator"}
    pod_policy = load_pod_policy(only(rendered, "PodPolicy"))
    assert pod_policy.spec.meshes == ["istio"]
    assert "validator-workloads" in pod_policy.spec.targets.components
    # Everything lands in the release namespace, and the webhook is reached there.
    for obj in rendered:
        namespace = obj["metadata"].get("namespace")
        assert namespace in (None, "gpu-operator", "default"), obj["metadata"]
    configuration = only(rendered, "MutatingWebhookConfiguration")
    service = {
        "name": "gpuctrl-webhook",
        "namespace": "gpu-operator",
        "path": "/mutate-v1-pod",
        "port": 443,
    }
    expected = webhook_configuration({"service": service}, b"", "gpu-operator")["webhooks"]
    for webhook in expected:
        del webhook["clientConfig"]["caBundle"]
    assert configuration["webhooks"] == expected
    for binding in (o for o in rendered if o["kind"].endswith("RoleBinding")):
        assert binding["subjects"][0]["namespace"] == "gpu-operator"
    manager = next(o for o in rendered if o["metadata"]["name"] == "gpuctrl-manager")
    assert (
        "--namespace=gpu-operator" in manager["spec"]["template"]["spec"]["containers"][0]["args"]
    )


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"driver": {"enabled": "yes"}}, "/driver/enabled"),
        ({"daemonsets": {"updateStrategy": "Sideways"}}, "/daemonsets/updateStrategy"),
        ({"daemonsets": {"rollingUpdate": {"maxUnavailable": "lots"}}}, "/maxUnavailable"),
        ({"toolkit": {"installDir": "usr/local/nvidia"}}, "/toolkit/installDir"),
        ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
        ({"operator": {"replicas": 0}}, "/operator/replicas"),
        ({"podPolicies": {"x": {"meshes": ["envoy"]}}}, "/podPolicies/x/meshes/0"),
        ({"podPolicies": {"x": {"mehses": ["istio"]}}}, "/podPolicies/x"),
        (
            {"validator": {"workloads": {"timeoutSeconds": 0}}},
            "/validator/workloads/timeoutSeconds",
        ),
        ({"podPolicies": {"Bad Name: x": {"meshes": ["istio"]}}}, "'Bad Name: x' does not match"),
        ({"clusterPolicy": {"name": "gpu_policy"}}, "/clusterPolicy/name"),
        # an empty `from` would admit every source
        ({"webhook": {"networkPolicy": {"apiserver": []}}}, "/webhook/networkPolicy/apiserver"),
    ],
    ids=lambda v: json.dumps(v) if isinstance(v, dict) else v,
)
def test_bad_values_fail_the_schema_naming_the_value(values: dict[str, Any], where: str) -> None:
    with pytest.raises(helm.HelmValuesError) as failed:
        helm_render(values)
    assert where in str(failed.value)


def test_nvidias_unset_forms_are_accepted_and_left_out() -> None:
    rendered = helm_render(
        {
            "driver": {"enabled": False, "version": "", "repoConfig": {"configMapName": None}},
            "validator": {"plugin": None, "imagePullPolicy": ""},
            "toolkit": {"containerd": {"setAsDefault": False}, "env": []},
        }
    )
    spec = only(rendered, "ClusterPolicy")["spec"]
    assert spec["driver"] == {"enabled": False}  # false is a value, "" and null are not
    assert "plugin" not in spec["validator"]
    assert spec["toolkit"]["containerd"] == {"setAsDefault": False}
    assert "env" not in spec["toolkit"]


def test_nvidias_own_configmap_names_mean_gpuctrls_defaults_as_migrate_reads_them() -> None:
    # NVIDIA's operator makes (and overwrites) these ConfigMaps itself; gpuctrl's defaults
    # stand in for them.
    mig = {
        "config": {"name": "default-mig-parted-config", "default": "all-disabled"},
        "gpuClientsConfig": {"name": "default-gpu-clients"},
    }
    spec = only(helm_render({"migManager": mig}), "ClusterPolicy")["spec"]
    assert spec["migManager"] == {"config": {"default": "all-disabled"}, "gpuClientsConfig": {}}


def test_cluster_policy_can_be_left_out() -> None:
    for values in ({"clusterPolicy": {"create": False}}, {"clusterPolicy": {"deployCR": False}}):
        assert not [o for o in helm_render(values) if o["kind"] == "ClusterPolicy"]


def test_service_monitors_scrape_both_metrics_services() -> None:
    rendered = helm_render(
        {"metrics": {"serviceMonitor": {"enabled": True, "additionalLabels": {"release": "kps"}}}}
    )
    services = [
        o for o in rendered if o["kind"] == "Service" and o["metadata"]["name"].endswith("-metrics")
    ]
    monitors = [o for o in rendered if o["kind"] == "ServiceMonitor"]
    assert len(monitors) == len(services) == 2
    for monitor in monitors:
        assert monitor["metadata"]["labels"]["release"] == "kps"
        selected = [
            s
            for s in services
            if monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
        ]
        assert len(selected) == 1
        assert monitor["spec"]["endpoints"][0]["port"] == selected[0]["spec"]["ports"][0]["name"]
    assert not [o for o in helm_render() if o["kind"] == "ServiceMonitor"]


def test_dashboard_configmap_carries_config_grafana_dashboard() -> None:
    rendered = helm_render({"dashboard": {"enabled": True}})
    config_map = only(rendered, "ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(config_map["data"]["gpuctrl.json"])
    assert dashboard == json.loads((CONFIG / "grafana" / "gpuctrl.json").read_text())


def test_cert_manager_option() -> None:
    rendered = helm_render({"webhook": {"certManager": {"enabled": True}}})
    certificate = only(rendered, "Certificate")
    assert certificate["spec"]["secretName"] == "gpuctrl-webhook-cert"
    assert "gpuctrl-webhook.gpuctrl.svc" in certificate["spec"]["dnsNames"]
    assert certificate["spec"]["issuerRef"] == {"kind": "Issuer", "name": "gpuctrl-selfsigned"}
    assert only(rendered, "Issuer")["spec"] == {"selfSigned": {}}
    configuration = only(rendered, "MutatingWebhookConfiguration")
    annotation = configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
    assert annotation == "gpuctrl/gpuctrl-webhook"
    webhook = next(
        o
        for o in rendered
        if o["metadata"]["name"] == "gpuctrl-webhook" and o["kind"] == "Deployment"
    )
    pod = webhook["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert "--manage-certificates" not in args
    (cert_dir,) = [a.split("=", 1)[1] for a in args if a.startswith("--cert-dir=")]
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == cert_dir)
    assert mount["readOnly"] is True
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == "gpuctrl-webhook-cert"
    issued = helm_render(
        {
            "webhook": {
                "certManager": {
                    "enabled": True,
                    "issuerRef": {"kind": "ClusterIssuer", "name": "ca"},
                }
            }
        }
    )
    assert not [o for o in issued if o["kind"] == "Issuer"]
    assert only(issued, "Certificate")["spec"]["issuerRef"] == {
        "kind": "ClusterIssuer",
        "name": "ca",
    }


# The metrics the dashboard may use: controller-runtime's names (issue 10, 11) and gpuctrl's.
DASHBOARD_METRICS = {
    "controller_runtime_reconcile_total",
    "controller_runtime_reconcile_errors_total",
    "controller_runtime_reconcile_time_seconds_bucket",
    "workqueue_depth",
    "workqueue_queue_duration_seconds_bucket",
    "workqueue_work_duration_seconds_bucket",
    "leader_election_master_status",
    "gpuctrl_gpu_nodes",
    "gpuctrl_operand_ready_nodes",
    "gpuctrl_operand_desired_nodes",
    "controller_runtime_webhook_latency_seconds_bucket",
    "controller_runtime_webhook_requests_total",
    "gpuctrl_pod_policy_mutations_total",
}


def test_dashboard_covers_reconciles_queues_operands_and_webhook() -> None:
    dashboard = json.loads((CONFIG / "grafana" / "gpuctrl.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    used = {m for e in exprs for m in re.findall(r"\b([a-z_]+)\{", e)}
    assert used == DASHBOARD_METRICS
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}"


def test_kind_script_is_valid_bash_and_its_values_render() -> None:
    script = REPO / "hack" / "kind-e2e.sh"
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    values = helm.parse_set_string(",".join(re.findall(r"--set (\S+)", script.read_text())))
    spec = only(helm_render(values), "ClusterPolicy")["spec"]
    for operand in ("driver", "toolkit", "devicePlugin"):
        assert spec[operand]["enabled"] is False, operand


def test_the_webhooks_network_policy_takes_the_clusters_apiserver_sources() -> None:
    konnectivity = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
        "podSelector": {"matchLabels": {"k8s-app": "konnectivity-agent"}},
    }
    values = {
        "webhook": {
            "networkPolicy": {"apiserver": [{"ipBlock": {"cidr": "10.0.0.0/24"}}, konnectivity]}
        }
    }
    policy = only(helm_render(values), "NetworkPolicy")
    webhook_rule = policy["spec"]["ingress"][0]
    assert webhook_rule["ports"] == [{"port": "webhook", "protocol": "TCP"}]
    assert webhook_rule["from"] == [{"ipBlock": {"cidr": "10.0.0.0/24"}}, konnectivity]
    off = {"webhook": {"networkPolicy": {"enabled": False}}}
    assert not [o for o in helm_render(off) if o["kind"] == "NetworkPolicy"]


SHARING_DATA = {
    "default": "version: v1\n",
    "time-sliced-4": {
        "version": "v1",
        "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}},
    },
}


# The configs NVIDIA's <section>.config.create/data make: the data as NVIDIA's chart takes it,
# the ConfigMap data it means (a mapping: written as its YAML), the operator's checked copy.
MIG_PARTED = {
    "version": "v1",
    "mig-configs": {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "all-1g.10gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
    },
}
METRICS = "# DCGM field, Prometheus type, help\nDCGM_FI_DEV_SM_CLOCK, gauge, SM clock (in MHz).\n"
CREATED = {
    "devicePlugin": (SHARING_DATA, SHARING_DATA, "gpuctrl-device-plugin-config"),
    "dcgmExporter": (METRICS, {"dcgm-metrics.csv": METRICS}, "gpuctrl-dcgm-exporter-metrics"),
    "migManager": (
        {"config.yaml": MIG_PARTED},
        {"config.yaml": MIG_PARTED},
        "gpuctrl-mig-parted-config",
    ),
}
GPU_NODE = {
    "metadata": {
        "name": "gpu-0",
        "labels": {
            "feature.node.kubernetes.io/pci-10de.present": "true",
            "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
            "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04",
        },
    }
}


@pytest.mark.parametrize("section", CREATED)
def test_nvidias_config_create_makes_the_configmap_the_policy_names(section: str) -> None:
    data, meant, copy = CREATED[section]
    config = {"create": True, "name": "made-config", "data": data}
    rendered = helm_render({section: {"config": config}}, namespace="gpu-ops")
    config_map = only(rendered, "ConfigMap")
    assert (config_map["metadata"]["name"], config_map["metadata"]["namespace"]) == (
        "made-config",
        "gpu-ops",
    )
    assert sorted(config_map["data"]) == sorted(meant)
    for key, value in meant.items():
        written = config_map["data"][key]
        assert (written if isinstance(value, str) else yaml.safe_load(written)) == value
    policy = load_cluster_policy(only(rendered, "ClusterPolicy"))
    assert only(rendered, "ClusterPolicy")["spec"][section]["config"]["name"] == "made-config"
    # The operator takes the ConfigMap: its checked copy holds the same keys.
    facts = ClusterFacts.from_objects("gpu-ops", [GPU_NODE], [config_map])
    (made,) = [o for o in render(policy, facts) if o["metadata"]["name"] == copy]
    assert sorted(made["data"]) == sorted(meant)


def test_device_plugin_config_default_is_copied_beside_the_made_configmap() -> None:
    config = {"create": True, "name": "plugin-configs", "default": "time-sliced-4"}
    rendered = helm_render({"devicePlugin": {"config": config | {"data": SHARING_DATA}}})
    spec = load_cluster_policy(only(rendered, "ClusterPolicy")).spec
    assert (spec.device_plugin.config.name, spec.device_plugin.config.default) == (
        "plugin-configs",
        "time-sliced-4",
    )


@pytest.mark.parametrize("section", CREATED)
def test_an_existing_configmap_is_named_and_none_is_made(section: str) -> None:
    rendered = helm_render({section: {"config": {"name": "mine", "data": CREATED[section][0]}}})
    assert not [o for o in rendered if o["kind"] == "ConfigMap"]
    assert only(rendered, "ClusterPolicy")["spec"][section]["config"]["name"] == "mine"


def test_a_config_without_a_name_is_left_out_as_nvidias_chart_does() -> None:
    rendered = helm_render({"devicePlugin": {"config": {"name": "", "default": "time-sliced-4"}}})
    assert "config" not in (only(rendered, "ClusterPolicy")["spec"].get("devicePlugin") or {})


@pytest.mark.parametrize(
    ("values", "message"),
    [
        *(
            pytest.param(
                {section: {"config": {"create": True, "data": CREATED[section][0]}}},
                f"{section}.config.name cannot be empty when {section}.config.create is true",
                id=f"{section}-no-name",
            )
            for section in CREATED
        ),
        *(
            pytest.param(
                {section: {"config": {"create": True, "name": "c", "data": empty}}},
                f"{section}.config.data cannot be empty when {section}.config.create is true",
                id=f"{section}-no-data",
            )
            for section, empty in (("devicePlugin", {}), ("dcgmExporter", ""), ("migManager", {}))
        ),
        pytest.param(
            {"migManager": {"config": {"create": True, "name": "c", "data": {"a.yaml": "x"}}}},
            "migManager.config.data lacks config.yaml: config.yaml is the mig-parted config",
            id="migManager-without-config.yaml",
        ),
    ],
)
def test_create_without_a_name_or_the_data_fails_naming_the_value(
    values: dict[str, Any], message: str
) -> None:
    with pytest.raises(helm.HelmRenderError) as failed:
        helm_render(values)
    assert message in str(failed.value)


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"dcgmExporter": {"config": {"data": {"dcgm-metrics.csv": METRICS}}}}, "/config/data"),
        ({"migManager": {"config": {"data": "config.yaml: |-"}}}, "/migManager/config/data"),
        ({"migManager": {"config": {"data": {"config.yaml": 1}}}}, "/config/data/config.yaml"),
        ({"devicePlugin": {"config": {"create": "yes"}}}, "/devicePlugin/config/create"),
    ],
    ids=["csv-as-mapping", "mig-data-as-text", "a-number", "create-not-boolean"],
)
def test_config_data_of_the_wrong_type_fails_the_schema(values: dict[str, Any], where: str) -> None:
    with pytest.raises(helm.HelmValuesError) as failed:
        helm_render(values)
    assert where in str(failed.value)
