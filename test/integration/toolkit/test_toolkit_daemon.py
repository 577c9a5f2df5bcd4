"""A real containerd daemon (private socket, root and state under a temp folder) and
``gpuctrl toolkit run --restart-mode signal``: the test is containerd's supervisor and starts
it again whenever it exits, as systemd would after the agent's SIGHUP. Debian's containerd 1.6
with a version 2 config, and containerd 2.1 (Debian forky's, unpacked by
hack/containerd-versions.sh) with a version 3 config."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpuctrl.toolkit._restart import peer_pid

CONTAINERD, CTR = shutil.which("containerd"), shutil.which("ctr")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CONTAINERD is None or CTR is None or os.geteuid() != 0,
        reason="needs root and containerd (bash hack/install-debian-packages.sh containerd)",
    ),
]

ROOT = Path(__file__).resolve().parents[3]
CACHE = Path(os.environ.get("GPUCTRL_CONTAINERD_CACHE", Path.home() / ".cache/gpuctrl/containerd"))
CONFIG_V2 = """\
# A node's containerd config; the kubelet uses the systemd cgroup driver.
version = 2
root = "{root}/root"
state = "{root}/state"

[grpc]
  address = "{root}/containerd.sock"

[plugins."io.containerd.internal.v1.opt"]
  path = "{root}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_port = "0"

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{root}/cni/bin"
    conf_dir = "{root}/cni/net.d"
"""
CONFIG_V3 = """\
# The same node on containerd 2.x: version 3, the CRI plugin split in runtime and images.
version = 3
root = "{root}/root"
state = "{root}/state"

[grpc]
  address = "{root}/containerd.sock"

[plugins."io.containerd.internal.v1.opt"]
  path = "{root}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_port = "0"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "native"

[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"

  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"

    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
      SystemdCgroup = true

[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["{root}/cni/bin"]
  conf_dir = "{root}/cni/net.d"
"""


@dataclass(frozen=True)
class Daemon:
    """A containerd build, its ctr, a config template in its format, and the plugins that must
    load (``ok`` in ``ctr plugins ls``) with a CRI runtime configured."""

    containerd: str
    ctr: str
    config: str
    plugins: tuple[tuple[str, str], ...]


def _daemons() -> list[Any]:
    cri = ("io.containerd.grpc.v1", "cri")
    forky = CACHE / "forky" / "usr" / "bin"
    return [
        pytest.param(Daemon(CONTAINERD or "", CTR or "", CONFIG_V2, (cri,)), id="containerd-1.6"),
        pytest.param(
            Daemon(
                str(forky / "containerd"),
                str(forky / "ctr"),
                CONFIG_V3,
                (cri, ("io.containerd.cri.v1", "runtime"), ("io.containerd.cri.v1", "images")),
            ),
            id="containerd-2.1",
        ),
    ]


class Supervisor:
    """Runs containerd and starts it again each time it exits, until stopped."""

    def __init__(self, root: Path, daemon: Daemon) -> None:
        self.root = root
        self.daemon = daemon
        self.config = root / "config.toml"
        self.socket = str(root / "containerd.sock")
        self.starts = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        with open(self.root / "containerd.log", "ab") as log:
            while not self._stopping.is_set():
                self.starts += 1
                self._process = subprocess.Popen(
                    [self.daemon.containerd, "--config", str(self.config)],
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                )
                self._process.wait()

    def stop(self) -> None:
        self._stopping.set()
        process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._thread.join(10)

    def serving_pid(self, other_than: int = 0, timeout: float = 30.0) -> int:
        """The PID serving the socket once it is not ``other_than``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                pid = peer_pid(self.socket)
                if pid != other_than:
                    return pid
            time.sleep(0.05)
        raise AssertionError(f"containerd not serving on {self.socket}; see its log")

    def plugin_status(self) -> dict[tuple[str, str], str]:
        """The status (``ok`` when loaded) of each plugin the daemon must load, as ``ctr
        plugins ls`` shows it."""
        done = subprocess.run(
            [self.daemon.ctr, "--address", self.socket, "plugins", "ls"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        rows = {tuple(line.split()[:2]): line.split()[-1] for line in done.stdout.splitlines()}
        return {plugin: rows.get(plugin, "missing") for plugin in self.daemon.plugins}

    def loaded(self) -> bool:
        """Whether every plugin it must load is ``ok``."""
        return set(self.plugin_status().values()) == {"ok"}


@pytest.fixture(params=_daemons())
def containerd(request: pytest.FixtureRequest) -> Iterator[Supervisor]:
    """A supervised containerd in a temp folder; stopped and the folder removed afterwards
    (also every process still running from it, by PID)."""
    daemon: Daemon = request.param
    if not Path(daemon.containerd).exists():
        subprocess.run(["bash", str(ROOT / "hack" / "containerd-versions.sh")], check=True)
    root = Path(tempfile.mkdtemp(prefix="gpuctrl-ctd-"))
    supervisor = Supervisor(root, daemon)
    supervisor.config.write_text(daemon.config.format(root=root))
    supervisor.start()
    try:
        yield supervisor
    finally:
        supervisor.stop()
        _kill_processes_under(root)
        shutil.rmtree(root)


def _kill_processes_under(root: Path) -> None:
    """SIGKILL any process (shims) whose command line names ``root``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if str(root).encode() in (entry / "cmdline").read_bytes():
                os.kill(int(entry.name), signal.SIGKILL)


def test_run_installs_restarts_and_restores_on_sigterm(containerd: Supervisor) -> None:
    first = containerd.serving_pid()
    assert containerd.loaded(), containerd.plugin_status()
    original = containerd.config.read_bytes()
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuctrl",
            "toolkit",
            "run",
            "--config",
            str(containerd.config),
            "--runtime-dir",
            str(containerd.root / "nvidia"),
            "--state-dir",
            str(containerd.root / "toolkit-state"),
            "--restart-mode",
            "signal",
            "--socket",
            containerd.socket,
            "--set-as-default",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert agent.stdout is not None
        lines = []
        for line in agent.stdout:
            lines.append(line)
            if "waiting for a stop signal" in line:
                break
        assert any("sent SIGHUP to containerd" in line for line in lines), lines
        second = containerd.serving_pid(other_than=first)
        assert containerd.starts == 2
        assert containerd.loaded(), containerd.plugin_status()
        installed = containerd.config.read_text()
        assert re.search(r"default_runtime_name = [\"']nvidia[\"']", installed), installed
        assert "nvidia-container-runtime.cdi" in installed

        agent.send_signal(signal.SIGTERM)
        rest, _ = agent.communicate(timeout=60)
        assert agent.returncode == 0, rest
        assert "restored the original" in rest
        containerd.serving_pid(other_than=second)
        assert containerd.starts == 3
        assert containerd.loaded(), containerd.plugin_status()
        assert containerd.config.read_bytes() == original
        assert not (containerd.root / "toolkit-state" / "toolkit-journal.json").exists()
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
