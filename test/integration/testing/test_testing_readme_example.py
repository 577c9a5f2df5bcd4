"""The gpuctrl.testing example in docs/testing.md passes as printed."""

from collections.abc import Callable
from typing import Any

from kubernetes_asyncio.client import ApiClient

from gpuctrl.testing import SimulatedKubelet


async def test_the_testing_guide_example(
    doc_example: Callable[[str, str], dict[str, Any]],
    kube_api: ApiClient,
    namespace: str,
    gpu_nodes: SimulatedKubelet,
) -> None:
    example = doc_example("docs/testing.md", "## An example test")
    await example["test_a_pod_runs_on_a_gpu_node"](kube_api, namespace, gpu_nodes)
