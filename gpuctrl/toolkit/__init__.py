"""The container toolkit node agent: NVIDIA runtime configuration for containerd and CRI-O.

The edits are pure functions (:func:`add_runtimes`, :func:`revert_changes`,
:func:`import_drop_in`, :func:`containerd_drop_in`, :func:`crio_drop_in`) from documents and
:class:`Settings` to a new document plus the :class:`Change` records the journal keeps;
:func:`install`, :func:`cleanup` and :func:`plan` are the I/O shell (lock, journal, atomic
writes) that ``gpuctrl toolkit`` runs.
This package never imports a Kubernetes client.
"""

from gpuctrl.toolkit._agent import FilePlan, Report, Target, cleanup, diff, install, plan
from gpuctrl.toolkit._containerd import add_runtimes, load_config
from gpuctrl.toolkit._dropin import containerd_drop_in, crio_drop_in, import_drop_in
from gpuctrl.toolkit._errors import InvalidConfig, ToolkitError
from gpuctrl.toolkit._imports import Source
from gpuctrl.toolkit._journal import FileRecord, Journal, load_journal
from gpuctrl.toolkit._revert import revert_changes
from gpuctrl.toolkit._settings import Change, Edit, Settings

__all__ = [
    "Change",
    "Edit",
    "FilePlan",
    "FileRecord",
    "InvalidConfig",
    "Journal",
    "Report",
    "Settings",
    "Source",
    "Target",
    "ToolkitError",
    "add_runtimes",
    "cleanup",
    "containerd_drop_in",
    "crio_drop_in",
    "diff",
    "import_drop_in",
    "install",
    "load_config",
    "load_journal",
    "plan",
    "revert_changes",
]
