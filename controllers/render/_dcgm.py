"""NVIDIA's DCGM host engine and DCGM exporter, as NVIDIA's operator deploys them
(assets/state-dcgm, assets/state-dcgm-exporter and their transforms).

The exporter's custom metrics file is checked line by line as NVIDIA's exporter parses it
before a pod sees it, and mounted from a copy gpuctrl owns: a later bad edit of the user's
ConfigMap is refused (`RenderError`, the last good objects run on) and never reaches a pod
that restarts.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from api.v1alpha1 import SERVICE_MONITOR_CRD, ClusterPolicy, wire
from controllers.render._account import Permissions, account_objects
from controllers.render._agents import gated_pod
from controllers.render._configcopy import config_copies
from controllers.render._engine import render_template
from controllers.render._errors import RenderError
from controllers.render._facts import ClusterFacts, ConfigMapFacts
from controllers.render._meta import (
    NVIDIA_APPS,
    SELECTOR,
    daemonset_context,
    env_entries,
    metadata,
    pod_selector,
)
from controllers.render._service import service_objects

__all__ = [
    "DCGM_PORT",
    "EXPORTER_PORT",
    "METRICS_KEY",
    "metrics_problems",
    "missing_crds",
    "render_dcgm",
    "render_dcgm_exporter",
]

DCGM = "dcgm"
EXPORTER = "dcgm-exporter"
DCGM_PORT = 5555
"""nv-hostengine's port."""
EXPORTER_PORT = 9400
"""The exporter's metrics port."""
METRICS_KEY = "dcgm-metrics.csv"
"""The key of the custom metrics ConfigMap that the exporter reads (NVIDIA's)."""
_METRICS_PATH = "/etc/dcgm-exporter/" + METRICS_KEY
_DEFAULT_METRICS = "/etc/dcgm-exporter/dcp-metrics-included.csv"
_POD_RESOURCES = "/var/lib/kubelet/pod-resources"
_METRICS_PORT_NAME = "gpu-metrics"
_REMOTE_ENGINE = "DCGM_REMOTE_HOSTENGINE_INFO"
# The Prometheus types NVIDIA's exporter accepts in a metrics file's second column.
_METRIC_TYPES = ("gauge", "counter", "histogram", "summary", "label")
# DCGM's field names (DCGM_FI_...) and the exporter's own (DCGM_EXP_...).
_FIELD = re.compile(r"DCGM_(FI|EXP)_[A-Z0-9_]+")


def render_dcgm(policy: ClusterPolicy, facts: ClusterFacts) -> list[dict[str, Any]]:
    """The DCGM host engine's account (no rules, no token), DaemonSet and node-local Service
    (nothing when disabled, as by default)."""
    dcgm = policy.spec.dcgm
    if not dcgm.enabled:
        return []
    name = f"gpuctrl-{DCGM}"
    ds = daemonset_context(
        policy, facts, DCGM, dcgm, name, deploy_label="nvidia.com/gpu.deploy.dcgm"
    )
    return [
        *account_objects(policy, facts, DCGM, Permissions()),
        *render_template(
            "dcgm.yaml.j2",
            ds=ds,
            port=DCGM_PORT,
            host_network=dcgm.host_network,
            **gated_pod(policy),
        ),
        *service_objects(policy, facts, DCGM, name, (DCGM, DCGM_PORT)),
    ]


@dataclass(frozen=True)
class _Metrics:
    """The exporter's custom metrics: gpuctrl's copy of the user's file, mounted at ``path``."""

    config_map: str
    key: str = METRICS_KEY
    path: str = _METRICS_PATH


