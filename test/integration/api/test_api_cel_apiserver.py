"""The CRDs' CEL rules on a real kube-apiserver: each refuses its bad input at once, with the
field path and message `api.v1alpha1.load_cluster_policy` gives offline, and accepts good input.

Every bad input here breaks only rules the CRDs carry, so the apiserver's causes and Python's
problems must be the same set; the property tests draw node-local paths and versions.
"""

import json
import re
from typing import Any

import pytest
from api_apiserver_helpers import create
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.rest import ApiException

from api.v1alpha1 import InvalidPolicy, load_cluster_policy, load_pod_policy
from api.v1alpha1._base import MAX_LIST_ITEMS


def _policy(spec: dict[str, Any], kind: str = "ClusterPolicy") -> dict[str, Any]:
    return {
        "apiVersion": "gpuctrl.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": "cel-rules"},
        "spec": spec,
    }


def _local(*paths: str) -> dict[str, Any]:
    return _policy({"driver": {"repoConfig": {"configMapName": "repo", "nodeLocalPaths": paths}}})


def _selector(*requirements: dict[str, Any]) -> dict[str, Any]:
    return _policy({"targets": {"selector": {"matchExpressions": requirements}}}, "PodPolicy")


NODE_LOCAL = "spec.driver.repoConfig.nodeLocalPaths"
REFUSED = [
    pytest.param(_local("/etc/pki"), f"{NODE_LOCAL}[0]", "'/etc/pki' is under /etc", id="under"),
    pytest.param(_local("/var/lib"), f"{NODE_LOCAL}[0]", "'/var/lib' holds", id="holds"),
    pytest.param(_local("opt"), f"{NODE_LOCAL}[0]", "'opt' is not absolute", id="relative"),
    pytest.param(_local("/opt/./x"), f"{NODE_LOCAL}[0]", "is not normalised", id="normal"),
    pytest.param(_local("/"), f"{NODE_LOCAL}[0]", "'/' would expose the whole", id="root"),
    pytest.param(_local("/usr/lib"), f"{NODE_LOCAL}[0]", "would hide the driver", id="hides"),
    pytest.param(_local("/opt/a", "/opt/a"), NODE_LOCAL, "'/opt/a' is listed twice", id="twice"),
    pytest.param(
        _policy({"driver": {"version": ""}}),
        "spec.driver.version",
        "an image needs a version",
        id="driver-version",
    ),
    pytest.param(
        _policy({"toolkit": {"runtimeImage": {"version": ""}}}),
        "spec.toolkit.runtimeImage.version",
        "an image needs a version",
        id="runtime-image-version",
    ),
    pytest.param(
        _policy({"daemonsets": {"priorityClassName": "Not_Valid"}}),
        "spec.daemonsets.priorityClassName",
        "'Not_Valid' is not a valid object name",
        id="object-name",
    ),
    pytest.param(
        _policy({"devicePlugin": {"imagePullSecrets": ["ok", "Bad"]}}),
        "spec.devicePlugin.imagePullSecrets[1]",
        "'Bad' is not a valid object name",
        id="secret-name",
    ),
    pytest.param(
        _policy({"toolkit": {"containerd": {"runtimeClassName": "nvidia.gpu"}}}),
        "spec.toolkit.containerd.runtimeClassName",
        "'nvidia.gpu' is not a DNS label",
        id="runtime-handler",
    ),
    pytest.param(
        _policy({"validator": {"cuda": {"env": [{"name": "1X"}]}}}),
        "spec.validator.cuda.env[0].name",
        "'1X' is not a valid variable name",
        id="env-name",
    ),
    pytest.param(
        _policy({"daemonsets": {"tolerations": [{"operator": "Equal", "value": "v"}]}}),
        "spec.daemonsets.tolerations[0]",
        "an empty key requires operator Exists",
        id="toleration-key",
    ),
    pytest.param(
        _policy(
            {"validator": {"workloads": {"tolerations": [{"operator": "Exists", "value": "v"}]}}}
        ),
        "spec.validator.workloads.tolerations[0]",
        "value must be empty with operator Exists",
        id="toleration-value",
    ),
    pytest.param(
        _policy({"daemonsets": {"tolerations": [{"key": "k", "tolerationSeconds": 5}]}}),
        "spec.daemonsets.tolerations[0]",
        "tolerationSeconds is only allowed with effect NoExecute",
        id="toleration-seconds",
    ),
    pytest.param(
        _selector({"key": "a", "operator": "In"}),
        "spec.targets.selector.matchExpressions[0]",
        "operator In needs values",
        id="selector-in",
    ),
    pytest.param(
        _selector({"key": "a", "operator": "DoesNotExist", "values": ["x"]}),
        "spec.targets.selector.matchExpressions[0]",
        "operator DoesNotExist takes no values",
        id="selector-exists",
    ),
    pytest.param(
        _policy({"devicePlugin": {"config": {"name": "plugin-configs", "default": "time sliced"}}}),
        "spec.devicePlugin.config.default",
        "'time sliced' is not a ConfigMap key",
        id="plugin-config-default",
    ),
]
ACCEPTED = [
    pytest.param(
        _policy(
            {"devicePlugin": {"config": {"name": "plugin-configs", "default": "Time_Sliced.4"}}}
        ),
        id="plugin-config",
    ),
    pytest.param(_local("/opt/local-packages", "/usr/src/repo", "/var/lib/repo"), id="paths"),
    pytest.param(_policy({"driver": {"version": "sha256:" + "a" * 64}}), id="digest"),
    pytest.param(
        _policy(
            {
                "daemonsets": {
                    "priorityClassName": "gpu.critical",
                    "tolerations": [
                        {"operator": "Exists"},
                        {"key": "k", "effect": "NoExecute", "tolerationSeconds": 5},
                    ],
                },
                "operator": {"runtimeClass": "nvidia-cdi"},
                "validator": {"cuda": {"env": [{"name": "_X.y-z", "value": "1"}]}},
                "devicePlugin": {"imagePullSecrets": ["pull-secret"]},
            }
        ),
        id="names",
    ),
    pytest.param(
        _selector(
            {"key": "a", "operator": "NotIn", "values": ["x"]}, {"key": "b", "operator": "Exists"}
        ),
        id="selector",
    ),
]

