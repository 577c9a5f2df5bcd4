"""How the simulated kubelet times a container's probes (pure).

A probe's Kubernetes fields (``initialDelaySeconds``, ``periodSeconds``, ``failureThreshold``,
``successThreshold``) are honoured as a kubelet honours them, on a clock that runs
`PROBE_TIME_SCALE` times as long as Kubernetes' seconds (the simulated kubelet's restart
backoff is compressed alike), with no period shorter than `MIN_PERIOD_SECONDS`: a probe of a
process-backed container starts a process each time. A command's ``timeoutSeconds`` is not
scaled: it bounds a real command.

The kubelet runs a startup probe from ``initialDelaySeconds`` on, every ``periodSeconds``: the
container is `started` at the first success; after ``failureThreshold`` failures in a row it
is killed (and restarted as its pod's restartPolicy says). Readiness probes begin once the
container has started.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["MIN_PERIOD_SECONDS", "PROBE_TIME_SCALE", "STARTUP_KILL_EXIT_CODE", "Probe"]

PROBE_TIME_SCALE = 0.02  # 60 s of a probe's timings take 1.2 s here
MIN_PERIOD_SECONDS = 1.0
STARTUP_KILL_EXIT_CODE = 137  # SIGKILL, as the runtime reports a container the kubelet killed


@dataclass(frozen=True)
class Probe:
    """One probe of a container, its timings in seconds of the simulated kubelet's clock."""

    delay: float
    period: float
    failure_threshold: int
    success_threshold: int
    timeout: float
    command: tuple[str, ...] | None  # an exec probe's command; None for the other handlers

    @classmethod
    def of(cls, container: Mapping[str, Any], kind: str) -> Probe | None:
        """The container's `kind` probe (``startupProbe``, ``readinessProbe``), None without one."""
        spec = container.get(kind)
        if not spec:
            return None
        command = (spec.get("exec") or {}).get("command")
        return cls(
            delay=spec.get("initialDelaySeconds", 0) * PROBE_TIME_SCALE,
            period=max(spec.get("periodSeconds", 10) * PROBE_TIME_SCALE, MIN_PERIOD_SECONDS),
            failure_threshold=spec.get("failureThreshold", 3),
            success_threshold=spec.get("successThreshold", 1),
            timeout=spec.get("timeoutSeconds", 1),
            command=None if command is None else tuple(command),
        )

    def startup_verdict(self, passes_after: float) -> tuple[float, bool]:
        """When, after the container began running, its startup probe decides, and whether it
        passed, for a check that passes from `passes_after` seconds of running on: at the first
        probe from then on, or failed at the last probe the failure threshold allows."""
        tries = max(0, math.ceil((passes_after - self.delay) / self.period))
        if tries < self.failure_threshold:
            return self.delay + tries * self.period, True
        return self.delay + (self.failure_threshold - 1) * self.period, False
