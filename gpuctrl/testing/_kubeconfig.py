"""Kubeconfig files for a local control plane (`gpuctrl.runtime.new_api_client` reads them)."""

from __future__ import annotations

from pathlib import Path

import yaml

__all__ = ["write_kubeconfig"]


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
