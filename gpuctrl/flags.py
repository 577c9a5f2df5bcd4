"""argparse types the commands share. Each returns the value or raises
``argparse.ArgumentTypeError`` naming what is wrong, which argparse prints as one line."""

from __future__ import annotations

import argparse
import re

__all__ = ["add_log_format", "bind_address", "seconds"]


def add_log_format(parser: argparse.ArgumentParser) -> None:
    """Add ``--log-format text|json``; `gpuctrl.runtime.configure_logging` takes
    ``json_lines=args.log_format == "json"``."""
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="log lines as text (default) or as JSON objects, one per line",
    )


def bind_address(text: str) -> str:
    """``HOST:PORT``, ``:PORT`` or ``[IPv6]:PORT``, as given (`parse_bind_address` reads it)."""
    # Here, not at the top: the node agents' commands import this module without the client.
    from gpuctrl.runtime import parse_bind_address

    try:
        parse_bind_address(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def seconds(text: str) -> float:
    """A non-negative number of seconds, such as ``5`` or ``0.5``."""
    if not re.fullmatch(r"\d+(\.\d*)?", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (e.g. 5)")
    return float(text)
