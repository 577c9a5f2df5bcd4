"""`check_repo_config`: what the driver container's package manager will trip over, beforehand.

For each OS family among the GPU nodes it checks the repoConfig keys that family reads (the
ones `render` mounts into its driver): each file parses; each ``file://`` URI and local key
file of an enabled entry lies inside a ``nodeLocalPaths`` entry (key files may also sit in the
image's own keyring folders, e.g. ``/usr/share/keyrings``). Keys no GPU node reads, families
that get no key and ``nodeLocalPaths`` entries no file refers to are warnings; certConfig keys
must be PEM certificates, not about to expire. With no GPU node (or none labelled by NFD) yet,
every key is checked for each family that reads it, without the warnings about coverage.
Paths are compared as written: the kubelet resolves symlinks on the node, so a symlinked
folder must be listed as the path the files name.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from api.v1alpha1 import ClusterPolicy
from controllers.render._aptsources import signed_by_conflicts
from controllers.render._errors import MissingConfigMap
from controllers.render._facts import ClusterFacts, ConfigMapFacts
from controllers.render._osfamily import (
    APT,
    FAMILIES,
    YUM,
    ZYPPER,
    OsFamily,
    family_of,
    unknown_os_message,
)
from controllers.render._pem import certificate_findings, next_verdict_change
from controllers.render._readers import inside, parse, used_folders
from controllers.render._repofile import Entry, Finding, LocalPath, Severity

__all__ = ["MAX_PER_KEY", "RepoProblem", "check_repo_config", "next_certificate_change"]

# The most problems reported for one ConfigMap key.
MAX_PER_KEY = 20
_REPO = "spec.driver.repoConfig.configMapName"
_CERTS = "spec.driver.certConfig.name"
_LOCAL = "spec.driver.repoConfig.nodeLocalPaths"
# Folders where a driver image's own packages put repository keys: a key file there is the
# image's, not the node's, so it need not be node-local.
_IMAGE_KEY_FOLDERS = {
    APT.name: ("/usr/share/keyrings", "/etc/apt/keyrings", "/etc/apt/trusted.gpg.d"),
    YUM.name: ("/etc/pki/rpm-gpg",),
    ZYPPER.name: ("/etc/pki/rpm-gpg", "/usr/lib/rpm/gnupg/keys"),
}


@dataclass(frozen=True)
class RepoProblem:
    """One thing wrong with the repository configuration; ``message`` names the ConfigMap,
    key and line (or the policy field) and what is wrong. Errors break the driver's package
    manager; warnings are risks or settings that have no effect."""

    severity: Literal["error", "warning"]
    message: str

    def __str__(self) -> str:
        return f"{self.severity}: {self.message}"


def check_repo_config(
    policy: ClusterPolicy, facts: ClusterFacts, *, now: datetime
) -> list[RepoProblem]:
    """Every problem of the driver's repoConfig and certConfig ConfigMaps as ``facts`` hold
    them, errors first, each once; [] when all is well or the driver is disabled.

    Pure: ``now`` (timezone-aware) is when certificates are judged. The caller validates the
    policy first (`api.v1alpha1.validate`: the nodeLocalPaths denylist).
    """
    driver = policy.spec.driver
    if not driver.enabled:
        return []
    problems: list[RepoProblem] = []
    families, covered = _families(policy, facts, problems)
    repo = _config_map(facts, _REPO, driver.repo_config.config_map_name, problems)
    if repo is not None:
        local_paths = driver.repo_config.node_local_paths
        problems += _repo_problems(repo, families, covered, local_paths)
    certs = _config_map(facts, _CERTS, driver.cert_config.name, problems)
    if certs is not None:
        problems += _cert_problems(certs, now, covered and APT in families)
    unique = list(dict.fromkeys(problems))
    return [p for p in unique if p.severity == "error"] + [
        p for p in unique if p.severity == "warning"
    ]


def next_certificate_change(
    policy: ClusterPolicy, facts: ClusterFacts, *, now: datetime
) -> datetime | None:
    """When `check_repo_config`'s verdict on the certConfig certificates changes next by time
    alone (one becomes valid, enters its last 30 days, or expires); None if never."""
    name = policy.spec.driver.cert_config.name
    certs = facts.config_map(name) if name and policy.spec.driver.enabled else None
    moments = [next_verdict_change(text, now) for text in (certs.data if certs else {}).values()]
    return min((m for m in moments if m is not None), default=None)


def _families(
    policy: ClusterPolicy, facts: ClusterFacts, problems: list[RepoProblem]
) -> tuple[list[OsFamily], bool]:
    """The families to check, and whether they are those of the GPU nodes (else all)."""
    found: list[OsFamily] = []
    for os in sorted({n.os for n in facts.gpu_nodes() if n.os}, key=lambda os: os.tag):
        family = family_of(os.id)
        if family is None:
            for path, name in ((_REPO, _repo_name(policy)), (_CERTS, _cert_name(policy))):
                if name:
                    problems.append(RepoProblem("error", unknown_os_message(path, os)))
        elif family not in found:
            found.append(family)
    if found:
        return [f for f in FAMILIES if f in found], True
    return list(FAMILIES), False


def _repo_name(policy: ClusterPolicy) -> str | None:
    return policy.spec.driver.repo_config.config_map_name


def _cert_name(policy: ClusterPolicy) -> str | None:
    return policy.spec.driver.cert_config.name


def _config_map(
    facts: ClusterFacts, path: str, name: str | None, problems: list[RepoProblem]
) -> ConfigMapFacts | None:
    if name is None:
        return None
    found = facts.config_map(name)
    if found is None:
        problems.append(RepoProblem("error", str(MissingConfigMap(path, name, facts.namespace))))
    return found


def _repo_problems(
    repo: ConfigMapFacts, families: Sequence[OsFamily], covered: bool, local_paths: list[str]
) -> list[RepoProblem]:
    problems: list[RepoProblem] = []
    findings = _findings(repo, families, local_paths)
    for key in sorted(repo.data):
        if covered and not any(family.reads(key) for family in families):
            problems.append(RepoProblem("warning", _unread(repo, key)))
        problems += _reported(f"ConfigMap {repo.name!r} key {key!r}", findings[key])
    if covered:
        for family in families:
            if not any(family.reads(key) for key in repo.data):
                problems.append(RepoProblem("warning", _uncovered(repo, family)))
    used = {f for family in families for f in used_folders(family, repo, local_paths)}
    for index, path in enumerate(local_paths):
        if path not in used:
            message = (
                f"no enabled repository of ConfigMap {repo.name!r} refers to {path}, so it is "
                "mounted nowhere"
            )
            problems.append(RepoProblem("warning", f"{_LOCAL}[{index}]: {message}"))
    return problems


def _findings(
    repo: ConfigMapFacts, families: Sequence[OsFamily], local_paths: Sequence[str]
) -> dict[str, list[Finding]]:
    """What is wrong in each key, for every family that reads it."""
    findings: dict[str, list[Finding]] = {key: [] for key in repo.data}
    for family in families:
        parsed = {k: parse(family, k, t) for k, t in sorted(repo.data.items()) if family.reads(k)}
        for key, file in parsed.items():
            findings[key] += file.findings
            for entry in file.entries:
                findings[key] += _unresolved(entry, family, local_paths)
        if family is APT:
            for key, finding in signed_by_conflicts(list(parsed.items())):
                findings[key].append(finding)
    return findings


def _reported(where: str, findings: list[Finding]) -> list[RepoProblem]:
    """The findings of one key by line, at most `MAX_PER_KEY` (then one line saying how many
    more), so a hostile file cannot flood the controller's Events."""
    ordered = sorted(findings, key=lambda f: (f.severity != "error", f.line))
    shown = sorted(ordered[:MAX_PER_KEY], key=lambda f: f.line)
    problems = [_problem(where, f) for f in shown]
    rest = ordered[MAX_PER_KEY:]
    if rest:
        severity: Severity = "error" if any(f.severity == "error" for f in rest) else "warning"
        message = f"{where}: {len(rest)} more problem(s) from line {rest[0].line} on, not shown"
        problems.append(RepoProblem(severity, message))
    return problems


