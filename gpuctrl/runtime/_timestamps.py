"""Timestamps as Kubernetes writes them: ``metav1.Time`` (seconds) and ``metav1.MicroTime``."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["kube_micro_time", "kube_time"]


def kube_time(moment: datetime | None = None) -> str:
    """``moment`` (now when None) as a Kubernetes Time, ``2026-01-02T03:04:05Z``."""
    return (moment or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def kube_micro_time(moment: datetime | None = None) -> str:
    """``moment`` (now when None) as a Kubernetes MicroTime, ``2026-01-02T03:04:05.123456Z``."""
    return (moment or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
