"""``gpuctrl render``: print the objects a ClusterPolicy asks for, without a cluster.

Input files are YAML streams holding one ClusterPolicy and optionally the Nodes, the ConfigMaps
(of ``--namespace``) and the CRDs (taken as installed) it should see. Invalid input exits 2
after printing every problem with its path, and writes nothing; so does a driver repository
configuration with errors (`check_repo_config`, the checks of ``gpuctrl check-repo``), whose
warnings go to stderr. GPU nodes left without a driver DaemonSet (NFD has not labelled their
OS) are named in a warning on stderr, and without any GPU Node a note says the driver
DaemonSets are left out; the render still succeeds.
"""

from __future__ import annotations

import argparse
import re
import sys
from datetime import UTC, datetime
from pathlib import Path

from api.v1alpha1 import InvalidPolicy
from controllers.render import RenderError, check_repo_config, nodes_without_driver, render
from controllers.render._inputs import read_inputs, to_yaml

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    """Add render's arguments to ``parser``."""
    parser.add_argument(
        "-f",
        "--filename",
        dest="files",
        action="append",
        type=Path,
        required=True,
        help="YAML stream: a ClusterPolicy, optionally Nodes, ConfigMaps, CRDs (repeatable)",
    )
    parser.add_argument(
        "-o", "--output-dir", type=Path, help="write one file per object here instead of stdout"
    )
    parser.add_argument(
        "--namespace", default="gpuctrl", help="operator namespace (default: gpuctrl)"
    )


def run(args: argparse.Namespace) -> int:
    """Render; 0 on success, 2 on invalid input (every problem on stderr, nothing written)."""
    try:
        given = read_inputs(args.files, args.namespace)
        repo_problems = check_repo_config(given.policy, given.facts, now=datetime.now(UTC))
        for repo_problem in repo_problems:
            print(repo_problem, file=sys.stderr)
        if any(p.severity == "error" for p in repo_problems):
            return 2
        objects = render(given.policy, given.facts)
    except InvalidPolicy as error:
        for problem in error.problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    except RenderError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    skipped = nodes_without_driver(given.policy, given.facts)
    if given.policy.spec.driver.enabled and not given.facts.gpu_nodes():
        print(
            "note: no GPU Node among the input (add -f nodes.yaml with the cluster's Nodes): "
            "the driver DaemonSets, one per OS release of the GPU nodes, are left out",
            file=sys.stderr,
        )
    if skipped:
        print(
            f"warning: GPU node(s) {', '.join(skipped)} lack NFD's OS labels "
            "(feature.node.kubernetes.io/system-os_release.ID, .VERSION_ID): "
            "no driver DaemonSet selects them",
            file=sys.stderr,
        )
    if args.output_dir is None:
        sys.stdout.write(to_yaml(objects))
        return 0
    args.output_dir.mkdir(parents=True, exist_ok=True)
    for index, obj in enumerate(objects):
        name = re.sub(r"[^a-z0-9.-]", "-", f"{obj['kind']}-{obj['metadata']['name']}".lower())
        (args.output_dir / f"{index:02d}-{name}.yaml").write_text(to_yaml([obj]))
    return 0
