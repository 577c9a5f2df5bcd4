"""Two agents at once (a rolling update overlapping, install racing cleanup): the state
folder's lock serialises them: no command fails, and a reader always finds the original or
install's complete output, never an empty or half-written file."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from gpuctrl.toolkit._fs import TMP_SUFFIX

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
