"""``gpuctrl toolkit install|cleanup|run|plan``: the container toolkit node agent.

Exit codes: 0 done; 2 invalid input, nothing written; 1 any other failure. Imports only the
standard library and tomlkit, so the agent starts fast and small.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from gpuctrl.toolkit._agent import Report, Target, cleanup, diff, install, plan
from gpuctrl.toolkit._errors import InvalidConfig, ToolkitError
from gpuctrl.toolkit._restart import restart
from gpuctrl.toolkit._settings import Settings

__all__ = ["configure", "run"]

_DEFAULTS = {
    "containerd": ("/etc/containerd/config.toml", "/run/containerd/containerd.sock"),
    "crio": ("/etc/crio/crio.conf", "/var/run/crio/crio.sock"),
}
_CRIO_DROP_IN = "/etc/crio/crio.conf.d/99-nvidia.toml"
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``install``, ``cleanup``, ``run`` and ``plan`` subcommands to ``parser``."""
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, summary in (
        ("install", "add the NVIDIA runtimes to the runtime's configuration"),
        ("run", "install, then wait; on SIGTERM/SIGINT/SIGHUP/SIGQUIT clean up and exit"),
        ("plan", "print a unified diff of what install would change; change nothing"),
    ):
        _add_install_options(actions.add_parser(name, help=summary, description=summary))
    undo = "undo install as its journal records, then restart the runtime"
    _add_common_options(actions.add_parser("cleanup", help=undo, description=undo))


def run(args: argparse.Namespace) -> int:
    """Run the chosen action; returns 0 done, 2 invalid input (nothing written), 1 failure."""
    try:
        if args.action == "plan":
            sys.stdout.write(diff(plan(_target(args), _settings(args))))
            return 0
        if args.action == "install":
            _report(install(_target(args), _settings(args)), args)
        elif args.action == "cleanup":
            _report(cleanup(_target(args)), args)
        else:
            _run_until_signalled(args)
        return 0
    except InvalidConfig as err:
        print(f"gpuctrl toolkit: invalid input, nothing changed: {err}", file=sys.stderr)
        return 2
    except (ToolkitError, OSError) as err:
        print(f"gpuctrl toolkit: {err}", file=sys.stderr)
        return 1


def _run_until_signalled(args: argparse.Namespace) -> None:
    """install; wait for a stop signal (also one that came during install); cleanup."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in _STOP_SIGNALS}
    try:
        _report(install(_target(args), _settings(args)), args)
        print("gpuctrl toolkit: installed; waiting for a stop signal", flush=True)
        while not stop.wait(1.0):
            pass
        _report(cleanup(_target(args)), args)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _report(report: Report, args: argparse.Namespace) -> None:
    for line in report.lines:
        print(line, flush=True)
    if report.changed:
        print(restart(args.restart_mode, args.runtime, _socket(args), args.host_root), flush=True)


def _target(args: argparse.Namespace) -> Target:
    config = args.config or _DEFAULTS[args.runtime][0]
    drop_in = getattr(args, "drop_in", None)
    if args.runtime == "crio" and drop_in is None:
        drop_in = _CRIO_DROP_IN
    return Target(args.runtime, config, args.state_dir, drop_in)


def _settings(args: argparse.Namespace) -> Settings:
    return Settings(args.runtime_dir, args.runtime_name, args.set_as_default)


def _socket(args: argparse.Namespace) -> str:
    return str(args.socket or _DEFAULTS[args.runtime][1])


def _add_common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runtime",
        choices=sorted(_DEFAULTS),
        default="containerd",
        help="the container runtime (default: containerd)",
    )
    parser.add_argument(
        "--config",
        help="its main config file (default: /etc/containerd/config.toml, /etc/crio/crio.conf)",
    )
    parser.add_argument("--state-dir", required=True, help="where the journal is kept")
    parser.add_argument(
        "--restart-mode",
        choices=["none", "signal", "systemd"],
        default="none",
        help="how to restart the runtime after a change (default: none)",
    )
    parser.add_argument(
        "--socket", help="the runtime's socket, for --restart-mode signal (default: its usual)"
    )
    parser.add_argument(
        "--host-root", default="/", help="the host's root, for --restart-mode systemd (default: /)"
    )


def _add_install_options(parser: argparse.ArgumentParser) -> None:
    _add_common_options(parser)
    parser.add_argument("--runtime-dir", required=True, help="where NVIDIA's runtime binaries are")
    parser.add_argument(
        "--runtime-name", default="nvidia", help="name of the first runtime (default: nvidia)"
    )
    parser.add_argument("--set-as-default", action="store_true", help="make it the default runtime")
    parser.add_argument(
        "--drop-in",
        help="put the runtimes in this file and import it from the main config"
        f" (CRI-O: always; default {_CRIO_DROP_IN})",
    )
