"""Kubeconfig files for a local control plane, and API clients built from them."""

from __future__ import annotations

from pathlib import Path

import yaml
from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient

__all__ = ["api_client", "write_kubeconfig"]


def write_kubeconfig(path: Path, *, server: str, ca_file: Path, user: str, token: str) -> Path:
    """Write a single-context kubeconfig for `user` authenticating with a bearer `token`."""
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "gpuctrl",
                "cluster": {"server": server, "certificate-authority": str(ca_file)},
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": "gpuctrl", "user": user}}],
        "current-context": user,
    }
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    path.chmod(0o600)
    return path


async def api_client(kubeconfig: Path) -> ApiClient:
    """A new `ApiClient` for the current context of `kubeconfig`; the caller must close it.

    Use it as ``async with await api_client(path) as api: ...``.
    """
    return await config.new_client_from_config(config_file=str(kubeconfig), persist_config=False)