def render_dcgm_exporter(policy: ClusterPolicy, facts: ClusterFacts) -> list[dict[str, Any]]:
    """The DCGM exporter's account (no rules, no token), DaemonSet, metrics Service and the
    copy of its custom metrics file (nothing when disabled). Raises `RenderError` naming the
    line of a metrics file NVIDIA's exporter would refuse."""
    exporter = policy.spec.dcgm_exporter
    if not exporter.enabled:
        return []
    name = f"gpuctrl-{EXPORTER}"
    user_metrics = facts.named_config_map("spec.dcgmExporter.config.name", exporter.config.name)
    objects = account_objects(policy, facts, EXPORTER, Permissions())
    metrics = None
    annotations = None
    if user_metrics is not None:
        copy = ConfigMapFacts(
            name=f"{name}-metrics", data={METRICS_KEY: _metrics_text(user_metrics)}
        )
        metrics = _Metrics(copy.name)
        copied, annotations = config_copies(policy, facts, EXPORTER, [copy])
        objects += copied
    ds = daemonset_context(
        policy,
        facts,
        EXPORTER,
        exporter,
        name,
        deploy_label="nvidia.com/gpu.deploy.dcgm-exporter",
        pod_annotations=annotations,
        image_env=_exporter_env(policy, metrics),
    )
    remote = next((v.value for v in exporter.env if v.name == _REMOTE_ENGINE), "")
    host_network = exporter.host_network or (
        not policy.spec.dcgm.enabled and remote.startswith("localhost")
    )
    objects += render_template(
        "dcgm-exporter.yaml.j2",
        ds=ds,
        port=EXPORTER_PORT,
        pod_resources=_POD_RESOURCES,
        metrics=metrics,
        host_network=host_network,
        host_pid=exporter.host_pid,
        **gated_pod(policy),
    )
    service = exporter.service
    objects += service_objects(
        policy,
        facts,
        EXPORTER,
        name,
        (_METRICS_PORT_NAME, EXPORTER_PORT),
        type_=service.type,
        internal_traffic_policy=service.internal_traffic_policy,
        annotations={"prometheus.io/scrape": "true", "prometheus.io/port": str(EXPORTER_PORT)},
    )
    if exporter.service_monitor.enabled and SERVICE_MONITOR_CRD in facts.crds:
        objects += _service_monitor(policy, facts, name)
    return objects


def missing_crds(policy: ClusterPolicy, facts: ClusterFacts) -> list[str]:
    """What the exporter's settings need that the cluster lacks: the Prometheus Operator's
    ServiceMonitor CRD while ``serviceMonitor.enabled``."""
    exporter = policy.spec.dcgm_exporter
    wanted = exporter.enabled and exporter.service_monitor.enabled
    if wanted and SERVICE_MONITOR_CRD not in facts.crds:
        return [
            f"spec.dcgmExporter.serviceMonitor.enabled, but CRD {SERVICE_MONITOR_CRD} is "
            "not installed: install the Prometheus Operator's CRDs or turn it off; the "
            "exporter runs on without a ServiceMonitor"
        ]
    return []


def _service_monitor(policy: ClusterPolicy, facts: ClusterFacts, name: str) -> list[dict[str, Any]]:
    """The ServiceMonitor of the exporter's Service, as NVIDIA's with the user's settings."""
    monitor = policy.spec.dcgm_exporter.service_monitor
    endpoint: dict[str, Any] = {"port": _METRICS_PORT_NAME, "path": "/metrics"}
    if monitor.interval:
        endpoint["interval"] = monitor.interval
    if monitor.scrape_timeout:
        endpoint["scrapeTimeout"] = monitor.scrape_timeout
    if monitor.honor_labels:
        endpoint["honorLabels"] = True
    if monitor.relabelings:
        endpoint["relabelings"] = [wire(step) for step in monitor.relabelings]
    labels = {**monitor.additional_labels, SELECTOR: NVIDIA_APPS[EXPORTER]}
    return render_template(
        "servicemonitor.yaml.j2",
        metadata=metadata(policy, EXPORTER, name, facts.namespace, labels),
        selector=pod_selector(EXPORTER),
        namespace=facts.namespace,
        endpoint=endpoint,
    )


