"""`validate` / `load_cluster_policy`: every rule beyond the schema, with its field path."""

from typing import Any

import pytest

from api.v1alpha1 import InvalidPolicy, load_cluster_policy, load_pod_policy


def _spec(**sections: Any) -> dict[str, Any]:
    return {"apiVersion": "gpuctrl.io/v1alpha1", "kind": "ClusterPolicy", "spec": sections}


def _local(*paths: str, config_map: str | None = "repo") -> dict[str, Any]:
    repo: dict[str, Any] = {"nodeLocalPaths": list(paths)}
    if config_map:
        repo["configMapName"] = config_map
    return _spec(driver={"repoConfig": repo})


def _problems(mapping: dict[str, Any]) -> list[str]:
    with pytest.raises(InvalidPolicy) as caught:
        load_cluster_policy(mapping)
    return [str(p) for p in caught.value.problems]


NODE_LOCAL = "spec.driver.repoConfig.nodeLocalPaths"
INVALID = [
    (_local("opt/pkgs"), f"{NODE_LOCAL}[0]: 'opt/pkgs' is not absolute", "relative"),
    (_local("/opt/../etc"), f"{NODE_LOCAL}[0]: '/opt/../etc' is not normalised", "dotdot"),
    (_local("/opt//pkgs"), f"{NODE_LOCAL}[0]: '/opt//pkgs' is not normalised", "double-slash"),
    (_local("/opt/pkgs/"), f"{NODE_LOCAL}[0]: '/opt/pkgs/' is not normalised", "trailing-slash"),
    (_local("/"), f"{NODE_LOCAL}[0]: '/' would expose the whole host", "root"),
    (_local("/etc"), f"{NODE_LOCAL}[0]: '/etc' is under /etc", "etc"),
    (
        _local("/var/lib/kubelet/pods"),
        f"{NODE_LOCAL}[0]: '/var/lib/kubelet/pods' is under",
        "kubelet",
    ),
    (_local("/var/run/x"), f"{NODE_LOCAL}[0]: '/var/run/x' is under /var/run", "var-run"),
    (_local("/boot"), f"{NODE_LOCAL}[0]: '/boot' is under /boot", "boot"),
    (_local("/root/r"), f"{NODE_LOCAL}[0]: '/root/r' is under /root", "root-home"),
    (_local("/proc/1"), f"{NODE_LOCAL}[0]: '/proc/1' is under /proc", "proc"),
    (_local("/sys/x"), f"{NODE_LOCAL}[0]: '/sys/x' is under /sys", "sys"),
    (_local("/dev/sda"), f"{NODE_LOCAL}[0]: '/dev/sda' is under /dev", "dev"),
    (_local("/run/x"), f"{NODE_LOCAL}[0]: '/run/x' is under /run", "run"),
    (_local("/opt/a", "/opt/a"), f"{NODE_LOCAL}: '/opt/a' is listed twice", "duplicate"),
    (
        _local("/opt/a", config_map=None),
        f"{NODE_LOCAL}: requires repoConfig.configMapName",
        "no-cm",
    ),
    (
        _spec(driver={"repository": "Bad Registry", "image": "driver"}),
        "spec.driver.version: 'Bad Registry/driver:550.127.05-ubuntu22.04' is not a well-formed",
        "image-space",
    ),
    (
        _spec(devicePlugin={"version": "v1:2"}),
        "spec.devicePlugin.version: 'nvcr.io/nvidia/k8s-device-plugin:v1:2' is not",
        "image-tag",
    ),
    (
        _spec(gfd={"version": "v1:2"}),
        "spec.gfd.version: 'nvcr.io/nvidia/k8s-device-plugin:v1:2' is not",
        "gfd-image-tag",
    ),
    (
        _spec(validator={"workloads": {"image": "registry/UPPER:tag"}}),
        "spec.validator.workloads.image: 'registry/UPPER:tag' is not a well-formed",
        "workload-image",
    ),
    (
        _spec(toolkit={"runtimeImage": {"repository": "Bad Registry"}}),
        "spec.toolkit.runtimeImage.version: 'Bad Registry/container-toolkit:",
        "runtime-image",
    ),
    (
        _spec(
            validator={
                "workloads": {"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}
            }
        ),
        "spec.validator.workloads.resources.requests[cpu]: exceeds the limit 1",
        "request-over-limit",
    ),
    (
        _spec(devicePlugin={"resources": {"requests": {"nvidia.com/gpu": "1"}}}),
        "spec.devicePlugin.resources.requests[nvidia.com/gpu]: cannot be overcommitted",
        "extended-request-without-limit",
    ),
    (
        _spec(toolkit={"resources": {"requests": {"hugepages-2Mi": "1Gi"}, "limits": {}}}),
        "spec.toolkit.resources.requests[hugepages-2Mi]: cannot be overcommitted",
        "hugepages-request-without-limit",
    ),
    (
        _spec(validator={"resources": {"limits": {"example.com/dev": "500m"}}}),
        "spec.validator.resources.limits[example.com/dev]: an extended resource must be whole",
        "extended-fraction",
    ),
    (
        _spec(driver={"resources": {"requests": {"kubernetes.io/x": "1"}}}),
        "spec.driver.resources.requests[kubernetes.io/x]: 'kubernetes.io/x' is in the",
        "kubernetes-io-domain",
    ),
    (
        _spec(driver={"resources": {"limits": {"gpu": "1"}}}),
        "spec.driver.resources.limits[gpu]: 'gpu' is neither a standard resource",
        "unqualified-resource",
    ),
    (
        _spec(operator={"runtimeClass": "nvidia.gpu"}),
        "spec.operator.runtimeClass: 'nvidia.gpu' is not a DNS label",
        "runtime-class-dots",
    ),
    (
        _spec(toolkit={"containerd": {"runtimeClassName": "x" * 64}}),
        "spec.toolkit.containerd.runtimeClassName: String should have at most 63 characters",
        "runtime-handler-long",
    ),
    (
        _spec(driver={"resources": {"limits": {"cpu": "lots"}}}),
        "spec.driver.resources.limits.cpu: String should match pattern",
        "quantity-schema",
    ),
    (
        _spec(driver={"resources": {"limits": {"cpu": "-1"}}}),
        "spec.driver.resources.limits[cpu]: must not be negative",
        "quantity-negative",
    ),
    (
        _spec(daemonsets={"labels": {"bad key!": "x"}}),
        "spec.daemonsets.labels[bad key!]: 'bad key!' is not a qualified name",
        "label-key",
    ),
    (
        _spec(daemonsets={"nodeSelector": {"a": "not a value"}}),
        "spec.daemonsets.nodeSelector[a]: 'not a value' is not a valid label value",
        "label-value",
    ),
    (
        _spec(validator={"workloads": {"annotations": {"-x": "y"}}}),
        "spec.validator.workloads.annotations[-x]: '-x' is not a qualified name",
        "annotation-key",
    ),
    (
        _spec(toolkit={"env": [{"name": "1=X", "value": "v"}]}),
        "spec.toolkit.env[0].name: '1=X' is not a valid variable name",
        "env-name",
    ),
    (
        _spec(validator={"cuda": {"env": [{"name": "a b"}]}}),
        "spec.validator.cuda.env[0].name: 'a b' is not a valid variable name",
        "check-env-name",
    ),
    (
        _spec(daemonsets={"tolerations": [{"operator": "Exists", "key": "k", "value": "v"}]}),
        "spec.daemonsets.tolerations[0]: value must be empty with operator Exists",
        "toleration-exists-value",
    ),
    (
        _spec(daemonsets={"tolerations": [{"value": "v"}]}),
        "spec.daemonsets.tolerations[0]: an empty key requires operator Exists",
        "toleration-empty-key",
    ),
    (
        _spec(validator={"workloads": {"tolerations": [{"key": "k", "tolerationSeconds": 3}]}}),
        "spec.validator.workloads.tolerations[0]: tolerationSeconds is only allowed with effect",
        "toleration-seconds",
    ),
    (
        _spec(driver={"imagePullSecrets": ["Not_A_Name"]}),
        "spec.driver.imagePullSecrets[0]: 'Not_A_Name' is not a valid object name",
        "secret-name",
    ),
    (
        _spec(validator={"workloads": {"configMapName": "UPPER"}}),
        "spec.validator.workloads.configMapName: 'UPPER' is not a valid object name",
        "configmap-name",
    ),
    (
        _spec(toolkit={"containerd": {"socketPath": "relative.sock"}}),
        "spec.toolkit.containerd.socketPath: String should match pattern",
        "socket-relative",
    ),
    (
        _spec(driver={"enabled": "maybe"}),
        "spec.driver.enabled: Input should be a valid boolean",
        "bool",
    ),
    (_spec(unknown={}), "spec.unknown: Extra inputs are not permitted", "unknown-section"),
    (
        _spec(daemonsets={"rollingUpdate": {"maxUnavailable": 0}}),
        "spec.daemonsets.rollingUpdate.maxUnavailable.constrained-int: Input should be greater",
        "max-unavailable-zero",
    ),
    (
        _spec(daemonsets={"rollingUpdate": {"maxUnavailable": "0%"}}),
        "spec.daemonsets.rollingUpdate.maxUnavailable.constrained-str: String should match",
        "max-unavailable-zero-percent",
    ),
]


@pytest.mark.parametrize(("mapping", "expected"), [pytest.param(m, e, id=i) for m, e, i in INVALID])
def test_each_rule_names_the_field(mapping: dict[str, Any], expected: str) -> None:
    problems = _problems(mapping)
    assert any(p.startswith(expected) for p in problems), problems


def test_every_problem_is_reported_at_once() -> None:
    problems = _problems(
        _spec(
            driver={"repoConfig": {"nodeLocalPaths": ["/etc/x", "rel"]}},
            daemonsets={"labels": {"bad key": "v"}},
        )
    )
    assert len(problems) == 4, problems


@pytest.mark.parametrize(
    "mapping",
    [
        pytest.param(_local("/opt/local-packages", "/srv/repo"), id="node-local"),
        pytest.param(_spec(driver={"version": "sha256:" + "a" * 64}), id="digest"),
        pytest.param(_spec(driver={"repository": "registry:5000/mirror"}), id="registry-port"),
        pytest.param(_spec(daemonsets={"rollingUpdate": {"maxUnavailable": "25%"}}), id="percent"),
        pytest.param(
            _spec(
                devicePlugin={
                    "resources": {
                        "requests": {"nvidia.com/gpu": 1, "cpu": "1"},
                        "limits": {"nvidia.com/gpu": "1"},
                    }
                }
            ),
            id="extended-request-equals-limit",
        ),
        pytest.param(
            _spec(
                validator={
                    "workloads": {"resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": 1}}}
                }
            ),
            id="request-below-limit",
        ),
    ],
)
def test_valid_policies_pass(mapping: dict[str, Any]) -> None:
    load_cluster_policy(mapping)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param({"labels": {"bad key": "v"}}, "spec.labels[bad key]", id="label"),
        pytest.param({"annotations": {"-a": "v"}}, "spec.annotations[-a]", id="annotation"),
        pytest.param(
            {"resources": {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}},
            "spec.resources.requests[memory]: exceeds the limit 1Gi",
            id="resources",
        ),
        pytest.param(
            {"targets": {"selector": {"matchLabels": {"a": "bad value"}}}},
            "spec.targets.selector.matchLabels[a]",
            id="selector",
        ),
        pytest.param({"meshes": ["cilium"]}, "spec.meshes[0]: Input should be", id="mesh"),
        pytest.param(
            {"labels": {"app": "not-the-daemonset"}},
            "spec.labels[app]: a PodPolicy may not set 'app': the label NVIDIA's driver and "
            "MIG managers find the operands' pods by",
            id="selector-label",
        ),
        pytest.param(
            {"labels": {"app.kubernetes.io/component": "x"}},
            "spec.labels[app.kubernetes.io/component]: a PodPolicy may not set",
            id="kubernetes-label",
        ),
        pytest.param(
            {"annotations": {"container.apparmor.security.beta.kubernetes.io/main": "unconfined"}},
            "spec.annotations[container.apparmor.security.beta.kubernetes.io/main]: a PodPolicy "
            "may not set",
            id="apparmor",
        ),
        pytest.param(
            {"annotations": {"sidecar.istio.io/proxyImage": "evil"}},
            "spec.annotations[sidecar.istio.io/proxyImage]: a PodPolicy may not set "
            "'sidecar.istio.io/proxyImage': a service mesh's own configuration",
            id="mesh-setting",
        ),
        pytest.param(
            {"labels": {"sidecar.istio.io/inject": "true"}},
            "spec.labels[sidecar.istio.io/inject]: a PodPolicy may not set",
            id="mesh-opt-in",
        ),
        pytest.param(
            {"annotations": {"io.kubernetes.cri-o.Devices": "/dev/sda"}},
            "spec.annotations[io.kubernetes.cri-o.Devices]: a PodPolicy may not set",
            id="runtime-annotation",
        ),
    ],
)
def test_pod_policy_rules(spec: dict[str, Any], expected: str) -> None:
    with pytest.raises(InvalidPolicy) as caught:
        load_pod_policy({"apiVersion": "gpuctrl.io/v1alpha1", "kind": "PodPolicy", "spec": spec})
    problems = [str(p) for p in caught.value.problems]
    assert any(p.startswith(expected) for p in problems), problems


def test_pod_policy_sample_is_valid() -> None:
    policy = load_pod_policy({"spec": {"meshes": ["istio", "kuma"], "labels": {"a": "b"}}})
    assert policy.spec.meshes == ["istio", "kuma"]


@pytest.mark.parametrize(
    "key",
    ["team", "example.com/owner", "kubernetes.io.example.com/x", "mykubernetes.io/x", "apps"],
)
def test_pod_policy_may_set_plain_keys(key: str) -> None:
    """A domain is refused with its subdomains, not every name that merely ends like it."""
    load_pod_policy({"spec": {"labels": {key: "v"}, "annotations": {key: "v"}}})


def test_a_bad_driver_manager_image_names_its_field() -> None:
    spec = {"driver": {"manager": {"repository": "Registry.Example.com", "version": "v 1"}}}
    with pytest.raises(InvalidPolicy) as raised:
        load_cluster_policy({"spec": spec})
    [problem] = raised.value.problems
    assert problem.path == "spec.driver.manager.version"
    assert problem.message == (
        "'Registry.Example.com/k8s-driver-manager:v 1' is not a well-formed image reference"
    )
