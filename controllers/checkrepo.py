"""``gpuctrl check-repo``: check a driver repository ConfigMap offline, as the operator would.

Runs `controllers.render.check_repo_config` - the checks of the repo-config controller and of
``gpuctrl render`` - for GPU nodes of the given OS IDs and the given nodeLocalPaths, and prints
each problem (``error: ...`` / ``warning: ...``) on stdout. Exits 0 without errors (warnings
allowed), 1 with errors, 2 when the input cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pydantic
import yaml

from api.v1alpha1 import InvalidPolicy, load_cluster_policy
from controllers.render import (
    OS_IDS,
    ClusterFacts,
    ConfigMapFacts,
    NodeFacts,
    check_repo_config,
)

__all__ = ["configure", "run"]


class _Unreadable(Exception):
    """An input file is missing, not YAML, or not one ConfigMap."""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add check-repo's arguments to ``parser``."""
    parser.add_argument(
        "-f",
        "--filename",
        dest="file",
        type=Path,
        required=True,
        help="YAML file with the ConfigMap that repoConfig.configMapName names",
    )
    parser.add_argument(
        "--os",
        dest="os_ids",
        action="append",
        required=True,
        choices=OS_IDS,
        metavar="OS",
        help=f"OS ID of GPU nodes (repeatable for a mixed cluster): {', '.join(OS_IDS)}",
    )
    parser.add_argument(
        "--node-local-path",
        dest="node_local_paths",
        action="append",
        default=[],
        metavar="DIR",
        help="a repoConfig.nodeLocalPaths entry (repeatable)",
    )
    parser.add_argument(
        "--certs", type=Path, help="YAML file with the ConfigMap that certConfig.name names"
    )


def run(args: argparse.Namespace) -> int:
    """Check; 0 when there is no error, 1 when there is one, 2 on unreadable input."""
    try:
        repo = _config_map(args.file)
        certs = _config_map(args.certs) if args.certs else None
    except _Unreadable as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    driver: dict[str, Any] = {
        "repoConfig": {"configMapName": repo.name, "nodeLocalPaths": args.node_local_paths}
    }
    if certs is not None:
        driver["certConfig"] = {"name": certs.name}
    try:
        policy = load_cluster_policy({"spec": {"driver": driver}})
    except InvalidPolicy as error:
        for problem in error.problems:
            print(f"error: {problem}")
        return 1
    facts = ClusterFacts(
        nodes=tuple(_gpu_node(os_id) for os_id in dict.fromkeys(args.os_ids)),
        config_maps=(repo, certs) if certs and certs.name != repo.name else (repo,),
    )
    problems = check_repo_config(policy, facts, now=datetime.now(UTC))
    for found in problems:
        print(found)
    return 1 if any(found.severity == "error" for found in problems) else 0


def _config_map(path: Path) -> ConfigMapFacts:
    """The one ConfigMap in ``path``; raises `_Unreadable` saying what is wrong."""
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise _Unreadable(f"{path}: cannot read: {error}") from error
    maps = [d for d in docs if isinstance(d, dict) and d.get("kind") == "ConfigMap"]
    if len(maps) != 1 or len(docs) != 1:
        kinds = [str(d.get("kind")) if isinstance(d, dict) else "a non-mapping" for d in docs]
        raise _Unreadable(f"{path}: expected one ConfigMap, found {', '.join(kinds) or 'none'}")
    metadata = maps[0].get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str):
        raise _Unreadable(f"{path}: the ConfigMap has no metadata.name")
    try:
        return ConfigMapFacts(name=name, data=maps[0].get("data") or {})
    except pydantic.ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        raise _Unreadable(
            f"{path}: not a ConfigMap with a name and string data ({problems})"
        ) from error


def _gpu_node(os_id: str) -> NodeFacts:
    labels = {
        "nvidia.com/gpu.present": "true",
        "feature.node.kubernetes.io/system-os_release.ID": os_id,
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "any",
    }
    return NodeFacts(name=f"gpu-{os_id}", labels=labels)
