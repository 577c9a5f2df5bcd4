"""The one jitter of gpuctrl.runtime: spreading waits so that replicas and informers do not
act in lockstep."""

from __future__ import annotations

import random

__all__ = ["jittered"]


def jittered(seconds: float, factor: float = 0.1) -> float:
    """``seconds`` stretched by a random amount in [0, ``factor``) of itself (client-go's
    ``wait.Jitter``)."""
    return seconds * (1 + factor * random.random())
