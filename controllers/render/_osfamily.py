"""OS families: which package manager a driver image runs, and which files it reads where.

One ConfigMap serves a mixed cluster: a key is mounted into (and validated for) the driver of
each OS whose package manager reads a file of that name (apt: ``*.list``, ``*.sources``; yum/dnf
and zypper: ``*.repo``); other keys are mounted nowhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from controllers.render._facts import OsRelease

__all__ = ["FAMILIES", "OS_IDS", "OsFamily", "family_of", "unknown_os_message"]


@dataclass(frozen=True)
class OsFamily:
    """A package manager and the OS IDs (``/etc/os-release`` ``ID``) whose images use it."""

    name: str
    os_ids: tuple[str, ...]
    repository_folder: str  # where it reads repository files
    ca_folder: str  # where the driver image takes extra CA certificates from
    suffixes: tuple[str, ...]  # the repository file names it reads, by ending

    def reads(self, key: str) -> bool:
        """Whether this package manager reads a repository file called ``key``."""
        return any(key.endswith(s) and len(key) > len(s) for s in self.suffixes)


APT = OsFamily(
    "apt",
    ("ubuntu", "debian"),
    "/etc/apt/sources.list.d",
    "/usr/local/share/ca-certificates",
    (".list", ".sources"),
)
YUM = OsFamily(
    "yum",
    ("rhel", "centos", "rocky", "ol", "rhcos"),
    "/etc/yum.repos.d",
    "/etc/pki/ca-trust/extracted/pem",
    (".repo",),
)
ZYPPER = OsFamily(
    "zypper", ("sles", "sl-micro"), "/etc/zypp/repos.d", "/etc/pki/trust/anchors", (".repo",)
)
FAMILIES = (APT, YUM, ZYPPER)
# Every OS ID whose package manager gpuctrl knows, sorted.
OS_IDS = tuple(sorted(os_id for family in FAMILIES for os_id in family.os_ids))


def family_of(os_id: str) -> OsFamily | None:
    """The family of OS ``os_id``; None for an OS gpuctrl does not know."""
    return next((family for family in FAMILIES if os_id in family.os_ids), None)


def unknown_os_message(path: str, os: OsRelease) -> str:
    """Why ``path`` (a policy field) cannot be honoured on GPU nodes running ``os``."""
    known = ", ".join(OS_IDS)
    return f"{path}: GPU nodes run OS {os.id!r}, whose folder is unknown ({known})"