def _exporter_env(policy: ClusterPolicy, metrics: _Metrics | None) -> tuple[dict[str, Any], ...]:
    """The env NVIDIA's operator gives the exporter: where it listens, pod attribution, the
    metrics file, and the standalone engine's Service when DCGM is enabled."""
    values = {
        "DCGM_EXPORTER_LISTEN": f":{EXPORTER_PORT}",
        "DCGM_EXPORTER_KUBERNETES": "true",
        "DCGM_EXPORTER_COLLECTORS": metrics.path if metrics else _DEFAULT_METRICS,
    }
    if policy.spec.dcgm.enabled:
        values[_REMOTE_ENGINE] = f"gpuctrl-{DCGM}:{DCGM_PORT}"
    return env_entries(values)


def _metrics_text(config_map: ConfigMapFacts) -> str:
    path = "spec.dcgmExporter.config.name"
    text = config_map.data.get(METRICS_KEY)
    if text is None:
        raise RenderError(f"{path}: ConfigMap {config_map.name!r} lacks the key {METRICS_KEY}")
    problems = metrics_problems(text)
    if problems:
        raise RenderError(
            f"{path}: {METRICS_KEY} of ConfigMap {config_map.name!r}: {'; '.join(problems)}"
        )
    return text


def metrics_problems(text: str) -> list[str]:
    """Why NVIDIA's exporter would refuse the metrics file ``text`` ([] when it would not),
    each problem naming its line: CSV as Go's encoding/csv reads it (``#`` at a line's start
    makes it a comment, blank lines are skipped, a quote only around a whole field) of records
    of three fields, spaces trimmed: a DCGM field name, a Prometheus type of `_METRIC_TYPES`
    and a help text."""
    problems: list[str] = []
    try:
        records = list(_csv_records(text))
    except _CsvError as error:
        return [str(error)]
    for line, record in records:
        problems.extend(f"line {line}: {why}" for why in _record_problems(record))
    if not records:
        problems.append("lists no metrics")
    return problems


class _CsvError(ValueError):
    def __init__(self, line: int, why: str) -> None:
        super().__init__(f"line {line}: {why}")


def _csv_records(text: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of each record of ``text`` as Go's encoding/csv reads it with
    ``Comment = '#'``; raises `_CsvError` where it would fail."""
    lines = text.replace("\r\n", "\n").split("\n")
    index = 0
    while index < len(lines):
        if lines[index] and not lines[index].startswith("#"):
            start = index + 1
            fields, index = _fields(lines, index)
            yield start, fields
        index += 1


def _fields(lines: list[str], index: int) -> tuple[list[str], int]:
    """The fields of the record starting at ``lines[index]`` and the index of its last line
    (a quoted field may hold line breaks)."""
    first, line, pos, fields = index + 1, lines[index], 0, []
    while True:
        if line.startswith('"', pos):
            parts, pos = [], pos + 1
            while (end := line.find('"', pos)) < 0 or line.startswith('"', end + 1):
                if end >= 0:  # a doubled quote inside the quotes
                    parts.append(line[pos : end + 1])
                    pos = end + 2
                    continue
                index += 1
                if index == len(lines):
                    raise _CsvError(first, "a quoted field is not closed")
                parts.append(line[pos:] + "\n")
                line, pos = lines[index], 0
            parts.append(line[pos:end])
            pos = end + 1
            if pos < len(line) and line[pos] != ",":
                raise _CsvError(index + 1, 'a quote in the middle of a quoted field ("" is one)')
            fields.append("".join(parts))
        else:
            end = line.find(",", pos)
            end = len(line) if end < 0 else end
            if '"' in line[pos:end]:
                raise _CsvError(index + 1, "a quote in an unquoted field (quote the whole field)")
            fields.append(line[pos:end])
            pos = end
        if pos == len(line):
            return fields, index
        pos += 1  # past the comma


def _record_problems(record: list[str]) -> list[str]:
    fields = [field.strip(" ") for field in record]
    if len(fields) != 3:
        return [f"{len(fields)} field(s), expected 3 (DCGM field, Prometheus type, help)"]
    name, kind, _ = fields
    problems = []
    if not _FIELD.fullmatch(name):
        problems.append(f"{name!r} is not a DCGM field name (DCGM_FI_... or DCGM_EXP_...)")
    if kind not in _METRIC_TYPES:
        problems.append(f"{kind!r} is not a metric type ({', '.join(_METRIC_TYPES)})")
    return problems
