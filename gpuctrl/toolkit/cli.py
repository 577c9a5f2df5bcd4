"""``gpuctrl toolkit install|cleanup|run|plan``: the container toolkit node agent.

Exit codes: 0 done; 2 invalid input, nothing written; 1 any other failure. Imports only the
standard library and tomlkit, so the agent starts fast and small - and `api.v1alpha1`'s
containerd defaults when it must detect the node's layout.

In its DaemonSet the agent runs with ``--host-root /host``: every path option is then a host
path (opened under /host; ``--runtime-dir`` is written into the config as given), and the
containerd options left unset take the defaults of the distribution detected there (plain
containerd, k3s, RKE2, microk8s). Without ``--host-root`` or ``--distribution`` nothing is
detected: paths are used as given, with containerd's usual ones and ``--restart-mode none``.

``--restart-mode systemd`` restarts ``--restart-unit``, else the first of the distribution's
units whose unit file the host has: ``k3s`` or ``k3s-agent``, ``rke2-server`` or
``rke2-agent``, ``snap.microk8s.daemon-containerd``, ``containerd``, ``crio``; none installed
is invalid input, found before anything is written.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import posixpath
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass

from gpuctrl.toolkit._agent import Report, Target, cleanup, diff, install, plan
from gpuctrl.toolkit._errors import InvalidConfig, ToolkitError
from gpuctrl.toolkit._fs import read_bytes, write_atomic
from gpuctrl.toolkit._restart import (
    RestartMode,
    choose_unit,
    installed_units,
    restart,
    unit_candidates,
)
from gpuctrl.toolkit._settings import Settings
from gpuctrl.toolkit._toml import load

__all__ = ["configure", "run"]

_DEFAULTS = {
    "containerd": ("/etc/containerd/config.toml", "/run/containerd/containerd.sock"),
    "crio": ("/etc/crio/crio.conf", "/var/run/crio/crio.sock"),
}
_CRIO_DROP_IN = "/etc/crio/crio.conf.d/99-nvidia.toml"
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
_DISTRIBUTIONS = ("containerd", "k3s", "microk8s", "rke2")


@dataclass(frozen=True)
class _Node:
    """The files the agent manages (as this process opens them) and how to restart the runtime."""

    target: Target
    restart_mode: RestartMode
    socket: str  # as this process opens it
    host_root: str
    unit: str | None  # the systemd unit --restart-mode systemd restarts


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``install``, ``cleanup``, ``run`` and ``plan`` subcommands to ``parser``."""
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, summary in (
        ("install", "add the NVIDIA runtimes to the runtime's configuration"),
        ("run", "install, then wait; on SIGTERM/SIGINT/SIGHUP/SIGQUIT clean up and exit"),
        ("plan", "print a unified diff of what install would change; change nothing"),
    ):
        sub = actions.add_parser(name, help=summary, description=summary)
        _add_install_options(sub)
        if name == "run":
            sub.add_argument(
                "--resync-seconds",
                type=float,
                default=30.0,
                help="install again this often, following later edits of the files a drop-in"
                " copies (default: 30)",
            )
            sub.add_argument(
                "--ready-file",
                help="a path in this container (not under --host-root) that exists exactly while"
                " the runtimes are installed and a stop signal would be handled: for an exec"
                " readiness probe",
            )
    undo = "undo install as its journal records, then restart the runtime"
    _add_common_options(actions.add_parser("cleanup", help=undo, description=undo))


def run(args: argparse.Namespace) -> int:
    """Run the chosen action; returns 0 done, 2 invalid input (nothing written), 1 failure."""
    try:
        node = _node(args)
        if args.action == "plan":
            sys.stdout.write(diff(plan(node.target, _settings(args))))
            return 0
        if args.action == "install":
            _report(install(node.target, _settings(args)), node)
        elif args.action == "cleanup":
            _report(cleanup(node.target), node)
        else:
            _run_until_signalled(node, _settings(args), args.resync_seconds, args.ready_file)
        return 0
    except InvalidConfig as err:
        print(f"gpuctrl toolkit: invalid input, nothing changed: {err}", file=sys.stderr)
        return 2
    except (ToolkitError, OSError) as err:
        print(f"gpuctrl toolkit: {err}", file=sys.stderr)
        return 1