_INVALID_VALUE = re.compile(r'^Invalid value: "[a-z]+": ')


def _causes(error: ApiException) -> set[str]:
    """The apiserver's refusal as ``path: message`` lines, as `Problem` prints them."""
    assert error.status == 422, error.body
    causes = json.loads(error.body)["details"]["causes"]
    return {f"{c['field']}: {_INVALID_VALUE.sub('', c['message'])}" for c in causes}


def _python_problems(obj: dict[str, Any]) -> set[str]:
    load = load_pod_policy if obj["kind"] == "PodPolicy" else load_cluster_policy
    try:
        load(obj)
    except InvalidPolicy as error:
        return {str(p) for p in error.problems}
    return set()


async def _apiserver_problems(api: ApiClient, obj: dict[str, Any]) -> set[str]:
    try:
        await create(api, obj)
    except ApiException as error:
        return _causes(error)
    return set()


@pytest.mark.parametrize(("obj", "path", "message"), REFUSED)
async def test_each_rule_refuses_its_bad_input_with_the_offline_message(
    crds: list[dict[str, Any]], kube_api: ApiClient, obj: dict[str, Any], path: str, message: str
) -> None:
    refused = await _apiserver_problems(kube_api, obj)
    assert any(p.startswith(f"{path}: ") and message in p for p in refused), refused
    assert refused == _python_problems(obj)


@pytest.mark.parametrize("obj", ACCEPTED)
async def test_good_input_is_accepted_by_both(
    crds: list[dict[str, Any]], kube_api: ApiClient, obj: dict[str, Any]
) -> None:
    assert await _apiserver_problems(kube_api, obj) == set()
    assert _python_problems(obj) == set()


_SEGMENTS = st.sampled_from(
    ["", ".", "..", "...", ".x", "opt", "etc", "var", "lib", "kubelet", "usr", "src", "run", "a"]
)
_PATHS = st.builds(
    lambda start, segments: start + "/".join(segments),
    st.sampled_from(["/", "//", ""]),
    st.lists(_SEGMENTS, max_size=4),
)


@settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(paths=st.lists(_PATHS, min_size=1, max_size=3))
async def test_node_local_paths_get_the_same_verdict_and_messages(
    crds: list[dict[str, Any]], kube_api: ApiClient, paths: list[str]
) -> None:
    obj = _local(*paths)
    assert await _apiserver_problems(kube_api, obj) == _python_problems(obj)


@settings(
    max_examples=20,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    section=st.sampled_from(["driver", "toolkit", "validator", "devicePlugin"]),
    version=st.sampled_from(["", "v1.2.3", "550.127.05", "sha256:" + "0" * 64, "latest"]),
)
async def test_operand_versions_get_the_same_verdict_and_messages(
    crds: list[dict[str, Any]], kube_api: ApiClient, section: str, version: str
) -> None:
    obj = _policy({section: {"version": version}})
    assert await _apiserver_problems(kube_api, obj) == _python_problems(obj)


TOO_MANY = MAX_LIST_ITEMS + 1


@pytest.mark.parametrize(
    ("obj", "path"),
    [
        pytest.param(
            _policy({"daemonsets": {"labels": {f"k{i}": "v" for i in range(TOO_MANY)}}}),
            "spec.daemonsets.labels",
            id="labels",
        ),
        pytest.param(
            _policy({"driver": {"args": ["--x"] * TOO_MANY}}), "spec.driver.args", id="args"
        ),
        pytest.param(
            _policy({"annotations": {f"k{i}": "v" for i in range(TOO_MANY)}}, "PodPolicy"),
            "spec.annotations",
            id="pod-policy-annotations",
        ),
        pytest.param(
            _policy({"meshes": ["istio"] * TOO_MANY}, "PodPolicy"),
            "spec.meshes",
            id="pod-policy-meshes",
        ),
    ],
)
async def test_oversized_lists_and_maps_are_refused_at_apply_time_and_offline(
    crds: list[dict[str, Any]], kube_api: ApiClient, obj: dict[str, Any], path: str
) -> None:
    """Issue 25: no policy makes the operator hold (and render) thousands of entries."""
    refused = await _apiserver_problems(kube_api, obj)
    assert any(p.startswith(f"{path}: ") and str(MAX_LIST_ITEMS) in p for p in refused), refused
    offline = _python_problems(obj)
    assert any(p.startswith(f"{path}: ") and str(MAX_LIST_ITEMS) in p for p in offline), offline
