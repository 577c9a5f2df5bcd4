"""The argparse types the commands share: a value, or one line naming what is wrong."""

from __future__ import annotations

import argparse

import pytest

from gpuctrl.flags import bind_address, seconds


@pytest.mark.parametrize("text", [":8080", "127.0.0.1:0", "[::1]:9"])
def test_a_bind_address_is_kept_as_given(text: str) -> None:
    assert bind_address(text) == text


@pytest.mark.parametrize("text", ["8080", "host:", "host:http", ":70000"])
def test_a_bad_bind_address_names_it(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=f"{text!r} is not HOST:PORT"):
        bind_address(text)


@pytest.mark.parametrize(("text", "value"), [("0", 0.0), ("5", 5.0), ("0.5", 0.5)])
def test_seconds(text: str, value: float) -> None:
    assert seconds(text) == value


@pytest.mark.parametrize("text", ["-1", "five", "", "1e3"])
def test_bad_seconds_name_the_text(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="is not a number of seconds"):
        seconds(text)
