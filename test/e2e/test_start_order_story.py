"""Issue 19, start order, end to end: a driver slow to load holds back everything after it.

``gpuctrl manager`` as a process on a local cluster and two simulated GPU nodes without a
driver of their own. Every gpuctrl agent (the toolkit and validator pods' containers, the
device plugin's wait for the toolkit) runs for real in bubblewrap, and so does the driver
container, from a stand-in for NVIDIA's driver image (`ContainerBehavior.image_files`): its
``nvidia-driver init`` takes `LOAD_SECONDS` to build and load the module, then installs a
driver under ``/run/nvidia/driver`` as NVIDIA's does. The driver's rendered startup probe runs
inside it as a kubelet runs it (compressed in time, `gpuctrl.testing._probe`) and writes the
driver container's ready mark once the module is loaded and nvidia-smi answers.

While the module loads, the driver pod runs but is neither started nor ready, DriverReady is
False, the toolkit pod waits in its driver check (no ready mark), the device plugin pod in its
wait for toolkit-ready, the validator pod in its driver check, and no status file exists.
Then, on every node, the driver starts before the toolkit agent runs and before the
validator writes ``toolkit-ready``, and the device plugin runs only after that; the policy is
ready and ``driver-ready`` says the driver is a driver
container's (``IS_HOST_DRIVER=false``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from e2e_stack import (
    NAMESPACES,
    PODS,
    POLICIES,
    STATUS_DIR,
    conditions,
    operator_cluster,
    policy_ready,
    running_manager,
)

from gpuctrl.runtime import Client
from gpuctrl.testing import (
    FAKE_NVIDIA_SMI,
    ContainerBehavior,
    SimulatedKubelet,
    eventually,
    install_fake_driver,
    seed_gpu_host,
    simulated_gpu_nodes,
)

pytestmark = pytest.mark.slow

NAMESPACE = "gpuctrl"
LOAD_SECONDS = 20  # the driver container's module build and load
DRIVER, TOOLKIT, PLUGIN, VALIDATOR = (
    "nvidia-driver-ctr",
    "toolkit",
    "nvidia-device-plugin",
    "validator",
)
POLICY = {
    "apiVersion": "gpuctrl.io/v1alpha1",
    "kind": "ClusterPolicy",
    "metadata": {"name": "start-order"},
    # No containerd runs in the sandbox to be told to reload (see the containerd story).
    "spec": {"toolkit": {"containerd": {"restartMode": "none", "dropInMode": "never"}}},
}
# NVIDIA's driver image as far as the operator sees it: `nvidia-driver init` builds and loads
# the module (a while), then installs the driver where the host and the other operands see it.
DRIVER_ENTRYPOINT = f"""#!/bin/sh
set -eu
trap 'exit 0' TERM
echo "building the NVIDIA kernel module"
sleep {LOAD_SECONDS} & wait
mkdir -p /sys/module/nvidia
: > /sys/module/nvidia/refcnt
mkdir -p /run/nvidia/driver
cp -a /opt/driver/. /run/nvidia/driver/
echo "driver loaded"
sleep infinity & wait
"""


@dataclass
class Stack:
    """The module's cluster, its kubelet, and when each node's operands were first seen
    started or ready (monotonic seconds, by node, then by what)."""

    admin: Client
    kubelet: SimulatedKubelet
    seen: dict[str, dict[str, float]] = field(default_factory=dict)
    watcher: asyncio.Task[None] | None = None

    def first(self, node: str, what: str) -> float:
        assert self.watcher is not None
        if self.watcher.done():
            self.watcher.result()  # raises why it stopped
        return self.seen.get(node, {})[what]


def _driver_image(folder: Path) -> Path:
    """The files of the stand-in for NVIDIA's driver image."""
    entrypoint = folder / "usr/local/bin/nvidia-driver"
    entrypoint.parent.mkdir(parents=True)
    entrypoint.write_text(DRIVER_ENTRYPOINT)
    smi = folder / "usr/local/bin/nvidia-smi"  # the image's own, which its probe runs
    smi.write_text(FAKE_NVIDIA_SMI)
    for program in (entrypoint, smi):
        program.chmod(0o755)
    install_fake_driver(folder / "opt/driver")  # what it installs
    return folder


def _container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    status = pod.get("status") or {}
    every = [*status.get("initContainerStatuses", []), *status.get("containerStatuses", [])]
    return next((c for c in every if c["name"] == name), {"state": {}})


