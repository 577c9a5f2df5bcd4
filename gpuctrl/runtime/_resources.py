"""API resources: which URL serves a kind, and whether its objects live in namespaces."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

__all__ = ["Resource"]


@dataclass(frozen=True, slots=True)
class Resource:
    """One API resource: ``Resource("apps/v1", "Deployment", "deployments")``.

    ``api_version`` is ``group/version`` (``v1`` for the core group), ``plural`` the URL name,
    ``namespaced`` the scope. ``Client.resource`` reads all of it from API discovery; a cache
    refuses to start an informer whose declared scope disagrees with the server's.
    """

    api_version: str
    kind: str
    plural: str
    namespaced: bool = True

    @property
    def group(self) -> str:
        """The API group ("" for the core group)."""
        return self.api_version.rpartition("/")[0]

    def path(self, namespace: str | None = None, name: str | None = None, sub: str = "") -> str:
        """The URL path of the collection, or of one object (and its subresource ``sub``)."""
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
        return f"{base}/{sub}" if sub else base

    def scoped(self, namespace: str | None) -> str | None:
        """``namespace`` for a namespaced resource, None for a cluster-scoped one."""
        return namespace or None if self.namespaced else None
