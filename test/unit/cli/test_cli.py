"""The `gpuctrl` entry point: help, version, and lazy subcommand imports."""

import subprocess
import sys

import pytest

from gpuctrl import __version__
from gpuctrl.cli import SUBCOMMANDS, Subcommand, main


def _gpuctrl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuctrl", *args], capture_output=True, text=True, check=False
    )


def test_help_lists_every_subcommand() -> None:
    result = _gpuctrl("--help")
    assert result.returncode == 0
    for sub in SUBCOMMANDS:
        assert sub.name in result.stdout
        assert sub.summary in result.stdout


def test_version_prints_the_installed_version() -> None:
    result = _gpuctrl("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"gpuctrl {__version__}"
    assert __version__ != "0.0.0"


def test_unknown_subcommand_is_a_usage_error() -> None:
    result = _gpuctrl("frobnicate")
    assert result.returncode == 2
    assert "invalid choice: 'frobnicate'" in result.stderr


def test_no_arguments_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "commands:" in capsys.readouterr().out


@pytest.mark.parametrize("sub", SUBCOMMANDS, ids=lambda sub: sub.name)
def test_each_subcommand_has_help(sub: Subcommand) -> None:
    result = _gpuctrl(sub.name, "--help")
    assert result.returncode == 0, result.stderr
    assert f"usage: gpuctrl {sub.name}" in result.stdout