async def _pods(admin: Client) -> dict[str, dict[str, dict[str, Any]]]:
    """The operand pods by main container, then by node (those not being deleted)."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for pod in await admin.list(PODS, NAMESPACE):
        node = pod["spec"].get("nodeName")
        if node is None or pod["metadata"].get("deletionTimestamp"):
            continue
        for main in (DRIVER, TOOLKIT, PLUGIN, VALIDATOR):
            if any(c["name"] == main for c in pod["spec"]["containers"]):
                found.setdefault(main, {})[node] = pod
    return found


async def _watch(stack: Stack) -> None:
    """Until cancelled: note when each node's driver first started, its toolkit agent first
    ran (past its driver check), ``toolkit-ready`` first existed and its device plugin first
    ran (past its wait for that file)."""
    while True:
        pods = await _pods(stack.admin)
        now = time.monotonic()
        for main, what in (
            (DRIVER, "driver started"),
            (TOOLKIT, "toolkit running"),
            (PLUGIN, "plugin running"),
        ):
            for node, pod in pods.get(main, {}).items():
                container = _container(pod, main)
                if container.get("started") is True and "running" in container["state"]:
                    stack.seen.setdefault(node, {}).setdefault(what, now)
        for node in stack.kubelet.nodes:
            assert node.root is not None
            if (node.root / STATUS_DIR / "toolkit-ready").is_file():
                stack.seen.setdefault(node.name, {}).setdefault("toolkit-ready written", now)
        await asyncio.sleep(0.2)


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    folder = tmp_path_factory.mktemp("start-order")
    async with AsyncExitStack() as exits:
        plane, admin = await exits.enter_async_context(operator_cluster())
        await admin.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        )
        nodes = simulated_gpu_nodes("order", count=2)
        kubelet = await exits.enter_async_context(SimulatedKubelet(plane.kubeconfig, nodes))
        for node in kubelet.nodes:
            assert node.root is not None
            seed_gpu_host(node.root, host_driver=False)
        kubelet.set_behavior(behavior=ContainerBehavior(process=True), image="*/gpuctrl:*")
        driver = ContainerBehavior(process=True, image_files=_driver_image(folder / "driver-image"))
        kubelet.set_behavior(behavior=driver, container=DRIVER)
        await exits.enter_async_context(
            running_manager(
                plane.kubeconfig, NAMESPACE, folder / "manager.log", "--no-leader-elect"
            )
        )
        stack = Stack(admin, kubelet)
        stack.watcher = asyncio.create_task(_watch(stack))
        exits.callback(stack.watcher.cancel)
        await admin.create(POLICIES, POLICY)
        yield stack


def _status_files(stack: Stack) -> dict[str, list[str]]:
    found = {}
    for node in stack.kubelet.nodes:
        assert node.root is not None
        folder = node.root / STATUS_DIR
        found[node.name] = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    return found


async def test_while_the_module_loads_the_driver_is_not_started_and_everything_waits(
    stack: Stack,
) -> None:
    names = sorted(n.name for n in stack.kubelet.nodes)

    async def loading() -> None:
        pods = await _pods(stack.admin)
        for main in (DRIVER, TOOLKIT, PLUGIN, VALIDATOR):
            assert sorted(pods.get(main, {})) == names, (main, sorted(pods.get(main, {})))
        for node in names:
            driver = _container(pods[DRIVER][node], DRIVER)
            assert "running" in driver["state"], driver
            assert (driver["started"], driver["ready"]) == (False, False)
            # Each waits in the init container that gates it, which runs.
            for main, gate in (
                (TOOLKIT, "driver-validation"),
                (PLUGIN, "toolkit-validation"),
                (VALIDATOR, "driver-validation"),
            ):
                pod = pods[main][node]
                assert "running" in _container(pod, gate)["state"], (main, pod.get("status"))
                assert "running" not in _container(pod, main)["state"], (main, node)
        policy = await stack.admin.get(POLICIES, POLICY["metadata"]["name"])
        driver_ready = conditions(policy.get("status") or {}).get("DriverReady", {})
        assert driver_ready.get("status") == "False", policy.get("status")
        assert _status_files(stack) == {name: [] for name in names}

    await eventually(loading, within=LOAD_SECONDS)


async def test_then_driver_toolkit_and_device_plugin_start_in_order_and_the_policy_is_ready(
    stack: Stack,
) -> None:
    status = await policy_ready(
        stack.admin, POLICY["metadata"]["name"], within=LOAD_SECONDS + 120, ready_nodes="2/2"
    )
    assert conditions(status)["DriverReady"]["status"] == "True"
    for node in stack.kubelet.nodes:
        assert node.root is not None
        # What each gate guarantees: the toolkit agent runs after the driver started (its driver
        # check waits for the ready mark); toolkit-ready (the validator's toolkit check, after
        # its driver check) comes after that too, and the device plugin runs after it.
        first = {what: stack.first(node.name, what) for what in stack.seen[node.name]}
        seen = (node.name, first)
        assert first["driver started"] <= first["toolkit running"], seen
        assert first["driver started"] <= first["toolkit-ready written"], seen
        assert first["toolkit-ready written"] <= first["plugin running"], seen
        files = set(_status_files(stack)[node.name])
        assert {".driver-ctr-ready", "driver-ready", "toolkit-ready"} <= files, files
        driver_ready = (node.root / STATUS_DIR / "driver-ready").read_text()
        assert "IS_HOST_DRIVER=false\n" in driver_ready
        assert "DRIVER_ROOT_CTR_PATH=/run/nvidia/driver\n" in driver_ready
        assert (node.root / "run/nvidia/driver/usr/bin/nvidia-smi").is_file()
