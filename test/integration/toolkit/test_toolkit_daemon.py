"""A real containerd (Debian's, private socket, root and state under a temp folder) and
``gpuctrl toolkit run --restart-mode signal``: the test is containerd's supervisor and starts
it again whenever it exits, as systemd would after the agent's SIGHUP."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

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

CONFIG = """\
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


class Supervisor:
    """Runs containerd and starts it again each time it exits, until stopped."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.config = root / "config.toml"
        self.socket = str(root / "containerd.sock")
        self.starts = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        assert CONTAINERD is not None
        with open(self.root / "containerd.log", "ab") as log:
            while not self._stopping.is_set():
                self.starts += 1
                self._process = subprocess.Popen(
                    [CONTAINERD, "--config", str(self.config)],
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

    def cri_status(self) -> str:
        """The CRI plugin's status as ``ctr plugins ls`` shows it (``ok`` when loaded)."""
        assert CTR is not None
        done = subprocess.run(
            [CTR, "--address", self.socket, "plugins", "ls"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        rows = [line.split() for line in done.stdout.splitlines()]
        return next(row[-1] for row in rows if row[:2] == ["io.containerd.grpc.v1", "cri"])


@pytest.fixture
def containerd() -> Iterator[Supervisor]:
    """A supervised containerd in a temp folder; stopped and the folder removed afterwards
    (also every process still running from it, by PID)."""
    root = Path(tempfile.mkdtemp(prefix="gpuctrl-ctd-"))
    supervisor = Supervisor(root)
    supervisor.config.write_text(CONFIG.format(root=root))
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
    assert containerd.cri_status() == "ok"
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
        assert containerd.cri_status() == "ok"
        installed = containerd.config.read_text()
        assert 'default_runtime_name = "nvidia"' in installed
        assert "nvidia-container-runtime.cdi" in installed

        agent.send_signal(signal.SIGTERM)
        rest, _ = agent.communicate(timeout=60)
        assert agent.returncode == 0, rest
        assert "restored the original" in rest
        containerd.serving_pid(other_than=second)
        assert containerd.starts == 3
        assert containerd.cri_status() == "ok"
        assert containerd.config.read_bytes() == original
        assert not (containerd.root / "toolkit-state" / "toolkit-journal.json").exists()
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