def _run_until_signalled(
    node: _Node, settings: Settings, resync: float, ready_file: str | None
) -> None:
    """install; wait for a stop signal (also one that came during install), installing again
    every ``resync`` seconds - which re-derives a drop-in from the files it copies, so an
    admin's later edit of them takes effect (and restarts the runtime); cleanup.

    ``ready_file`` exists from the end of the first install until the stop signal (or a failed
    install): a container is Ready only once its SIGTERM would run cleanup (a namespace's PID 1
    drops a signal that comes before its handler is set).

    The signal handlers do nothing in Python: the interpreter writes each signal's number to a
    wakeup socket, which this blocks on. (A handler that sets a ``threading.Event`` deadlocks
    when the signal lands while the main thread holds the event's lock inside ``wait``.)
    Signals during cleanup are ignored; cleanup always finishes.
    """
    reader, writer = socket.socketpair()
    with reader, writer:
        writer.setblocking(False)
        wakeup = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        previous = {sig: signal.signal(sig, _ignore) for sig in _STOP_SIGNALS}
        try:
            _unmark(ready_file)
            _report(install(node.target, settings), node)
            if ready_file is not None:
                os.makedirs(os.path.dirname(os.path.abspath(ready_file)), exist_ok=True)
                write_atomic(ready_file, b"installed\n")
            print("gpuctrl toolkit: installed; waiting for a stop signal", flush=True)
            reader.settimeout(resync)
            while True:
                try:
                    if reader.recv(1)[0] in _STOP_SIGNALS:
                        break
                except TimeoutError:
                    report = install(node.target, settings)
                    if report.changed:
                        _report(report, node)
            _unmark(ready_file)
            _report(cleanup(node.target), node)
        finally:
            _unmark(ready_file)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            signal.set_wakeup_fd(wakeup)


def _unmark(ready_file: str | None) -> None:
    if ready_file is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(ready_file)


def _ignore(signum: int, frame: object) -> None:
    """The stop signals' handler: they are read from the wakeup socket instead."""


def _report(report: Report, node: _Node) -> None:
    for line in report.lines:
        print(line, flush=True)
    if report.changed:
        runtime = node.target.runtime
        done = restart(node.restart_mode, runtime, node.socket, node.host_root, node.unit)
        print(done, flush=True)


def _node(args: argparse.Namespace) -> _Node:
    """The files and restart the options name, every path opened under ``--host-root``."""
    detect = args.runtime == "containerd" and (args.host_root or args.distribution)
    layout = _detected(args) if detect else _given(args)
    config, sock, restart_mode, drop_in, distribution = layout

    def opened(path: str) -> str:
        if args.host_root is None:
            return path
        from gpuctrl.toolkit._detect import in_container

        return in_container(args.host_root, path)

    root = args.host_root or "/"
    config = _template_read(config, opened)
    drop_in = opened(drop_in) if drop_in else None
    target = Target(args.runtime, opened(config), opened(args.state_dir), drop_in, root)
    unit = _unit(args.restart_unit, restart_mode, distribution, root)
    return _Node(target, restart_mode, opened(sock), root, unit)


def _template_read(config: str, opened: Callable[[str], str]) -> str:
    """``config``, or for a k3s/RKE2 template the one k3s reads in its folder (host paths)."""
    from gpuctrl.toolkit._template import GENERATED, TEMPLATES, template_read

    if posixpath.basename(config) not in TEMPLATES:
        return config
    generated = read_bytes(opened(posixpath.join(posixpath.dirname(config), GENERATED)))
    try:
        text = (generated or b"").decode("utf-8", "surrogateescape")
        version = load(text).get("version", 1) if generated is not None else None
    except InvalidConfig:
        version = None
    return template_read(config, lambda path: os.path.exists(opened(path)), version)


def _unit(given: str | None, mode: RestartMode, distribution: str, root: str) -> str | None:
    """The systemd unit to restart: ``--restart-unit``, else the distribution's installed one."""
    if mode != "systemd":
        if given is not None:
            raise InvalidConfig(f"--restart-unit needs --restart-mode systemd (it is {mode})")
        return None
    if given is not None:
        return given
    candidates = unit_candidates(distribution)
    return choose_unit(candidates, installed_units(root, candidates))


