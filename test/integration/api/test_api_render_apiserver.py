"""Property: every policy that passes validation renders objects the real apiserver accepts.

Policies are drawn from values near the edges of what `validate` allows (a few beyond it, which
validation must catch, are filtered out); each rendered object is created with a server-side
dry run.
"""

from typing import Any

import pytest
from api_apiserver_helpers import create
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.rest import ApiException

from api.v1alpha1 import InvalidPolicy, load_cluster_policy
from controllers.render import ClusterFacts, ConfigMapFacts, NodeFacts, render

_OS = "feature.node.kubernetes.io/system-os_release"
NODES = tuple(
    NodeFacts(
        name=f"gpu-{os_id}",
        labels={"nvidia.com/gpu.present": "true", f"{_OS}.ID": os_id, f"{_OS}.VERSION_ID": ver},
    )
    for os_id, ver in (("ubuntu", "22.04"), ("rhel", "9.4"), ("sles", "15.6"))
)

names = st.sampled_from(["a", "gpu-ops", "x.y", "n" * 63, "repo-1"])
label_keys = st.sampled_from(
    ["team", "example.com/tier", "a_b.c-d", "k" * 63, "x/" + "y" * 63, "bad key"]
)
label_values = st.sampled_from(["", "v", "a.b_c-d", "v" * 63])
label_maps = st.dictionaries(label_keys, label_values, max_size=3)
annotation_maps = st.dictionaries(label_keys, st.text(max_size=20), max_size=3)
quantities = st.sampled_from(["1", "500m", "1Gi", "2e3", "0.5", "128974848", "1.5Ti", "0"])
resources = st.fixed_dictionaries(
    {},
    optional={
        "requests": st.dictionaries(
            st.sampled_from(["cpu", "memory", "ephemeral-storage", "nvidia.com/gpu"]),
            quantities,
            max_size=2,
        ),
        "limits": st.dictionaries(
            st.sampled_from(["cpu", "memory", "ephemeral-storage", "nvidia.com/gpu"]),
            quantities,
            max_size=2,
        ),
    },
)
env = st.lists(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["A", "_x.y-z", "PATH", "-dash"])},
        optional={"value": st.text(max_size=10)},
    ),
    max_size=2,
    unique_by=lambda v: v["name"],
)
tolerations = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "key": st.sampled_from(["nvidia.com/gpu", "dedicated"]),
            "operator": st.sampled_from(["Exists", "Equal"]),
            "value": st.sampled_from(["gpu", ""]),
            "effect": st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"]),
            "tolerationSeconds": st.integers(0, 3600),
        },
    ),
    max_size=2,
)
affinity = st.sampled_from(
    [
        None,
        {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                    ]
                }
            }
        },
    ]
)
host_paths = st.lists(
    st.sampled_from(["/opt/local-packages", "/srv/repo", "/var/lib/repo", "/etc/x"]),
    max_size=2,
)
image_parts = st.fixed_dictionaries(
    {},
    optional={
        "repository": st.sampled_from(["nvcr.io/nvidia", "registry:5000/m", "localhost/a/b"]),
        "version": st.sampled_from(["550.127.05", "v1", "sha256:" + "a" * 64, "1.0_rc-1"]),
        "imagePullPolicy": st.sampled_from(["Always", "IfNotPresent", "Never"]),
        "imagePullSecrets": st.lists(names, max_size=2, unique=True),
        "env": env,
        "resources": resources,
        "args": st.lists(st.text(max_size=8), max_size=2),
        "enabled": st.booleans(),
    },
)
policies = st.fixed_dictionaries(
    {},
    optional={
        "operator": st.fixed_dictionaries(
            {},
            optional={"runtimeClass": names, "labels": label_maps, "annotations": annotation_maps},
        ),
        "daemonsets": st.fixed_dictionaries(
            {},
            optional={
                "labels": label_maps,
                "annotations": annotation_maps,
                "tolerations": tolerations,
                "priorityClassName": names,
                "updateStrategy": st.sampled_from(["RollingUpdate", "OnDelete"]),
                "rollingUpdate": st.fixed_dictionaries(
                    {"maxUnavailable": st.one_of(st.integers(0, 5), st.sampled_from(["10%"]))}
                ),
                "nodeSelector": label_maps,
                "affinity": affinity,
            },
        ),
        "driver": st.tuples(
            image_parts,
            st.fixed_dictionaries(
                {},
                optional={"configMapName": st.just("repo"), "nodeLocalPaths": host_paths},
            ),
            st.booleans(),
        ).map(
            lambda t: {
                **t[0],
                "repoConfig": t[1],
                **({"certConfig": {"name": "certs"}} if t[2] else {}),
            }
        ),
        "toolkit": image_parts,
        "validator": st.tuples(
            image_parts,
            st.fixed_dictionaries(
                {},
                optional={
                    "labels": label_maps,
                    "annotations": annotation_maps,
                    "resources": resources,
                    "tolerations": tolerations,
                    "timeoutSeconds": st.integers(1, 600),
                },
            ),
            env,
        ).map(lambda t: {**t[0], "workloads": t[1], "cuda": {"env": t[2]}}),
        "devicePlugin": image_parts,
        "nodeStatusExporter": image_parts,
        "dcgm": st.tuples(image_parts, st.booleans()).map(lambda t: {**t[0], "hostNetwork": t[1]}),
        "dcgmExporter": st.tuples(
            image_parts,
            st.fixed_dictionaries(
                {},
                optional={
                    "type": st.sampled_from(["ClusterIP", "NodePort", "LoadBalancer"]),
                    "internalTrafficPolicy": st.sampled_from(["Local", "Cluster"]),
                },
            ),
            st.booleans(),
            st.booleans(),
        ).map(
            lambda t: {
                **t[0],
                "service": t[1],
                "hostPID": t[2],
                **({"config": {"name": "metrics"}} if t[3] else {}),
            }
        ),
    },
)


def _facts(namespace: str) -> ClusterFacts:
    config_maps = (
        ConfigMapFacts(name="repo", data={"local.list": "deb [trusted=yes] file:///opt/x ./"}),
        ConfigMapFacts(name="certs", data={"site-ca.crt": "-----BEGIN CERTIFICATE-----"}),
        ConfigMapFacts(name="metrics", data={"dcgm-metrics.csv": "DCGM_FI_DEV_GPU_TEMP, gauge, t"}),
    )
    return ClusterFacts(namespace=namespace, nodes=NODES, config_maps=config_maps)


@settings(
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(spec=policies)
async def test_valid_policies_render_objects_the_apiserver_accepts(
    kube_api: ApiClient, namespace: str, spec: dict[str, Any]
) -> None:
    try:
        policy = load_cluster_policy({"spec": spec})
    except InvalidPolicy:
        assume(False)
        return
    for obj in render(policy, _facts(namespace)):
        try:
            await create(kube_api, obj)
        except ApiException as error:
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']} rejected: {error.body}")
