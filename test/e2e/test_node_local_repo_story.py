"""Issue 15, "Node-local repository", end to end: `gpuctrl manager` as a process on a local
cluster, a ClusterPolicy whose driver takes its packages from repositories on the nodes' own
disks (``repoConfig.nodeLocalPaths``), one repo ConfigMap for a mixed cluster, and two
simulated GPU nodes (ubuntu and rhel) whose folders hold those repositories (the rpm one
through an absolute symbolic link to a data disk, as sites lay them out).

Each OS's driver DaemonSet pod, as the kubelet ran it, mounts exactly the node folder its own
package manager's file refers to, read-only at the same path, and no other listed folder. A
process-backed probe - the driver pod itself with only its command swapped (the driver image
is not here) - runs in a bubblewrap sandbox with those same volumes and mounts: it follows the
``file://`` URI of the mounted repository file, reads every file of the repository through
the mount (hashes equal the node's), sees a read-only mount and gets "Read-only file system"
when it writes there or into the repository file, and finds the other listed folders absent
although the node has them. Then a hostile ConfigMap edit (a ``file://`` URI outside
``nodeLocalPaths``) is refused: the driver keeps its last good DaemonSets and pods.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from e2e_stack import (
    CONFIG_MAPS,
    DAEMON_SETS,
    PODS,
    POLICIES,
    conditions,
    container_log,
    is_ready,
    managed_cluster,
    pods_of,
    policy_ready,
)

from gpuctrl.runtime import Client
from gpuctrl.testing import (
    BEHAVIOR_ANNOTATION,
    ControlPlane,
    SimulatedKubelet,
    SimulatedNode,
    eventually,
)

pytestmark = pytest.mark.slow

NAMESPACE = "gpuctrl"
DRIVER = "nvidia-driver-ctr"
APT_REPO = "/opt/local-packages"
RPM_REPO = "/srv/rpm-repo"
UNUSED = "/srv/site-tools"  # listed, but no repository file refers into it
REPO_CONFIG = "local-package-repository"
SOURCES = "local-packages.sources"
REPO_FILE = "local-packages.repo"
REPOS = {
    SOURCES: f"Types: deb\nURIs: file://{APT_REPO}\nSuites: ./\n"
    f"Signed-By: {APT_REPO}/keyring.gpg\n",
    REPO_FILE: f"[local-packages]\nname=Packages on the node image\nbaseurl=file://{RPM_REPO}\n"
    f"gpgcheck=1\ngpgkey=file://{RPM_REPO}/RPM-GPG-KEY-local\n",
}
# Every node's image has all three folders (one image for the site); each OS's driver must
# mount only the one its package manager's file names.
NODE_FILES = {
    f"{APT_REPO}/Packages": b"Package: hello\nVersion: 2.10-3\nFilename: ./hello.deb\n",
    f"{APT_REPO}/hello.deb": bytes(range(256)) * 4,
    f"{APT_REPO}/keyring.gpg": b"\x99\x01\x0d-not-a-real-key",
    f"{RPM_REPO}/repodata/repomd.xml": b"<repomd><data type='primary'/></repomd>\n",
    f"{RPM_REPO}/hello-2.12-1.el9.x86_64.rpm": b"\xed\xab\xee\xdb" + bytes(512),
    f"{RPM_REPO}/RPM-GPG-KEY-local": b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n",
    f"{UNUSED}/README": b"site tools, not a repository\n",
    "/etc/os-release": b"ID=placeholder\n",
}
# The site keeps the rpm repository on a data disk: on every node /srv/rpm-repo is an absolute
# symbolic link there, which the kubelet follows on the node's own disk.
LINKS = {RPM_REPO: "/data/rpm-mirror"}
# (os_id, version) -> (its DaemonSet, where its repo key is mounted, the folder it must mount)
DRIVERS = {
    ("ubuntu", "22.04"): (
        "gpuctrl-driver-ubuntu22.04",
        f"/etc/apt/sources.list.d/{SOURCES}",
        APT_REPO,
    ),
    ("rhel", "9.4"): ("gpuctrl-driver-rhel9.4", f"/etc/yum.repos.d/{REPO_FILE}", RPM_REPO),
}
POLICY_NAME = "node-local-repo"
POLICY = {
    "apiVersion": "gpuctrl.io/v1alpha1",
    "kind": "ClusterPolicy",
    "metadata": {"name": POLICY_NAME},
    "spec": {
        "driver": {
            "repoConfig": {
                "configMapName": REPO_CONFIG,
                "nodeLocalPaths": [APT_REPO, RPM_REPO, UNUSED],
            }
        },
        "toolkit": {"enabled": False},
        "validator": {"enabled": False},
        "devicePlugin": {"enabled": False},
    },
}
# The probe's process: reads the repository through the mounted file's first file:// URI,
# shows the mount's options, tries to write into the repository and the repository file, and
# says which of its arguments exist.
PROBE = r"""
set -u
file=$1; shift
echo "file $(sha256sum < "$file" | cut -d ' ' -f 1)"
dir=$(grep -o 'file://[^[:space:]]*' "$file" | head -n 1 | sed 's|^file://||')
echo "repository $dir"
cd "$dir" && find . -type f | LC_ALL=C sort | while read -r f; do
  echo "hash $(sha256sum "$f")"
