"""A process-backed container's environment and host paths, from its spec (no apiserver)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuctrl.testing._container import (
    ContainerConfigError,
    PodContext,
    container_env,
    container_mounts,
)


async def _no_apiserver(method: str, path: str, body: Any) -> Any:
    raise AssertionError(f"asked the apiserver: {method} {path}")


def _context(tmp_path: Path, volumes: list[dict[str, Any]]) -> PodContext:
    pod = {
        "metadata": {"name": "agent-x", "namespace": "gpu", "uid": "u-1", "labels": {"app": "a"}},
        "spec": {"serviceAccountName": "sa", "volumes": volumes},
    }
    return PodContext(
        pod, "node-1", tmp_path / "node", tmp_path / "pod", "172.16.0.9", "10.0.0.7", tmp_path
    )


async def test_env_from_fields_and_values_in_order(tmp_path: Path) -> None:
    fields = ["metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName",
              "spec.serviceAccountName", "status.hostIP", "status.podIP",
              "metadata.labels['app']"]  # fmt: skip
    env = [
        {"name": f"F{i}", "valueFrom": {"fieldRef": {"fieldPath": f}}} for i, f in enumerate(fields)
    ]
    env += [{"name": "LATER", "value": "$(F0)/$(F3)/$(NOPE)"}]

    resolved = await container_env(_context(tmp_path, []), {"env": env}, _no_apiserver)

    assert list(resolved.values()) == [
        "agent-x", "gpu", "u-1", "node-1", "sa", "172.16.0.9", "10.0.0.7", "a",
        "agent-x/node-1/$(NOPE)",
    ]  # fmt: skip


async def test_unsupported_field_is_a_config_error(tmp_path: Path) -> None:
    env = [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "status.phase"}}}]

    with pytest.raises(
        ContainerConfigError, match=r"unsupported fieldRef fieldPath 'status\.phase'"
    ):
        await container_env(_context(tmp_path, []), {"env": env}, _no_apiserver)


@pytest.mark.parametrize(
    ("kind", "made"),
    [("", "dir"), ("DirectoryOrCreate", "dir"), ("FileOrCreate", "file")],
)
async def test_host_path_is_made_in_the_node_folder(tmp_path: Path, kind: str, made: str) -> None:
    volumes = [{"name": "v", "hostPath": {"path": "/var/lib/x", "type": kind}}]
    spec = {"volumeMounts": [{"name": "v", "mountPath": "/x", "readOnly": True}]}

    [mount] = await container_mounts(_context(tmp_path, volumes), spec, _no_apiserver)

    source = tmp_path / "node/var/lib/x"
    assert (mount.source, mount.target, mount.read_only) == (str(source), "/x", True)
    assert source.is_dir() if made == "dir" else source.is_file()


@pytest.mark.parametrize("kind", ["Directory", "File", "Socket"])
async def test_host_path_that_must_exist_and_does_not_is_a_config_error(
    tmp_path: Path, kind: str
) -> None:
    volumes = [{"name": "v", "hostPath": {"path": "/missing", "type": kind}}]
    spec = {"volumeMounts": [{"name": "v", "mountPath": "/x"}]}

    with pytest.raises(ContainerConfigError, match=f"/missing is not a {kind}"):
        await container_mounts(_context(tmp_path, volumes), spec, _no_apiserver)
    assert not (tmp_path / "node/missing").exists()


async def test_empty_dir_and_sub_path_and_unknown_volume(tmp_path: Path) -> None:
    volumes = [{"name": "scratch", "emptyDir": {}}, {"name": "odd", "gitRepo": {}}]
    spec = {"volumeMounts": [{"name": "scratch", "mountPath": "/s", "subPath": "a/b"}]}

    [mount] = await container_mounts(_context(tmp_path, volumes), spec, _no_apiserver)

    assert Path(mount.source) == tmp_path / "pod/volumes/scratch/a/b"
    assert not mount.read_only
    odd = {"volumeMounts": [{"name": "odd", "mountPath": "/o"}]}
    with pytest.raises(ContainerConfigError, match="not supported by the simulated kubelet"):
        await container_mounts(_context(tmp_path, volumes), odd, _no_apiserver)
