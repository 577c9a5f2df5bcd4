"""Structured logs that carry the controller name and the key being reconciled.

Controllers set `LOG_CONTEXT` around every reconcile; `ContextFilter` copies it onto each log
record (as ``record.controller`` and ``record.key``), so whatever a reconciler logs says which
object it was about. `configure_logging` installs a handler with that filter, printing either
text lines or one JSON object per line.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, TextIO

__all__ = ["LOG_CONTEXT", "ContextFilter", "JSONFormatter", "configure_logging"]

LOG_CONTEXT: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "gpuctrl_log_context", default=MappingProxyType({})
)
"""Fields (``controller``, ``key``) added to every record logged in the current task."""

_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s%(context)s: %(message)s"


class ContextFilter(logging.Filter):
    """Adds the fields of `LOG_CONTEXT` to each record (``controller`` and ``key``, "" when
    unset) and ``context``, the same as `` [controller=... key=...]`` for text formats."""

    def filter(self, record: logging.LogRecord) -> bool:
        fields = LOG_CONTEXT.get()
        record.controller = fields.get("controller", "")
        record.key = fields.get("key", "")
        pairs = " ".join(f"{k}={v}" for k, v in fields.items())
        record.context = f" [{pairs}]" if pairs else ""
        return True


class JSONFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, controller and key when set,
    and the formatted exception when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        context = LOG_CONTEXT.get()
        for field in ("controller", "key"):
            value = getattr(record, field, "") or context.get(field, "")
            if value:
                entry[field] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_logging(
    *, json_lines: bool = False, level: int | str = logging.INFO, stream: TextIO | None = None
) -> logging.Handler:
    """Send the root logger's records at ``level`` or above to ``stream`` (stderr), as JSON
    lines or text, with controller and key attached. Returns the installed handler."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JSONFormatter() if json_lines else logging.Formatter(_TEXT_FORMAT))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)
    return handler
