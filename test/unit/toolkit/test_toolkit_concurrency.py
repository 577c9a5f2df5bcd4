"""Two agents at once (a rolling update overlapping, install racing cleanup): the state
folder's lock serialises them: no command fails, and a reader always finds the original or
install's complete output, never an empty or half-written file."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from gpuctrl.toolkit._errors import ToolkitError
from gpuctrl.toolkit._fs import LOCK_NAME, TMP_SUFFIX, locked

DATA = Path(__file__).resolve().parents[2] / "data" / "toolkit" / "containerd"
ROUNDS = 15

# One agent: install and cleanup in a loop.
AGENT = """
import sys
from gpuctrl.toolkit import Settings, Target, cleanup, install
config, state, drop_in, rounds = sys.argv[1], sys.argv[2], sys.argv[3] or None, int(sys.argv[4])
target = Target("containerd", config, state, drop_in)
settings = Settings("/usr/local/nvidia/toolkit", set_as_default=True)
for _ in range(rounds):
    install(target, settings)
    cleanup(target)
"""


def _race(tmp_path: Path, drop_in: bool) -> None:
    config = tmp_path / "config.toml"
    original = (DATA / "containerd-1.7-default.toml").read_bytes()
    config.write_bytes(original)
    extra = str(tmp_path / "conf.d" / "99-nvidia.toml") if drop_in else ""
    argv = [sys.executable, "-c", AGENT, str(config), str(tmp_path / "s"), extra, str(ROUNDS)]
    agents = [subprocess.Popen(argv, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    seen = set()
    while any(a.poll() is None for a in agents):
        data = config.read_bytes()  # a reader never sees an empty or half-written file
        assert data
        tomllib.loads(data.decode())
        seen.add(data)
    errors = [a.communicate()[1] for a in agents]
    assert [a.returncode for a in agents] == [0, 0], errors
    assert config.read_bytes() == original
    assert not (tmp_path / "s").exists()  # nothing left: no journal, no lock, no folder
    assert not list(tmp_path.rglob(f"*{TMP_SUFFIX}"))
    assert len(seen) <= 2


def test_two_agents_in_place(tmp_path: Path) -> None:
    _race(tmp_path, drop_in=False)


def test_two_agents_drop_in(tmp_path: Path) -> None:
    _race(tmp_path, drop_in=True)


def test_the_lock_is_taken_when_the_folder_vanishes_between_makedirs_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """makedirs found the folder, and the agent that held the lock removed it before makedirs
    checked that it is a folder: FileExistsError for a folder that is gone. Lock anew."""
    state, real = tmp_path / "state", os.makedirs
    calls = []

    def racing(path: str, mode: int = 0o777, exist_ok: bool = False) -> None:
        calls.append(path)
        if len(calls) == 1:
            raise FileExistsError(17, "File exists", path)
        real(path, mode, exist_ok)

    monkeypatch.setattr(os, "makedirs", racing)
    with locked(str(state)):
        assert (state / LOCK_NAME).exists()
    assert len(calls) == 2


def test_a_state_path_that_is_a_file_is_named(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.write_text("")
    lock = locked(str(state))
    with pytest.raises(ToolkitError, match="state: cannot take the agent's lock: not a folder"):
        lock.__enter__()