def _unread(repo: ConfigMapFacts, key: str) -> str:
    reads = "; ".join(f"{f.name} reads {', '.join('*' + s for s in f.suffixes)}" for f in FAMILIES)
    return (
        f"ConfigMap {repo.name!r} key {key!r}: no GPU node's package manager reads it "
        f"({reads}), so it is mounted nowhere"
    )


def _uncovered(repo: ConfigMapFacts, family: OsFamily) -> str:
    suffixes = ", ".join("*" + s for s in family.suffixes)
    return (
        f"ConfigMap {repo.name!r} has no key that {family.name} reads ({suffixes}): drivers on "
        f"{', '.join(family.os_ids)} nodes keep their image's default repositories"
    )


def _problem(where: str, finding: Finding) -> RepoProblem:
    return RepoProblem(finding.severity, f"{where} line {finding.line}: {finding.message}")


def _unresolved(entry: Entry, family: OsFamily, local_paths: Iterable[str]) -> list[Finding]:
    """Errors for the paths of an enabled ``entry`` the driver container cannot see."""
    problems = []
    for path in entry.paths if entry.enabled else ():
        if any(inside(path.path, folder) for folder in local_paths):
            continue
        if path.is_key and any(inside(path.path, f) for f in _IMAGE_KEY_FOLDERS[family.name]):
            continue
        problems.append(Finding(path.line, "error", _missing(path)))
    return problems


def _missing(path: LocalPath) -> str:
    folder = (path.path.rsplit("/", 1)[0] or "/") if path.is_key else path.path
    what = "key file" if path.is_key else "repository"
    return (
        f"{path.field} {path.value!r}: the {what} {path.path} is inside no {_LOCAL} entry, so "
        f"the driver container cannot see it (add {folder!r} or a folder above it)"
    )


def _cert_problems(certs: ConfigMapFacts, now: datetime, apt: bool) -> list[RepoProblem]:
    problems: list[RepoProblem] = []
    for key in sorted(certs.data):
        where = f"ConfigMap {certs.name!r} key {key!r}"
        if apt and not key.endswith(".crt"):
            message = (
                f"{where}: update-ca-certificates on ubuntu and debian takes only *.crt files "
                f"from {APT.ca_folder}, so it ignores this one"
            )
            problems.append(RepoProblem("warning", message))
        problems += _reported(where, certificate_findings(certs.data[key], now))
    return problems
