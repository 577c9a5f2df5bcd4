"""The reconcile contract: what a reconciler receives, returns, and what each outcome means.

A reconciler is ``async def reconcile(request: Request) -> Result | None``. It is handed the
name of an object, not a change: it reads the current state (from the cache), makes the world
match it, and is called again whenever something relevant changes. For one key it is never
running twice at once; different keys run concurrently on up to ``max_concurrent_reconciles``
workers. Every outcome, in one place (the controller applies it in one switch):

================================  =================================================================
the reconciler ...                the controller ...
================================  =================================================================
returns None or ``Result()``      forgets the key's failures (success; counted ``success``)
returns ``Result(requeue_after)`` forgets the key's failures and reconciles it again after that
                                  many seconds (> 0), or earlier if an event arrives
                                  (``requeue_after``); ``requeue_after <= 0`` is as if unset
returns ``Result(requeue=True)``  requeues the key rate-limited, as after an error but without
                                  counting one (``requeue``)
raises `TerminalError`            logs it with the key, counts it in the errors metric and does
                                  *not* retry; only a new event brings the key back (``error``)
raises any other exception        logs it with the key and requeues the key rate-limited:
                                  5 ms doubling per consecutive failure up to 1000 s, and at
                                  most 10/s overall (burst 100) (``error``)
is cancelled (shutdown)           stops; the key is marked done and not requeued
================================  =================================================================

A reconciler's exceptions never stop its worker; a ``CancelledError`` it raises while its worker
is not being cancelled counts as any other exception.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._objects import key

__all__ = ["Request", "Result"]


@dataclass(frozen=True, slots=True, order=True)
class Request:
    """The object to reconcile: its namespace ("" when cluster-scoped) and name."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return key(self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class Result:
    """What a successful reconcile asks for: ``requeue_after`` seconds until it runs again
    (None or <= 0: only when something changes), or ``requeue`` for a rate-limited requeue
    (ignored when ``requeue_after`` > 0), as in controller-runtime."""

    requeue_after: float | None = None
    requeue: bool = False
