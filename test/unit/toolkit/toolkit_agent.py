"""``gpuctrl toolkit run`` as a process, for the tests that signal it."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def running_agent(argv: list[str]) -> Iterator[subprocess.Popen[str]]:
    """``gpuctrl toolkit run ...`` (``argv`` after ``gpuctrl``), yielded once it printed that
    it waits for a stop signal; killed on the way out if still running."""
    agent = subprocess.Popen(
        [sys.executable, "-m", "gpuctrl", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert agent.stdout is not None
        for line in agent.stdout:
            if "waiting for a stop signal" in line:
                break
        yield agent
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()


def stop(agent: subprocess.Popen[str], signum: int = signal.SIGTERM) -> str:
    """Send ``signum`` and return the rest of the agent's output once it exited (30 s)."""
    agent.send_signal(signum)
    out, _ = agent.communicate(timeout=30)
    return out
