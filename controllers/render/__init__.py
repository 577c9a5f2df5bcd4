"""The pure renderer: from a ClusterPolicy and cluster facts to the objects gpuctrl owns.

`render(policy, facts)` reads nothing but its arguments and the templates shipped in this
package (no client, clock or environment), so controllers and ``gpuctrl render`` share it and
its output can be compared byte for byte. Every object carries the labels
``app.kubernetes.io/managed-by: gpuctrl`` and ``app.kubernetes.io/component`` (driver,
toolkit, validator, device-plugin). GPU nodes it cannot give a driver (no NFD OS labels) are
not an error: `nodes_without_driver` names them for the caller to report.
`check_repo_config(policy, facts, now=...)` reports, beforehand, what the driver's package
manager would trip over in the repository and CA ConfigMaps.
"""

from controllers.render._account import NODE_EVENTS_NAMESPACE
from controllers.render._dcgm import missing_crds
from controllers.render._driver import nodes_without_driver
from controllers.render._errors import InvalidDevicePluginConfig, MissingConfigMap, RenderError
from controllers.render._facts import ClusterFacts, ConfigMapFacts, NodeFacts, OsRelease
from controllers.render._osfamily import OS_IDS
from controllers.render._render import (
    COMPONENTS,
    builtin_workload_templates,
    render,
    render_component,
)
from controllers.render._repo import RepoProblem, check_repo_config, next_certificate_change

__all__ = [
    "COMPONENTS",
    "NODE_EVENTS_NAMESPACE",
    "OS_IDS",
    "ClusterFacts",
    "ConfigMapFacts",
    "InvalidDevicePluginConfig",
    "MissingConfigMap",
    "NodeFacts",
    "OsRelease",
    "RenderError",
    "RepoProblem",
    "builtin_workload_templates",
    "check_repo_config",
    "missing_crds",
    "next_certificate_change",
    "nodes_without_driver",
    "render",
    "render_component",
]
