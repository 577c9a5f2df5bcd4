"""The validator node agent: driver, toolkit, CUDA and device-plugin checks.

``gpuctrl validate CHECK`` (see `gpuctrl.validator.cli`) runs one check and writes
``<output-dir>/<check>-ready`` when it passes. The driver and toolkit checks run ``nvidia-smi``;
the cuda and plugin checks run a workload pod built from a ConfigMap template
(`render_template`, `apply_overrides`, `pin_workload`) and judge it from its status alone
(`verdict`), so an injected sidecar cannot hold them hostage. ``gpuctrl validate metrics``
serves NVIDIA's node status gauges (`NodeStatusCollector`, fed by `NodeProbes`, counting with
`count_gpu_resources` and `count_nvidia_pci_devices`).

The names that need the Kubernetes client (`RetryPolicy`, `WorkloadCheck`, `WorkloadPod`,
`build_workload_pod`, `run_workload_check`) or Prometheus' client (the metrics names) are
imported on first use, so the driver and toolkit checks never load them.
"""

import importlib
import typing

from gpuctrl.validator._pod import (
    COMPONENT,
    COMPONENT_LABEL,
    InvalidOverrides,
    PodOwner,
    apply_overrides,
    overrides_field,
    overrides_problems,
    pin_workload,
    template_containers,
    workload_selector,
)
from gpuctrl.validator._smi import SmiResult, driver_command, run_smi, toolkit_command
from gpuctrl.validator._status import DEFAULT_OUTPUT_DIR, clear_status, status_path, write_status
from gpuctrl.validator._template import (
    TemplateError,
    TemplateSource,
    builtin_template,
    render_template,
)
from gpuctrl.validator._verdict import (
    DEFAULT_MAX_RESTARTS,
    NODE_KILL_REASONS,
    Evicted,
    Failed,
    Passed,
    Pending,
    Verdict,
    verdict,
)

if typing.TYPE_CHECKING:
    from gpuctrl.validator._metrics import (
        NodeProbes,
        NodeStatusCollector,
        count_gpu_resources,
        count_nvidia_pci_devices,
    )
    from gpuctrl.validator._workload import (
        RetryPolicy,
        WorkloadCheck,
        WorkloadPod,
        build_workload_pod,
        run_workload_check,
    )

__all__ = [
    "COMPONENT",
    "COMPONENT_LABEL",
    "DEFAULT_MAX_RESTARTS",
    "DEFAULT_OUTPUT_DIR",
    "NODE_KILL_REASONS",
    "Evicted",
    "Failed",
    "InvalidOverrides",
    "NodeProbes",
    "NodeStatusCollector",
    "Passed",
    "Pending",
    "PodOwner",
    "RetryPolicy",
    "SmiResult",
    "TemplateError",
    "TemplateSource",
    "Verdict",
    "WorkloadCheck",
    "WorkloadPod",
    "apply_overrides",
    "build_workload_pod",
    "builtin_template",
    "clear_status",
    "count_gpu_resources",
    "count_nvidia_pci_devices",
    "driver_command",
    "overrides_field",
    "overrides_problems",
    "pin_workload",
    "render_template",
    "run_smi",
    "run_workload_check",
    "status_path",
    "template_containers",
    "toolkit_command",
    "verdict",
    "workload_selector",
    "write_status",
]

# Each name imported on first use, and the module it comes from.
_LAZY = {
    **dict.fromkeys(
        ("RetryPolicy", "WorkloadCheck", "WorkloadPod", "build_workload_pod", "run_workload_check"),
        "gpuctrl.validator._workload",
    ),
    **dict.fromkeys(
        ("NodeProbes", "NodeStatusCollector", "count_gpu_resources", "count_nvidia_pci_devices"),
        "gpuctrl.validator._metrics",
    ),
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
