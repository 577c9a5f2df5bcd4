"""The `gpuctrl` command line.

Each subcommand lives in its own module exposing ``configure(parser)`` (add the arguments)
and ``run(args) -> int`` (the exit code). Only the chosen subcommand's module is imported, so
a node agent such as ``gpuctrl toolkit`` never pays for the Kubernetes client it does not use.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from gpuctrl import __version__


@dataclass(frozen=True)
class Subcommand:
    """A subcommand: its name, a one-line summary and the module that implements it."""

    name: str
    summary: str
    module: str


SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand(
        "toolkit", "configure containerd / CRI-O for the NVIDIA runtime", "gpuctrl.toolkit.cli"
    ),
    Subcommand(
        "validate", "check the driver, toolkit, CUDA and device plugin", "gpuctrl.validator.cli"
    ),
    Subcommand(
        "render", "render the objects a ClusterPolicy asks for, offline", "controllers.render.cli"
    ),
    Subcommand("manager", "run the operator's controllers", "controllers.cli"),
    Subcommand(
        "webhook", "the admission webhook applying PodPolicies to gpuctrl's pods", "webhooks.cli"
    ),
    Subcommand(
        "check-repo",
        "check a driver package repository ConfigMap offline",
        "controllers.checkrepo",
    ),
    Subcommand(
        "migrate",
        "convert an nvidia.com/v1 ClusterPolicy to gpuctrl.io/v1alpha1",
        "controllers.migrate",
    ),
)


def _top_parser(subcommands: Sequence[Subcommand]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuctrl",
        description="gpuctrl: a GPU operator for Kubernetes and the controller runtime under it.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="commands:\n"
        + "\n".join(f"  {sub.name:<10} {sub.summary}" for sub in subcommands)
        + "\n\nRun 'gpuctrl COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"gpuctrl {__version__}")
    parser.add_argument("command", choices=[sub.name for sub in subcommands], metavar="COMMAND")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the subcommand named in ``argv`` (default ``sys.argv[1:]``); return its exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    by_name = {sub.name: sub for sub in SUBCOMMANDS}
    if not args or args[0] not in by_name:
        top = _top_parser(SUBCOMMANDS)
        if not args:
            top.print_help()
            return 2
        top.parse_args(args[:1])  # prints --help / --version or a usage error, and exits
        return 2
    sub = by_name[args[0]]
    module = importlib.import_module(sub.module)
    parser = argparse.ArgumentParser(prog=f"gpuctrl {sub.name}", description=sub.summary)
    module.configure(parser)
    parsed = parser.parse_args(args[1:])
    return int(module.run(parsed))