done
awk -v d="$dir" '$5 == d { print "mount " $5 " " $6 }' /proc/self/mountinfo
if out=$(touch "$dir/written-by-the-driver" 2>&1); then
  echo "write allowed"
else
  echo "write refused: $out"
fi
if out=$( { echo "deb file:///var/lib/kubelet ./" >> "$file"; } 2>&1 ); then
  echo "file-write allowed"
else
  echo "file-write refused: $out"
fi
for path in "$@"; do
  if [ -e "$path" ]; then echo "present $path"; else echo "absent $path"; fi
done
"""


@pytest_asyncio.fixture(loop_scope="session")
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[ControlPlane, Client]]:
    """A cluster of this test's own with gpuctrl's CRDs and ``gpuctrl manager`` running."""
    async with managed_cluster(tmp_path / "manager.log") as cluster:
        yield cluster


def _on_disk(root: Path, path: str) -> Path:
    """Where ``path`` of the node whose ``/`` is ``root`` is stored (through `LINKS`)."""
    for link, target in LINKS.items():
        if path == link or path.startswith(link + "/"):
            path = target + path.removeprefix(link)
    return root / path.lstrip("/")


def _seeded_nodes(folder: Path) -> list[SimulatedNode]:
    nodes = []
    for os_id, version in DRIVERS:
        name = f"local-repo-{os_id}"
        root = folder / name
        for path, content in NODE_FILES.items():
            _on_disk(root, path).parent.mkdir(parents=True, exist_ok=True)
            _on_disk(root, path).write_bytes(content)
        for link, target in LINKS.items():
            (root / link.lstrip("/")).symlink_to(target)
        nodes.append(SimulatedNode(name=name, os_id=os_id, os_version=version, root=root))
    return nodes


def _host_paths(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The pod's hostPath volumes by name."""
    return {v["name"]: v["hostPath"] for v in pod["spec"]["volumes"] if "hostPath" in v}


def _driver_mounts(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The driver container's mounts by mount path."""
    container = next(c for c in pod["spec"]["containers"] if c["name"] == DRIVER)
    return {m["mountPath"]: m for m in container["volumeMounts"]}


def _probe_pod(driver_pod: dict[str, Any], args: list[str]) -> dict[str, Any]:
    """The driver pod as the kubelet ran it - same node, volumes, mounts, account, security
    context - with the probe for a command, run for real once, and none of its labels or
    owners (so the DaemonSet neither adopts nor counts it)."""
    spec = copy.deepcopy(driver_pod["spec"])
    container = next(c for c in spec["containers"] if c["name"] == DRIVER)
    container["command"] = ["sh", "-c", PROBE, "probe"]
    container["args"] = args
    spec["containers"] = [container]
    spec["restartPolicy"] = "Never"
    node = spec["nodeName"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"repo-probe-{node}",
            "namespace": NAMESPACE,
            "annotations": {BEHAVIOR_ANNOTATION: json.dumps({DRIVER: {"process": True}})},
        },
        "spec": spec,
    }


async def _probe_log(admin: Client, name: str) -> str:
    pod = await admin.get(PODS, name, NAMESPACE)
    phase = pod.get("status", {}).get("phase")
    assert phase in ("Succeeded", "Failed"), pod.get("status")
    log = await container_log(admin, NAMESPACE, name, DRIVER)
    assert phase == "Succeeded", log
    return log


def _expected_hashes(root: Path, folder: str) -> list[str]:
    """What the probe prints for the node's repository at ``folder``."""
    base = _on_disk(root, folder)
    files = sorted(str(p.relative_to(base)) for p in base.rglob("*") if p.is_file())
    return [f"{hashlib.sha256((base / f).read_bytes()).hexdigest()}  ./{f}" for f in files]


def _said(log: str) -> dict[str, list[str]]:
    """The probe's lines by their first word."""
    said: dict[str, list[str]] = {}
    for line in log.splitlines():
        word, _, rest = line.partition(" ")
        said.setdefault(word, []).append(rest)
    return said


def _check_driver_pod(pod: dict[str, Any], daemonset: str, repo_file: str, folder: str) -> None:
    """The pod spec the kubelet ran: the node's folder, type Directory, read-only at the same
    path; the repository file read-only; no other listed folder."""
    assert is_ready(pod), pod.get("status")
    assert pod["metadata"]["ownerReferences"][0]["name"] == daemonset
    host_paths = _host_paths(pod)
    mounts = _driver_mounts(pod)
    local = [n for n, h in host_paths.items() if h["path"] in (APT_REPO, RPM_REPO, UNUSED)]
    assert len(local) == 1, host_paths
    assert host_paths[local[0]] == {"path": folder, "type": "Directory"}
    assert mounts[folder]["name"] == local[0]
    assert mounts[folder]["readOnly"] is True
    assert mounts[repo_file]["readOnly"] is True


