"""A process-backed container's environment and host paths, from its spec (no apiserver)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpuctrl.testing._container import (
    ContainerConfigError,
    PodContext,
    container_env,
    container_mounts,
    resolve_in_root,
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


async def test_host_path_follows_the_nodes_symlinks_inside_its_folder(tmp_path: Path) -> None:
    # The node keeps its repository on a data disk (an absolute link, as on the node), and a
    # relative link climbs further up than the node's root: both stay in the node's folder.
    node = tmp_path / "node"
    (node / "data/packages").mkdir(parents=True)
    (node / "etc").mkdir()
    (node / "opt").mkdir()
    (node / "opt/local-packages").symlink_to("/data/packages")
    (node / "opt/up").symlink_to("../../../../../etc")
    volumes = [
        {"name": "repo", "hostPath": {"path": "/opt/local-packages", "type": "Directory"}},
        {"name": "up", "hostPath": {"path": "/opt/up", "type": "Directory"}},
        {"name": "new", "hostPath": {"path": "/opt/local-packages/new/x", "type": ""}},
    ]
    spec = {"volumeMounts": [{"name": v["name"], "mountPath": f"/{v['name']}"} for v in volumes]}

    mounts = await container_mounts(_context(tmp_path, volumes), spec, _no_apiserver)

    assert [m.source for m in mounts] == [
        str(node / "data/packages"), str(node / "etc"), str(node / "data/packages/new/x")
    ]  # fmt: skip
    assert (node / "data/packages/new/x").is_dir()


def test_a_symlink_loop_on_the_node_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to("/b")
    (tmp_path / "b").symlink_to("a")

    with pytest.raises(ContainerConfigError, match="too many levels of symbolic links"):
        resolve_in_root(tmp_path, "/a/x")
    assert resolve_in_root(tmp_path, "/") == tmp_path
    assert resolve_in_root(tmp_path, "/../x/./y/..") == tmp_path / "x"


@pytest.mark.parametrize(
    ("volume", "link"),
    [
        ({"hostPath": {"path": "/var/lib/x"}}, "/etc"),  # the node's /etc
        ({"hostPath": {"path": "/var/lib/x"}}, "../../../etc"),
        ({"emptyDir": {}}, "/etc"),  # this machine's /etc
    ],
    ids=["host-path-absolute", "host-path-relative", "empty-dir"],
)
async def test_a_sub_path_whose_link_leads_out_of_its_volume_is_refused(
    tmp_path: Path, volume: dict[str, Any], link: str
) -> None:
    folder = tmp_path / ("node/var/lib/x" if "hostPath" in volume else "pod/volumes/v")
    (folder / "real").mkdir(parents=True)
    (folder / "inside").symlink_to("real")
    (folder / "out").symlink_to(link)
    (tmp_path / "node/etc").mkdir(parents=True)
    volumes = [{"name": "v", **volume}]
    context = _context(tmp_path, volumes)
    inside = {"volumeMounts": [{"name": "v", "mountPath": "/a", "subPath": "inside/f"}]}

    [mount] = await container_mounts(context, inside, _no_apiserver)

    assert Path(mount.source) == (folder / "real/f").resolve()
    out = {"volumeMounts": [{"name": "v", "mountPath": "/b", "subPath": "out/shadow"}]}
    with pytest.raises(ContainerConfigError, match="subpath 'out/shadow' is not within the"):
        await container_mounts(context, out, _no_apiserver)
    assert not (tmp_path / "node/etc/shadow").exists()


_NAMES = st.sampled_from(["a", "b", "c", "..", "."])
_TARGETS = st.lists(_NAMES, min_size=1, max_size=4).map("/".join)
_PLACES = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3).map("/".join)


_CHROOTED_REALPATH = "import os, sys; os.chroot(sys.argv[1]); print(os.path.realpath(sys.argv[2]))"


def _realpath_in_chroot(root: Path, path: str) -> str:
    """``path`` resolved by ``os.path.realpath`` in a process chrooted at ``root``."""
    argv = [sys.executable, "-c", _CHROOTED_REALPATH, str(root), path]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.skipif(os.geteuid() != 0, reason="the reference resolves in a chroot")
@settings(max_examples=50, deadline=None)
@given(
    folders=st.lists(_PLACES, max_size=4),
    links=st.dictionaries(_PLACES, st.tuples(st.booleans(), _TARGETS), max_size=5),
    path=_TARGETS,
)
@example(folders=["a"], links={"a/a": (True, "b")}, path="a/a/c")  # absolute, deep
@example(folders=["a/b"], links={"a/b/c": (False, "../../../../b")}, path="a/b/c/..")
@example(folders=[], links={"a": (False, "a/b")}, path="a")  # a loop
def test_resolving_in_the_root_is_resolving_in_a_chroot_of_it(
    folders: list[str], links: dict[str, tuple[bool, str]], path: str
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder).resolve()
        for made in folders:
            (root / made).mkdir(parents=True, exist_ok=True)
        for where, (absolute, target) in sorted(links.items()):
            link = root / where
            if link.parent.is_dir() and not os.path.lexists(link):
                link.symlink_to(("/" if absolute else "") + target)
        try:
            found = resolve_in_root(root, "/" + path)
        except ContainerConfigError:
            return  # a loop: realpath gives up on those differently
        assert found.is_relative_to(root)
        inside = "/" + str(found.relative_to(root)) if found != root else "/"
        assert inside == _realpath_in_chroot(root, "/" + path)
