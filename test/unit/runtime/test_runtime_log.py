"""Structured logs carry the controller and key of the reconcile that logged them."""

import io
import json
import logging

from gpuctrl.runtime import LOG_CONTEXT, configure_logging


def log_one(json_lines: bool) -> str:
    stream = io.StringIO()
    level = logging.getLogger().level
    handler = configure_logging(json_lines=json_lines, stream=stream)
    token = LOG_CONTEXT.set({"controller": "widgets", "key": "ns/w"})
    try:
        logging.getLogger("test.reconciler").warning("hello %s", "world")
    finally:
        LOG_CONTEXT.reset(token)
        logging.getLogger().removeHandler(handler)
        logging.getLogger().setLevel(level)
    return stream.getvalue()


def test_json_lines_carry_controller_and_key() -> None:
    entry = json.loads(log_one(json_lines=True))
    assert entry["message"] == "hello world"
    assert entry["controller"] == "widgets"
    assert entry["key"] == "ns/w"
    assert entry["level"] == "WARNING"
    assert entry["logger"] == "test.reconciler"


def test_text_lines_carry_controller_and_key() -> None:
    assert "test.reconciler [controller=widgets key=ns/w]: hello world" in log_one(False)