def _check_probe(log: str, node: SimulatedNode, repo_file: str, folder: str) -> None:
    """The probe read the node's repository through the mounted file's URI and a read-only
    mount, could not write, and saw none of the other listed folders."""
    assert node.root is not None
    said = _said(log)
    key = repo_file.rsplit("/", 1)[1]
    assert said["file"] == [hashlib.sha256(REPOS[key].encode()).hexdigest()], log
    assert said["repository"] == [folder], log
    assert said["hash"] == _expected_hashes(node.root, folder), log
    [mount] = said["mount"]
    assert mount.split()[0] == folder, log
    assert "ro" in mount.split()[1].split(","), log
    [refusal] = said["write"]
    assert refusal.startswith("refused: "), log
    assert "Read-only file system" in refusal, log
    assert not (_on_disk(node.root, folder) / "written-by-the-driver").exists()
    [refusal] = said["file-write"]
    assert refusal.startswith("refused: "), log
    assert "Read-only file system" in refusal, log
    assert "present" not in said, log
    assert said["absent"] == sorted({APT_REPO, RPM_REPO, UNUSED} - {folder}), log


async def _check_hostile_edit_changes_nothing(admin: Client) -> None:
    """A repository outside nodeLocalPaths in the ConfigMap: both conditions say so, and the
    driver keeps its DaemonSets and pods as they were."""
    daemonsets = {d["metadata"]["name"]: d for d in await admin.list(DAEMON_SETS, NAMESPACE)}
    pods = await pods_of(admin, NAMESPACE, DRIVER)
    hostile = {**REPOS, SOURCES: REPOS[SOURCES].replace(APT_REPO, "/var/lib/kubelet")}
    await admin.merge_patch(CONFIG_MAPS, REPO_CONFIG, {"data": hostile}, NAMESPACE)

    async def refused() -> None:
        found = conditions((await admin.get(POLICIES, POLICY_NAME))["status"])
        repo, driver = found["RepoConfigReady"], found["DriverReady"]
        assert (repo["status"], repo["reason"]) == ("False", "InvalidRepoConfig"), repo
        assert f"key {SOURCES!r}" in repo["message"], repo
        assert "/var/lib/kubelet is inside no" in repo["message"], repo
        assert (driver["status"], driver["reason"]) == ("False", "InvalidRepoConfig"), driver

    # The driver controller has judged the edited ConfigMap once DriverReady says so.
    await eventually(refused, within=30)
    after = {d["metadata"]["name"]: d for d in await admin.list(DAEMON_SETS, NAMESPACE)}
    assert {n: d["metadata"]["generation"] for n, d in after.items()} == {
        n: d["metadata"]["generation"] for n, d in daemonsets.items()
    }
    now = await pods_of(admin, NAMESPACE, DRIVER)
    assert sorted(p["metadata"]["uid"] for p in now) == sorted(p["metadata"]["uid"] for p in pods)


async def test_driver_pods_read_the_nodes_repositories_through_read_only_mounts(
    cluster: tuple[ControlPlane, Client], tmp_path: Path
) -> None:
    plane, admin = cluster
    nodes = _seeded_nodes(tmp_path / "nodes")
    async with SimulatedKubelet(plane.kubeconfig, nodes) as kubelet:
        config_map = {"metadata": {"name": REPO_CONFIG, "namespace": NAMESPACE}, "data": REPOS}
        await admin.create(CONFIG_MAPS, config_map)
        await admin.create(POLICIES, POLICY)
        status = await policy_ready(admin, POLICY_NAME, within=90)
        repo_ready = conditions(status)["RepoConfigReady"]
        assert (repo_ready["status"], repo_ready["reason"]) == ("True", "RepoConfigWarnings")
        unused = f"no enabled repository of ConfigMap {REPO_CONFIG!r} refers to {UNUSED}"
        assert f"nodeLocalPaths[2]: {unused}" in repo_ready["message"]

        driver_pods = {p["spec"]["nodeName"]: p for p in await pods_of(admin, NAMESPACE, DRIVER)}
        assert sorted(driver_pods) == sorted(n.name for n in kubelet.nodes)
        for node in kubelet.nodes:
            _check_driver_pod(driver_pods[node.name], *DRIVERS[(node.os_id, node.os_version)])

        # The probes: the driver pods' own volumes and mounts, run for real.
        for node in kubelet.nodes:
            _, repo_file, folder = DRIVERS[(node.os_id, node.os_version)]
            others = sorted({APT_REPO, RPM_REPO, UNUSED} - {folder})
            await admin.create(PODS, _probe_pod(driver_pods[node.name], [repo_file, *others]))
        for node in kubelet.nodes:
            _, repo_file, folder = DRIVERS[(node.os_id, node.os_version)]
            name = f"repo-probe-{node.name}"
            log = await eventually(lambda n=name: _probe_log(admin, n), within=60)
            _check_probe(log, node, repo_file, folder)
            await admin.delete(PODS, name, NAMESPACE)

        # Hostile input from whoever edits the ConfigMap.
        await _check_hostile_edit_changes_nothing(admin)
