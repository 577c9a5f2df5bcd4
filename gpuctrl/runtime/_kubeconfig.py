"""Where the API client's configuration comes from: a kubeconfig, or the pod it runs in."""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

__all__ = ["SERVICE_ACCOUNT_NAMESPACE", "new_api_client", "pod_namespace"]

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
"""The file in which Kubernetes tells a pod its namespace."""


async def new_api_client(
    kubeconfig: str | Path | None = None,
    *,
    configuration: k8s_client.Configuration | None = None,
    context: str | None = None,
) -> k8s_client.ApiClient:
    """Build an ``ApiClient``: from ``configuration`` if given, else from ``kubeconfig``, else
    in-cluster when running in a pod, else from ``$KUBECONFIG`` / ``~/.kube/config``.

    The caller owns the client and must ``await client.close()``.
    """
    if configuration is None:
        configuration = k8s_client.Configuration()
        if kubeconfig is None and "KUBERNETES_SERVICE_HOST" in os.environ:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            await k8s_config.load_kube_config(
                config_file=str(kubeconfig) if kubeconfig is not None else None,
                context=context,
                client_configuration=configuration,
            )
    if configuration.proxy is None:
        configuration.proxy = _environment_proxy(configuration.host or "")
    api = k8s_client.ApiClient(configuration)
    # kubernetes-asyncio's session trusts the environment, so aiohttp looks up netrc and the
    # proxy variables on every request, each in a thread: behind a loop kept busy by CPU-bound
    # reconciles those threads wait for the GIL, and a request took seconds (a Lease renewal
    # missed its deadline). The proxy is read once above, as client-go reads HTTPS_PROXY and
    # NO_PROXY; an apiserver needs no netrc.
    api.rest_client.pool_manager._trust_env = False
    return api


def _environment_proxy(server: str) -> str | None:
    """The proxy ``$HTTPS_PROXY`` / ``$HTTP_PROXY`` names for ``server`` unless ``$NO_PROXY``
    exempts its host (Python's reading of them, as aiohttp's ``trust_env`` had it)."""
    url = urlsplit(server)
    proxy = urllib.request.getproxies().get(url.scheme or "https")
    if not proxy or urllib.request.proxy_bypass(url.hostname or ""):
        return None
    return proxy


def pod_namespace(service_account_file: Path = SERVICE_ACCOUNT_NAMESPACE) -> str | None:
    """The namespace this process runs in: ``$POD_NAMESPACE`` (the downward API), else the
    service account's namespace file, else None (not in a pod)."""
    namespace = os.environ.get("POD_NAMESPACE", "").strip()
    if namespace:
        return namespace
    try:
        return service_account_file.read_text().strip() or None
    except OSError:
        return None
