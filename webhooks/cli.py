"""``gpuctrl webhook``: the admission webhook applying PodPolicies to gpuctrl's pods.

Serves ``POST /mutate-v1-pod`` over HTTPS on ``--bind-address`` with the certificate of
``--cert-dir`` (reloaded when the files change) or, with ``--manage-certificates``, with a CA
and serving certificate it keeps itself in the Secret ``gpuctrl-webhook-tls``. With
``--webhook-url`` it creates and keeps the MutatingWebhookConfiguration ``gpuctrl-pod-policy``
pointing at that URL. On SIGTERM it keeps serving, no longer ready, for ``--shutdown-delay``
seconds before it stops listening. Input errors, an unreachable apiserver and a busy address
exit 2 with one line.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gpuctrl.flags import add_log_format, bind_address, seconds
from gpuctrl.runtime import CannotListen, Manager, configure_logging, parse_bind_address
from gpuctrl.runtime.webhook import DEFAULT_SHUTDOWN_DELAY, WebhookServer
from webhooks._certmanager import CertificateManager
from webhooks._configuration import ConfigurationKeeper
from webhooks._handler import MUTATE_PATH, POD_POLICIES, PodPolicyHandler, PolicySet

__all__ = ["configure", "run"]

DEFAULT_CERT_DIR = Path(tempfile.gettempdir()) / "k8s-webhook-server" / "serving-certs"
_INVALID = 2


class InvalidInput(Exception):
    """A flag value or the environment the webhook cannot work with (exit code 2)."""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the flags of ``gpuctrl webhook``."""
    parser.add_argument(
        "--kubeconfig", type=Path, help="kubeconfig (default: in-cluster, then ~/.kube/config)"
    )
    parser.add_argument(
        "--namespace",
        default="gpuctrl",
        help="the operands' namespace: pods changed, Secret kept (default gpuctrl)",
    )
    parser.add_argument(
        "--bind-address",
        type=bind_address,
        default=":9443",
        metavar="HOST:PORT",
        help="where the webhook listens (default :9443)",
    )
    parser.add_argument(
        "--cert-dir",
        type=Path,
        default=DEFAULT_CERT_DIR,
        help=f"folder with tls.crt and tls.key (default {DEFAULT_CERT_DIR})",
    )
    parser.add_argument(
        "--manage-certificates",
        action="store_true",
        help="keep a CA and a serving certificate in the Secret gpuctrl-webhook-tls",
    )
    target = parser.add_mutually_exclusive_group()
    target.add_argument(
        "--webhook-url",
        type=_webhook_url,
        metavar="URL",
        help="create and keep the MutatingWebhookConfiguration calling this https URL",
    )
    target.add_argument(
        "--service-name",
        default="gpuctrl-webhook",
        metavar="NAME",
        help="the Service in front of the webhook (default gpuctrl-webhook)",
    )
    parser.add_argument(
        "--shutdown-delay",
        type=seconds,
        default=DEFAULT_SHUTDOWN_DELAY,
        metavar="SECONDS",
        help="after SIGTERM, keep serving, unready, this long so the apiserver stops calling "
        "this pod first (it counts against the manager's 25 s shutdown budget; "
        f"default {DEFAULT_SHUTDOWN_DELAY:g})",
    )
    parser.add_argument(
        "--metrics-bind-address",
        type=bind_address,
        default=":8080",
        metavar="HOST:PORT",
        help="where Prometheus metrics are served (default :8080)",
    )
    parser.add_argument(
        "--health-probe-bind-address",
        type=bind_address,
        default=":8081",
        metavar="HOST:PORT",
        help="where /healthz and /readyz are served (default :8081)",
    )
    add_log_format(parser)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or SIGINT; 2 on bad input, an unreachable apiserver or an address
    that cannot be bound."""
    configure_logging(json_lines=args.log_format == "json")
    try:
        if args.kubeconfig is not None and not args.kubeconfig.is_file():
            raise InvalidInput(f"cannot load the kubeconfig: {args.kubeconfig} is not a file")
        asyncio.run(_serve(args))
    except InvalidInput as error:
        print(f"gpuctrl webhook: {error}", file=sys.stderr)
        return _INVALID
    return 0


def serving_names(args: argparse.Namespace) -> list[str]:
    """The serving certificate's names: the Service's DNS names and the URL's host."""
    names = [
        f"{args.service_name}.{args.namespace}.svc",
        f"{args.service_name}.{args.namespace}.svc.cluster.local",
    ]
    if args.webhook_url:
        names.append(urlsplit(args.webhook_url).hostname or "")
    return names


def client_config(args: argparse.Namespace) -> dict[str, Any] | None:
    """The configuration's clientConfig when this process keeps it (``--webhook-url``)."""
    return {"url": args.webhook_url} if args.webhook_url else None


async def _serve(args: argparse.Namespace) -> None:
    host, port = parse_bind_address(args.bind_address)
    try:
        manager = await Manager.create(
            args.kubeconfig,
            metrics_bind_address=args.metrics_bind_address,
            health_probe_bind_address=args.health_probe_bind_address,
        )
    except Exception as error:  # kubeconfig missing or unreadable: the user's to fix
        raise InvalidInput(f"cannot load the kubeconfig: {error}") from None
    await _check_reachable(manager)
    server = WebhookServer(args.cert_dir, host=host, port=port, shutdown_delay=args.shutdown_delay)
    policies = PolicySet()
    manager.cache.informer(POD_POLICIES).add_handler(policies)
    server.register(MUTATE_PATH, PodPolicyHandler(policies, args.namespace))
    manager.add(server)
    manager.add_readyz_check("webhook-certificate", server.ready)
    if args.manage_certificates:
        manager.add(
            CertificateManager(
                manager.client,
                args.namespace,
                args.cert_dir,
                serving_names(args),
                client_config=client_config(args),
                on_files=server.certs.reload,
            )
        )
    elif args.webhook_url:
        client = {"url": args.webhook_url}
        manager.add(ConfigurationKeeper(manager.client, args.cert_dir, client, args.namespace))
    try:
        await manager.run()
    except CannotListen as error:
        raise InvalidInput(str(error)) from None


async def _check_reachable(manager: Manager) -> None:
    try:
        async with asyncio.timeout(10):
            await manager.client.request("GET", "/version")
    except Exception as error:
        await manager.client.api_client.close()
        host = manager.client.api_client.configuration.host
        raise InvalidInput(f"the apiserver at {host} is unreachable: {error!r}") from None


def _webhook_url(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme != "https" or not parts.hostname:
        raise argparse.ArgumentTypeError(f"{text!r} is not an https:// URL with a host")
    return text
