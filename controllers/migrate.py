"""``gpuctrl migrate``: convert NVIDIA's ClusterPolicy to gpuctrl's.

Prints the ``gpuctrl.io/v1alpha1`` ClusterPolicy on stdout and, on stderr, each setting that
could not be carried over (``not carried over: PATH: why``), then one line naming the enabled
operands gpuctrl does not have. Exits 2, printing nothing on stdout, when the input is not an
``nvidia.com/v1`` ClusterPolicy, holds a setting gpuctrl refuses or NVIDIA settings that
contradict each other, or the result does not validate. The mapping is `api.nvidia`'s, the one
``api.v1alpha1.load_cluster_policy`` reads NVIDIA's spellings with.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    """Add migrate's arguments to ``parser``."""
    parser.add_argument(
        "-f", "--filename", dest="file", type=Path, required=True, help="NVIDIA ClusterPolicy YAML"
    )


def run(args: argparse.Namespace) -> int:
    """Convert; 0 on success (lost fields on stderr), 2 when the input cannot be converted."""
    import yaml

    from api.nvidia import NvidiaSettingError, from_nvidia
    from api.v1alpha1 import InvalidPolicy, load_cluster_policy

    try:
        migration = from_nvidia(yaml.safe_load(args.file.read_text(encoding="utf-8")) or {})
        load_cluster_policy(migration.policy)
    except NvidiaSettingError as error:
        for path, why in error.problems:
            print(f"error: {args.file}: {path}: {why}", file=sys.stderr)
        return 2
    except InvalidPolicy as error:
        for problem in error.problems:
            print(f"error: converted policy is invalid: {problem}", file=sys.stderr)
        return 2
    except (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError, AttributeError) as error:
        print(f"error: {args.file}: {error}", file=sys.stderr)
        return 2
    for lost in migration.dropped:
        print(f"not carried over: {lost}", file=sys.stderr)
    if migration.lacking:
        print(f"operands gpuctrl lacks: {', '.join(migration.lacking)}", file=sys.stderr)
    sys.stdout.write(yaml.safe_dump(migration.policy, sort_keys=False))
    return 0
