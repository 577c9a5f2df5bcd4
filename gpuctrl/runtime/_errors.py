"""The errors gpuctrl.runtime raises, in one tree.

::

    GpuctrlError                  base of every error gpuctrl raises on purpose
    ├── QueueShutDown             get() on a work queue that is shut down and empty
    ├── CacheNotStarted           a cache was read before it was started and synced
    ├── LeaderElectionLost        a manager lost its Lease and stopped its controllers
    ├── TerminalError             a reconcile failure that retrying cannot fix (not requeued)
    └── ApiError                  the API server answered with an error status (``.status``)
        ├── BadRequest            400: the request was malformed
        ├── Unauthorized          401: no valid credentials
        ├── Forbidden             403: RBAC denies the request
        ├── NotFound              404: the object (or its namespace or type) does not exist
        ├── Conflict              409: a write lost a race (stale resourceVersion)
        │   └── AlreadyExists     409: create of a name that is taken
        ├── Gone                  410: the resourceVersion is too old; relist
        ├── Invalid               422: the object failed validation or admission
        ├── TooManyRequests       429: throttled by priority and fairness; retry later
        └── ServerError           5xx: the server failed; retry later

``api_error(exc)`` maps a kubernetes_asyncio ``ApiException`` to the matching class; raise it
with ``raise api_error(exc) from exc`` so the client library's error stays the cause.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

__all__ = [
    "AlreadyExists",
    "ApiError",
    "BadRequest",
    "CacheNotStarted",
    "Conflict",
    "Forbidden",
    "Gone",
    "GpuctrlError",
    "Invalid",
    "LeaderElectionLost",
    "NotFound",
    "QueueShutDown",
    "ServerError",
    "TerminalError",
    "TooManyRequests",
    "Unauthorized",
    "api_error",
]

TRANSIENT_ERRORS = (aiohttp.ClientError, OSError, TimeoutError)
"""Failures of the connection rather than answers of the server: retried wherever a loop
retries (with `ApiError` added where any error status is worth another try)."""


class GpuctrlError(Exception):
    """Base of every error gpuctrl raises on purpose."""


class QueueShutDown(GpuctrlError):
    """The work queue is shut down and has no keys left to hand out."""


class CacheNotStarted(GpuctrlError):
    """A cache was read before it was started and had synced."""


class LeaderElectionLost(GpuctrlError):
    """The manager could not renew its Lease; it stopped its controllers and shut down."""


class CannotListen(GpuctrlError):
    """A server could not bind its address (in use, not local, not permitted); the message
    names the address and the reason."""


class TerminalError(GpuctrlError):
    """A reconcile failure that retrying cannot fix: logged and counted, never requeued."""


class ApiError(GpuctrlError):
    """The API server answered with an error status.

    ``status`` is the HTTP status, ``reason`` the Kubernetes Status reason (``"NotFound"``,
    ``"AlreadyExists"``, ...; the HTTP reason phrase when the body is no Status), ``message``
    the server's explanation and ``body`` the decoded Status object (``None`` if there was none).
    """

    def __init__(
        self, status: int, reason: str, message: str, body: dict[str, Any] | None = None
    ) -> None:
        super().__init__(f"{status} {reason}: {message}" if message else f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body


class BadRequest(ApiError):
    """400: the request was malformed."""


class Unauthorized(ApiError):
    """401: the client presented no valid credentials."""


class Forbidden(ApiError):
    """403: authorization (RBAC) denies the request."""


class NotFound(ApiError):
    """404: the object, its namespace or its type does not exist."""


class Conflict(ApiError):
    """409: the write was based on a stale resourceVersion; read again and retry."""


class AlreadyExists(Conflict):
    """409: a create named an object that already exists."""


class Gone(ApiError):
    """410: the requested resourceVersion is too old (compacted); list again."""


class Invalid(ApiError):
    """422: the object failed validation or was rejected by admission."""


class TooManyRequests(ApiError):
    """429: the server throttled the request; retry after a delay."""


class ServerError(ApiError):
    """5xx: the server failed to handle the request; retry after a delay."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


def api_error(exc: Any) -> ApiError:
    """The ``ApiError`` subclass for a kubernetes_asyncio ``ApiException``, or any object with
    ``status``, ``reason`` and ``body`` (a Status as JSON bytes or text, or already decoded, as
    in a watch ERROR event). Use ``raise api_error(exc) from exc``."""
    status = int(exc.status or 0)
    body = _decode_status(getattr(exc, "body", None))
    reason = str(body.get("reason") or exc.reason or "") if body else str(exc.reason or "")
    message = str(body.get("message", "")) if body else ""
    if status == 409 and reason == "AlreadyExists":
        cls: type[ApiError] = AlreadyExists
    elif status >= 500:
        cls = ServerError
    else:
        cls = _BY_STATUS.get(status, ApiError)
    return cls(status, reason, message, body)


def _decode_status(body: object) -> dict[str, Any] | None:
    """The Kubernetes Status object in a response body, or None when the body holds none."""
    if isinstance(body, dict):
        return body
    if isinstance(body, bytes | bytearray):
        body = body.decode("utf-8", "replace")
    if not isinstance(body, str) or not body:
        return None
    try:
        decoded = json.loads(body)
    except ValueError:
        return None
    return decoded if isinstance(decoded, dict) else None