# Host paths: config, socket, drop-in; then the distribution (or the runtime, for CRI-O).
_Layout = tuple[str, str, RestartMode, str | None, str]


def _detected(args: argparse.Namespace) -> _Layout:
    """containerd's layout: the options given, the rest from the distribution's defaults."""
    from gpuctrl.toolkit._detect import drop_in_path, resolve_containerd

    root = args.host_root or "/"
    found = resolve_containerd(
        root,
        getattr(args, "runtime_name", "nvidia"),
        distribution=args.distribution,
        config_path=args.config,
        socket_path=args.socket,
        restart_mode=args.restart_mode,
        drop_in_mode=getattr(args, "drop_in_mode", None),
    )
    drop_in = getattr(args, "drop_in", None) or drop_in_path(root, found)
    mode: RestartMode = found.restart_mode or "none"
    distribution = str(found.distribution)
    return str(found.config_path), str(found.socket_path), mode, drop_in, distribution


def _given(args: argparse.Namespace) -> _Layout:
    """The options given, the rest from the runtime's usual paths; no restart unless asked."""
    config, sock = _DEFAULTS[args.runtime]
    drop_in = getattr(args, "drop_in", None)
    if args.runtime == "crio" and drop_in is None:
        drop_in = _CRIO_DROP_IN
    mode: RestartMode = args.restart_mode or "none"
    return args.config or config, args.socket or sock, mode, drop_in, args.runtime


def _settings(args: argparse.Namespace) -> Settings:
    enable_cdi = args.enable_cdi and args.runtime == "containerd"  # CRI-O has CDI on already
    return Settings(args.runtime_dir, args.runtime_name, args.set_as_default, enable_cdi)


def _add_common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runtime",
        choices=sorted(_DEFAULTS),
        default="containerd",
        help="the container runtime (default: containerd)",
    )
    parser.add_argument(
        "--host-root",
        help="where the host's root is mounted: path options are host paths under it, and unset"
        " containerd options are detected there (default: /, paths as given, nothing detected)",
    )
    parser.add_argument(
        "--distribution",
        choices=_DISTRIBUTIONS,
        help="containerd's distribution, whose layout gives the unset options (default: detected"
        " under --host-root)",
    )
    parser.add_argument(
        "--config",
        help="its main config file (default: the distribution's; /etc/containerd/config.toml,"
        " /etc/crio/crio.conf)",
    )
    parser.add_argument("--state-dir", required=True, help="where the journal is kept")
    parser.add_argument(
        "--restart-mode",
        choices=["none", "signal", "systemd"],
        help="how to restart the runtime after a change (default: the distribution's; none)",
    )
    parser.add_argument(
        "--restart-unit",
        help="the systemd unit --restart-mode systemd restarts (default: the distribution's unit"
        " installed on the host: containerd, crio, k3s or k3s-agent, rke2-server or rke2-agent,"
        " snap.microk8s.daemon-containerd)",
    )
    parser.add_argument(
        "--socket", help="the runtime's socket, for --restart-mode signal (default: its usual)"
    )


def _add_install_options(parser: argparse.ArgumentParser) -> None:
    _add_common_options(parser)
    parser.add_argument(
        "--runtime-dir",
        required=True,
        help="where NVIDIA's runtime binaries are on the host (written into the config as given)",
    )
    parser.add_argument(
        "--runtime-name", default="nvidia", help="name of the first runtime (default: nvidia)"
    )
    parser.add_argument("--set-as-default", action="store_true", help="make it the default runtime")
    parser.add_argument(
        "--enable-cdi",
        action="store_true",
        help="containerd: turn on its CDI support (enable_cdi), so containers get the CDI"
        " devices the device plugin names (CRI-O has it on already)",
    )
    parser.add_argument(
        "--drop-in",
        help="put the runtimes in this file and import it from the main config"
        f" (CRI-O: always; default {_CRIO_DROP_IN})",
    )
    parser.add_argument(
        "--drop-in-mode",
        choices=["always", "auto", "never"],
        help="containerd without --drop-in: always use <config folder>/conf.d/99-nvidia.toml,"
        " auto when the config already imports it, or never (default: the distribution's)",
    )
