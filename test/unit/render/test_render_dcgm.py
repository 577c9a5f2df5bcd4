"""NVIDIA's DCGM host engine and DCGM exporter as NVIDIA's operator deploys them: images, env,
probes, the exporter's link to the standalone engine, the Services, and the custom metrics
file checked as NVIDIA's exporter parses it, mounted from gpuctrl's copy."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from render_kit import NODES, pod_of

from api.v1alpha1 import InvalidPolicy, load_cluster_policy
from controllers.render import ClusterFacts, RenderError, missing_crds, render_component
from controllers.render._dcgm import metrics_problems

METRICS = "DCGM_FI_DEV_SM_CLOCK, gauge, SM clock frequency (in MHz).\n"
THREE = "expected 3 (DCGM field, Prometheus type, help)"
TYPES = "(gauge, counter, histogram, summary, label)"
HOST_DCGM = [{"name": "DCGM_REMOTE_HOSTENGINE_INFO", "value": "localhost:5555"}]
REMOTE_DCGM = [{"name": "DCGM_REMOTE_HOSTENGINE_INFO", "value": "dcgm.example:5555"}]


def _objects(
    component: str,
    spec: dict[str, Any],
    config_maps: list[dict[str, Any]] = (),  # type: ignore[assignment]
) -> dict[tuple[str, str], dict[str, Any]]:
    policy = load_cluster_policy({"spec": spec})
    facts = ClusterFacts.from_objects("gpuctrl", NODES, config_maps)
    return {
        (o["kind"], o["metadata"]["name"]): o for o in render_component(component, policy, facts)
    }


def _metrics_map(text: str, name: str = "my-metrics") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "gpuctrl"}, "data": {"dcgm-metrics.csv": text}}


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_the_standalone_engine_is_off_by_default_as_in_nvidias_chart() -> None:
    assert _objects("dcgm", {}) == {}


def test_the_engine_runs_nvidias_image_on_its_deploy_label_behind_a_node_local_service() -> None:
    objects = _objects("dcgm", {"dcgm": {"enabled": True}})
    pod = objects["DaemonSet", "gpuctrl-dcgm"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == "nvcr.io/nvidia/cloud-native/dcgm:3.3.9-1-ubuntu22.04"
    assert "command" not in container  # the image's own nv-hostengine
    assert container["ports"] == [{"name": "dcgm", "containerPort": 5555}]
    assert container["livenessProbe"]["tcpSocket"] == {"port": 5555}
    assert pod["nodeSelector"] == {"nvidia.com/gpu.deploy.dcgm": "true"}
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["automountServiceAccountToken"] is False
    assert [c["name"] for c in pod["initContainers"]] == ["toolkit-validation"]
    service = objects["Service", "gpuctrl-dcgm"]["spec"]
    assert service["internalTrafficPolicy"] == "Local"
    assert service["selector"] == {
        "app.kubernetes.io/managed-by": "gpuctrl",
        "app.kubernetes.io/component": "dcgm",
    }
    assert service["ports"] == [
        {"name": "dcgm", "port": 5555, "targetPort": 5555, "protocol": "TCP"}
    ]
    assert not {kind for kind, _ in objects} & {"Role", "ClusterRole"}  # no API access at all


def test_the_exporter_runs_nvidias_image_with_nvidias_env_and_probes() -> None:
    pod = pod_of("dcgm-exporter")
    [container] = pod["containers"]
    assert container["image"] == "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04"
    env = _env(container)
    assert env["DCGM_EXPORTER_LISTEN"] == ":9400"
    assert env["DCGM_EXPORTER_KUBERNETES"] == "true"
    assert env["DCGM_EXPORTER_COLLECTORS"] == "/etc/dcgm-exporter/dcp-metrics-included.csv"
    assert "DCGM_REMOTE_HOSTENGINE_INFO" not in env  # its embedded engine
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": 9400}
    assert container["livenessProbe"]["periodSeconds"] == 5
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/var/lib/kubelet/pod-resources"]["readOnly"] is True
    assert pod["nodeSelector"] == {"nvidia.com/gpu.deploy.dcgm-exporter": "true"}
    assert pod["automountServiceAccountToken"] is False
    assert "hostNetwork" not in pod
    assert "hostPID" not in pod


def test_the_exporter_reads_the_standalone_engine_through_its_service() -> None:
    env = _env(pod_of("dcgm-exporter", {"dcgm": {"enabled": True}})["containers"][0])
    assert env["DCGM_REMOTE_HOSTENGINE_INFO"] == "gpuctrl-dcgm:5555"


@pytest.mark.parametrize(
    ("spec", "host_network"),
    [
        pytest.param({"env": HOST_DCGM}, True, id="host-dcgm"),
        pytest.param({"env": REMOTE_DCGM}, False, id="remote-dcgm"),
        pytest.param({"hostNetwork": True}, True, id="asked"),
        pytest.param({"hostPID": True}, False, id="host-pid"),
    ],
)
def test_host_network_as_nvidias_transform_sets_it(
    spec: dict[str, Any], host_network: bool
) -> None:
    pod = pod_of("dcgm-exporter", {"dcgmExporter": spec})
    assert pod.get("hostNetwork", False) is host_network
    assert (pod.get("dnsPolicy") == "ClusterFirstWithHostNet") is host_network
    assert pod.get("hostPID", False) is spec.get("hostPID", False)


def test_the_users_remote_engine_gives_way_to_the_standalone_one_but_wins_in_env() -> None:
    # The user's env is applied last, as in NVIDIA's transform; no host network then.
    spec = {
        "dcgm": {"enabled": True},
        "dcgmExporter": {
            "env": [{"name": "DCGM_REMOTE_HOSTENGINE_INFO", "value": "localhost:5555"}]
        },
    }
    pod = pod_of("dcgm-exporter", spec)
    assert _env(pod["containers"][0])["DCGM_REMOTE_HOSTENGINE_INFO"] == "localhost:5555"
    assert "hostNetwork" not in pod


def test_the_metrics_service_is_node_local_by_default_and_settable() -> None:
    service = _objects("dcgm-exporter", {})["Service", "gpuctrl-dcgm-exporter"]
    assert service["spec"]["internalTrafficPolicy"] == "Local"
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"][0]["port"] == 9400
    assert service["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    spec = {"dcgmExporter": {"service": {"type": "NodePort", "internalTrafficPolicy": "Cluster"}}}
    changed = _objects("dcgm-exporter", spec)["Service", "gpuctrl-dcgm-exporter"]["spec"]
    assert (changed["type"], changed["internalTrafficPolicy"]) == ("NodePort", "Cluster")


def test_custom_metrics_are_mounted_from_gpuctrls_copy_and_roll_the_pods() -> None:
    spec = {"dcgmExporter": {"config": {"name": "my-metrics"}}}
    objects = _objects("dcgm-exporter", spec, [_metrics_map(METRICS)])
    copy = objects["ConfigMap", "gpuctrl-dcgm-exporter-metrics"]
    assert copy["data"] == {"dcgm-metrics.csv": METRICS}
    template = objects["DaemonSet", "gpuctrl-dcgm-exporter"]["spec"]["template"]
    [container] = template["spec"]["containers"]
    assert _env(container)["DCGM_EXPORTER_COLLECTORS"] == "/etc/dcgm-exporter/dcgm-metrics.csv"
    mount = next(m for m in container["volumeMounts"] if m["name"] == "metrics-config")
    assert (mount["subPath"], mount["readOnly"]) == ("dcgm-metrics.csv", True)
    volume = next(v for v in template["spec"]["volumes"] if v["name"] == "metrics-config")
    assert volume["configMap"]["name"] == "gpuctrl-dcgm-exporter-metrics"  # never the user's
    digest = template["metadata"]["annotations"]["gpuctrl.io/config-hash"]
    other = _objects(
        "dcgm-exporter", spec, [_metrics_map(METRICS + "DCGM_FI_DEV_GPU_TEMP, gauge, t\n")]
    )
    changed = other["DaemonSet", "gpuctrl-dcgm-exporter"]["spec"]["template"]["metadata"]
    assert changed["annotations"]["gpuctrl.io/config-hash"] != digest


@pytest.mark.parametrize(
    ("config_maps", "message"),
    [
        pytest.param([], r"config.name: ConfigMap 'my-metrics' not found", id="missing"),
        pytest.param(
            [{"metadata": {"name": "my-metrics"}, "data": {"metrics.csv": METRICS}}],
            r"lacks the key dcgm-metrics.csv",
            id="no-key",
        ),
        pytest.param(
            [_metrics_map(METRICS + "DCGM_FI_DEV_GPU_TEMP, gauge\n")],
            r"of ConfigMap 'my-metrics': line 2: 2 field\(s\), expected 3",
            id="short-line",
        ),
    ],
)
def test_a_bad_metrics_config_map_is_refused_naming_what_is_wrong(
    config_maps: list[dict[str, Any]], message: str
) -> None:
    with pytest.raises(RenderError, match=message):
        _objects("dcgm-exporter", {"dcgmExporter": {"config": {"name": "my-metrics"}}}, config_maps)


@pytest.mark.parametrize(
    ("text", "problems"),
    [
        pytest.param('# a comment, with "quotes\n\n' + METRICS, [], id="comments-and-blanks"),
        pytest.param(
            'DCGM_FI_X,gauge,"help, with a comma and ""quotes""\nover two lines"\n', [], id="quoted"
        ),
        pytest.param(
            "DCGM_EXP_XID_ERRORS_COUNT, counter, x\nDCGM_FI_DRIVER_VERSION, label, v\n",
            [],
            id="exporter-fields",
        ),
        pytest.param("", ["lists no metrics"], id="empty"),
        pytest.param("# only a comment\n", ["lists no metrics"], id="only-comments"),
        pytest.param(
            'DCGM_FI_X, gauge, "q"\n',
            ["line 1: a quote in an unquoted field (quote the whole field)"],
            id="spaced-quote",
        ),
        pytest.param(
            'DCGM_FI_X,gauge,"q"x\n',
            ['line 1: a quote in the middle of a quoted field ("" is one)'],
            id="quote-in-quotes",
        ),
        pytest.param(
            'DCGM_FI_X,gauge,"open\n\n', ["line 1: a quoted field is not closed"], id="unclosed"
        ),
        pytest.param(
            "dcgm_fi_x, gauge, h\n",
            ["line 1: 'dcgm_fi_x' is not a DCGM field name (DCGM_FI_... or DCGM_EXP_...)"],
            id="lower-case",
        ),
        pytest.param(
            f"{METRICS}DCGM_FI_X, gauges, h\n",
            ["line 2: 'gauges' is not a metric type " + TYPES],
            id="type",
        ),
        pytest.param(
            "DCGM_FI_X, gauge, h,\n", ["line 1: 4 field(s), " + THREE], id="trailing-comma"
        ),
        pytest.param("   \n", ["line 1: 1 field(s), " + THREE], id="spaces-line"),
    ],
)
def test_metrics_files_are_read_as_nvidias_exporter_reads_them(
    text: str, problems: list[str]
) -> None:
    assert metrics_problems(text) == problems


_FIELDS = st.from_regex(r"DCGM_(FI|EXP)_[A-Z0-9_]{1,30}", fullmatch=True)
_TYPES = st.sampled_from(["gauge", "counter", "histogram", "summary", "label"])
_HELP = st.text(st.characters(codec="utf-8", exclude_characters='\r\n",'), max_size=40)
_QUOTED_HELP = st.text(st.characters(codec="utf-8", exclude_characters="\r"), max_size=40).map(
    lambda text: '"' + text.replace('"', '""') + '"'
)
_RECORDS = st.lists(
    st.tuples(_FIELDS, _TYPES, st.one_of(_HELP.map(lambda h: h.strip(" ")), _QUOTED_HELP)),
    min_size=1,
    max_size=8,
)
_SPACES = st.sampled_from(["", " ", "  "])


def _line(record: tuple[str, str, str], pad: str) -> str:
    name, kind, help_text = record
    # Spaces around a quoted field would make it unquoted: only around the other two.
    return f"{pad}{name}{pad},{pad}{kind}{pad},{help_text}"


@given(_RECORDS, _SPACES, st.booleans())
def test_every_well_formed_metrics_file_is_accepted(
    records: list[tuple[str, str, str]], pad: str, comments: bool
) -> None:
    lines = [_line(record, pad) for record in records]
    if comments:
        lines = [
            line for record_line in lines for line in ("# about the next one", "", record_line)
        ]
    assert metrics_problems("\n".join(lines) + "\n") == []


@given(_RECORDS, st.data())
def test_one_bad_record_is_named_by_its_line(
    records: list[tuple[str, str, str]], data: st.DataObject
) -> None:
    lines = [_line(record, "") for record in records]
    bad = data.draw(st.integers(0, len(records) - 1))
    name, _, help_text = records[bad]
    wrong = data.draw(st.sampled_from(["gauges", "Gauge", "", "int"]))
    lines[bad] = f"{name},{wrong},{help_text}"
    start = sum(line.count("\n") + 1 for line in lines[:bad]) + 1  # quoted helps span lines
    problems = metrics_problems("\n".join(lines))
    assert problems == [f"line {start}: {wrong!r} is not a metric type {TYPES}"]


def test_a_disabled_exporter_renders_nothing_even_with_a_bad_metrics_map() -> None:
    spec = {"dcgmExporter": {"enabled": False, "config": {"name": "gone"}}}
    assert _objects("dcgm-exporter", spec) == {}


SERVICE_MONITOR_CRD_OBJECT = {
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "status": {"conditions": [{"type": "Established", "status": "True"}]},
}


def _with_crd(spec: dict[str, Any], crds: list[dict[str, Any]]) -> dict[tuple[str, str], Any]:
    policy = load_cluster_policy({"spec": spec})
    facts = ClusterFacts.from_objects("gpuctrl", NODES, [], crds)
    return {
        (o["kind"], o["metadata"]["name"]): o
        for o in render_component("dcgm-exporter", policy, facts)
    }


def test_the_service_monitor_selects_the_metrics_service_as_nvidias_does() -> None:
    monitor_spec = {
        "enabled": True,
        "interval": "15s",
        "scrapeTimeout": "10s",
        "honorLabels": True,
        "additionalLabels": {"release": "kube-prometheus-stack"},
        "relabelings": [
            {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}
        ],
    }
    objects = _with_crd(
        {"dcgmExporter": {"serviceMonitor": monitor_spec}}, [SERVICE_MONITOR_CRD_OBJECT]
    )
    monitor = objects["ServiceMonitor", "gpuctrl-dcgm-exporter"]
    service = objects["Service", "gpuctrl-dcgm-exporter"]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["gpuctrl"]}
    assert monitor["spec"]["jobLabel"] == "app"
    assert service["metadata"]["labels"]["app"] == "nvidia-dcgm-exporter"  # NVIDIA's job name
    assert monitor["spec"]["endpoints"] == [
        {
            "port": "gpu-metrics",
            "path": "/metrics",
            "interval": "15s",
            "scrapeTimeout": "10s",
            "honorLabels": True,
            "relabelings": [
                {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}
            ],
        }
    ]
    assert [p["name"] for p in service["spec"]["ports"]] == ["gpu-metrics"]


@pytest.mark.parametrize(
    ("enabled", "crds", "made", "missing"),
    [
        pytest.param(True, [SERVICE_MONITOR_CRD_OBJECT], True, False, id="enabled-installed"),
        pytest.param(True, [], False, True, id="enabled-no-crd"),
        pytest.param(False, [SERVICE_MONITOR_CRD_OBJECT], False, False, id="disabled"),
        pytest.param(
            True,
            [{"metadata": {"name": "servicemonitors.monitoring.coreos.com"}}],
            False,
            True,
            id="not-established",
        ),
    ],
)
def test_the_service_monitor_needs_its_crd_and_says_so(
    enabled: bool, crds: list[dict[str, Any]], made: bool, missing: bool
) -> None:
    spec = {"dcgmExporter": {"serviceMonitor": {"enabled": enabled}}}
    objects = _with_crd(spec, crds)
    assert (("ServiceMonitor", "gpuctrl-dcgm-exporter") in objects) is made
    assert ("DaemonSet", "gpuctrl-dcgm-exporter") in objects  # the exporter runs regardless
    policy = load_cluster_policy({"spec": spec})
    problems = missing_crds(policy, ClusterFacts.from_objects("gpuctrl", NODES, [], crds))
    assert bool(problems) is missing
    if missing:
        assert "servicemonitors.monitoring.coreos.com is not installed" in problems[0]


def test_a_misspelt_relabeling_is_refused_with_its_path() -> None:
    bad = {"dcgmExporter": {"serviceMonitor": {"relabelings": [{"targetLable": "node"}]}}}
    with pytest.raises(InvalidPolicy, match=r"relabelings\[0\]\.targetLable: Extra inputs"):
        load_cluster_policy({"spec": bad})
