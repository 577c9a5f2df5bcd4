"""`make run` end to end: local cluster, CRDs, rendered operands running, clean Ctrl-C."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from gpuctrl.runtime import new_api_client
from gpuctrl.testing import eventually

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 180.0


@pytest.fixture
async def make_run() -> AsyncIterator[tuple[asyncio.subprocess.Process, Path]]:
    """`hack/run.py` (what `make run` runs) with no KUBECONFIG, up to its 'running' line."""
    env = {key: value for key, value in os.environ.items() if key != "KUBECONFIG"}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "hack" / "run.py"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
    )
    assert process.stdout is not None
    kubeconfig: Path | None = None
    output: list[str] = []
    try:
        async with asyncio.timeout(START_TIMEOUT):
            while not output or not output[-1].startswith("running"):
                line = (await process.stdout.readline()).decode()
                assert line, "make run exited before it was running:\n" + "".join(output)
                output.append(line)
                if line.startswith("kubeconfig: "):
                    kubeconfig = Path(line.split(": ", 1)[1].strip())
        assert kubeconfig is not None, "".join(output)
        yield process, kubeconfig
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_make_run_brings_up_operands_and_stops_cleanly(
    make_run: tuple[asyncio.subprocess.Process, Path],
) -> None:
    process, kubeconfig = make_run
    folder = kubeconfig.parent
    async with await new_api_client(kubeconfig) as api:
        apps = client.AppsV1Api(api)
        core = client.CoreV1Api(api)

        async def operands_running() -> None:
            sets = (await apps.list_namespaced_daemon_set("gpuctrl")).items
            names = {ds.metadata.name for ds in sets}
            assert {"gpuctrl-driver-ubuntu22.04", "gpuctrl-driver-ubuntu24.04"} <= names
            assert "gpuctrl-toolkit" in names
            for ds in sets:
                assert ds.status.desired_number_scheduled > 0, ds.metadata.name
                assert ds.status.number_ready == ds.status.desired_number_scheduled, (
                    ds.metadata.name
                )
            pods = (await core.list_namespaced_pod("gpuctrl")).items
            assert pods
            assert all(pod.status.phase == "Running" for pod in pods)

        await eventually(operands_running, within=90)

    process.send_signal(signal.SIGINT)
    async with asyncio.timeout(30):
        assert await process.wait() == 0
    assert not folder.exists(), f"{folder} was left behind"
    assert not _pids_mentioning(str(folder)), "control plane processes were left running"


def _pids_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
