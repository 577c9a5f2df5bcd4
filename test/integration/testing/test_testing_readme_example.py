"""The gpuctrl.testing example in README.md passes as printed."""

from collections.abc import Callable
from typing import Any

from kubernetes_asyncio.client import ApiClient

from gpuctrl.testing import SimulatedKubelet


async def test_readme_testing_example(
    readme_example: Callable[[str], dict[str, Any]],
    kube_api: ApiClient,
    namespace: str,
    gpu_nodes: SimulatedKubelet,
) -> None:
    example = readme_example("## Test against a real control plane: gpuctrl.testing")
    await example["test_a_pod_runs_on_a_gpu_node"](kube_api, namespace, gpu_nodes)
