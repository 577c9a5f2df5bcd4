"""``gpuctrl manager``: run the operator's controllers against a cluster.

Exit codes: 0 after SIGTERM/SIGINT (the Lease released); 1 when the Lease was lost (a standby
takes over) or a controller failed; 2 for a bad flag, a kubeconfig that cannot be read, an
apiserver that cannot be reached or an address that cannot be bound, with one line on stderr
saying which.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path

import aiohttp
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio.config import ConfigException

from controllers._kinds import NAMESPACES
from controllers.manager import TRANSFORMS, setup_controllers
from gpuctrl import __version__
from gpuctrl.flags import add_log_format, bind_address
from gpuctrl.runtime import (
    ApiError,
    CannotListen,
    Client,
    LeaderElection,
    LeaderElectionLost,
    Manager,
    NotFound,
    configure_logging,
    new_api_client,
)

__all__ = ["LEASE_NAME", "USER_AGENT", "configure", "run"]

log = logging.getLogger("gpuctrl.manager")

LEASE_NAME = "gpuctrl-manager"
USER_AGENT = f"gpuctrl-manager/{__version__}"
"""The manager's HTTP User-Agent, by which audit logs tell its requests apart."""
_REACH_TIMEOUT = 10.0


class UsageError(Exception):
    """A flag or the environment is wrong; the message says which (exit 2)."""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the manager's flags to ``parser``."""
    parser.add_argument("--kubeconfig", type=Path, help="default: $KUBECONFIG, else in-cluster")
    parser.add_argument(
        "--namespace", default="gpuctrl", help="where the operands live (default: gpuctrl)"
    )
    parser.add_argument(
        "--metrics-bind-address",
        type=bind_address,
        default=":8080",
        help="serve /metrics here (default :8080)",
    )
    parser.add_argument(
        "--health-probe-bind-address",
        type=bind_address,
        default=":8081",
        help="serve /healthz and /readyz here (default :8081)",
    )
    parser.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="elect a leader on Lease gpuctrl-manager (default: on)",
    )
    parser.add_argument(
        "--leader-election-namespace", help="the Lease's namespace (default: --namespace)"
    )
    add_log_format(parser)


def run(args: argparse.Namespace) -> int:
    """Run until stopped; the exit code (see the module docstring)."""
    configure_logging(json_lines=args.log_format == "json")
    try:
        return asyncio.run(_main(args))
    except UsageError as error:
        print(f"gpuctrl manager: {error}", file=sys.stderr)
        return 2


async def _main(args: argparse.Namespace) -> int:
    api = await _api_client(args.kubeconfig)
    try:
        await _ensure_namespace(Client(api, request_timeout=_REACH_TIMEOUT), args.namespace)
    except BaseException:
        await api.close()
        raise
    election = None
    if args.leader_elect:
        election = LeaderElection(LEASE_NAME, args.leader_election_namespace or args.namespace)
    manager = Manager(
        api,
        leader_election=election,
        metrics_bind_address=args.metrics_bind_address,
        health_probe_bind_address=args.health_probe_bind_address,
        transforms=TRANSFORMS,
    )
    setup_controllers(manager, args.namespace)
    log.info("starting namespace=%s leader_elect=%s", args.namespace, args.leader_elect)
    try:
        await manager.run()
    except LeaderElectionLost as error:
        log.error("stopping: %s", error)
        return 1
    except CannotListen as error:
        raise UsageError(str(error)) from None
    return 0


async def _api_client(kubeconfig: Path | None) -> k8s_client.ApiClient:
    if (
        kubeconfig is None
        and "KUBECONFIG" not in os.environ
        and ("KUBERNETES_SERVICE_HOST" not in os.environ)
    ):
        raise UsageError("no --kubeconfig, no $KUBECONFIG and not running in a cluster")
    try:
        api = await new_api_client(kubeconfig)
    except (ConfigException, OSError, ValueError) as error:
        raise UsageError(f"cannot load the kubeconfig: {error}") from None
    api.user_agent = USER_AGENT
    return api


async def _ensure_namespace(client: Client, namespace: str) -> None:
    """Create the operand namespace when missing (a read only when it exists)."""
    server = client.api_client.configuration.host
    try:
        try:
            await client.get(NAMESPACES, namespace)
        except NotFound:
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
            await client.create(NAMESPACES, body)
            log.info("created namespace %s", namespace)
    except ApiError as error:
        raise UsageError(f"the apiserver at {server} refused: {error}") from None
    except (aiohttp.ClientError, OSError, TimeoutError) as error:
        raise UsageError(f"cannot reach the apiserver at {server}: {error!r}") from None
