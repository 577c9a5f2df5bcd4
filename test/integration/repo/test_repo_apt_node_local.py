"""A real apt installs from a node-local repository through the driver DaemonSet's mounts.

The node: a scratch folder holding a signed apt repository built from Debian's real ``hello``
package (``apt-get download``, ``dpkg-scanpackages``, ``apt-ftparchive release``, GnuPG with
a throw-away key, the public keyring inside the repository folder). The driver container: a
bubblewrap sandbox whose root is this machine's own Debian read-only (the image, with its
default sources left out as on an air-gapped image) plus exactly the mounts of the rendered
pod spec, laid out as the kubelet would - the ConfigMap volume's keys at their ``mountPath``
(``subPath``), each ``hostPath`` at its ``mountPath`` (type ``Directory`` must exist on the
node), read-only where the spec says so - with no network. In it run ``apt-get update`` and
``apt-get install --download-only hello``. Then the failing variants: without
``nodeLocalPaths``, with a ``Signed-By`` outside them, with a keyring of another key, with a
tampered ``Packages``; apt refuses each, and `check_repo_config` reported the first two.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from api.v1alpha1 import load_cluster_policy
from controllers.render import (
    ClusterFacts,
    ConfigMapFacts,
    NodeFacts,
    check_repo_config,
    render,
)

ROOT = Path(__file__).resolve().parents[3]
TOOLS = {
    "dpkg-scanpackages": "dpkg-dev",
    "gpg": "gnupg",
    "apt-ftparchive": "apt-utils",
    "bwrap": "bubblewrap",
}
REPOSITORY = "/opt/local-packages"  # the nodeLocalPaths entry, a folder of the node image
NAMESPACE = "gpuctrl"
CONTAINER = "nvidia-driver-ctr"
# apt's own state and cache go to a writable scratch folder inside the sandbox; apt's
# download sandbox user is root because the scratch folders belong to root alone.
APT_OPTIONS = (
    "-o",
    "Dir::State=/scratch/state",
    "-o",
    "Dir::Cache=/scratch/cache",
    "-o",
    "APT::Sandbox::User=root",
    "-o",
    "Debug::NoLocking=1",
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs Debian's apt-get as root")


@pytest.fixture(scope="module")
def tools() -> None:
    """The Debian tools the test needs, installed by the project's installer when missing."""
    missing = sorted({pkg for tool, pkg in TOOLS.items() if shutil.which(tool) is None})
    if missing:
        installer = ROOT / "hack" / "install-debian-packages.sh"
        subprocess.run(["bash", str(installer), *missing], check=True, timeout=600)


@pytest.fixture(scope="module")
def hello_deb(tools: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Debian's real ``hello`` package, downloaded with apt."""
    folder = tmp_path_factory.mktemp("download")
    download = ["apt-get", "-o", "APT::Sandbox::User=root", "download", "hello"]
    done = subprocess.run(download, cwd=folder, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:  # a fresh machine may not have read its package lists yet
        subprocess.run(["apt-get", "update", "-qq"], check=True, timeout=300)
        done = subprocess.run(download, cwd=folder, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"apt-get download hello failed: {done.stderr}"
    return next(folder.glob("hello_*.deb"))


@dataclass(frozen=True)
class Node:
    """A node's file system (``root``) with a signed repository at `REPOSITORY`."""

    root: Path
    gnupg: Path

    @property
    def repository(self) -> Path:
        return self.root / REPOSITORY.lstrip("/")

    def gpg(self, *args: str) -> None:
        env = {**os.environ, "GNUPGHOME": str(self.gnupg)}
        subprocess.run(["gpg", "--batch", "--quiet", *args], check=True, env=env, timeout=120)


def _sign_release(node: Node) -> None:
    repo = node.repository
    release = subprocess.run(
        ["apt-ftparchive", "release", "."], cwd=repo, capture_output=True, check=True, timeout=60
    )
    (repo / "Release").write_bytes(release.stdout)
    node.gpg("--yes", "--clearsign", "-o", str(repo / "InRelease"), str(repo / "Release"))
    node.gpg("--yes", "--detach-sign", "-o", str(repo / "Release.gpg"), str(repo / "Release"))


@pytest.fixture
def node(hello_deb: Path, tmp_path: Path) -> Iterator[Node]:
    """A node image with the repository baked in, as docs/air-gapped.md tells a site to build it."""
    found = Node(tmp_path / "node", tmp_path / "gnupg")
    found.gnupg.mkdir(mode=0o700)
    repo = found.repository
    repo.mkdir(parents=True)
    (found.root / "etc").mkdir()
    (found.root / "sys" / "devices" / "system").mkdir(parents=True)  # sysfs, on every node
    shutil.copy("/etc/os-release", found.root / "etc" / "os-release")
    shutil.copy(hello_deb, repo)
    found.gpg("--passphrase", "", "--quick-gen-key", "gpuctrl test <t@example.invalid>", "ed25519")
    found.gpg("--output", str(repo / "keyring.gpg"), "--export", "gpuctrl test")
    packages = subprocess.run(
        ["dpkg-scanpackages", "--multiversion", "."],
        cwd=repo,
        capture_output=True,
        check=True,
        timeout=60,
    )
    (repo / "Packages").write_bytes(packages.stdout)
    _sign_release(found)
    yield found
    env = {**os.environ, "GNUPGHOME": str(found.gnupg)}
    subprocess.run(["gpgconf", "--kill", "all"], env=env, check=False, timeout=60)


def _sources(signed_by: str = f"{REPOSITORY}/keyring.gpg") -> str:
    return f"Types: deb\nURIs: file://{REPOSITORY}\nSuites: ./\nSigned-By: {signed_by}\n"


def _policy_and_facts(sources: str, node_local_paths: list[str]) -> tuple[Any, ClusterFacts]:
    repo = {"configMapName": "local-package-repository", "nodeLocalPaths": node_local_paths}
    policy = load_cluster_policy({"spec": {"driver": {"repoConfig": repo}}})
    labels = {
        "nvidia.com/gpu.present": "true",
        "feature.node.kubernetes.io/system-os_release.ID": "debian",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "12",
    }
    facts = ClusterFacts(
        namespace=NAMESPACE,
        nodes=(NodeFacts(name="gpu-1", labels=labels),),
        config_maps=(
            ConfigMapFacts(name="local-package-repository", data={"local.sources": sources}),
        ),
    )
    return policy, facts


def _driver_pod(policy: Any, facts: ClusterFacts) -> dict[str, Any]:
    (daemonset,) = [
        o
        for o in render(policy, facts)
        if o["kind"] == "DaemonSet" and o["metadata"]["name"] == "gpuctrl-driver-debian12"
    ]
    return daemonset["spec"]["template"]["spec"]


class KubeletRefused(Exception):
    """The pod could not start on this node (a hostPath type check failed)."""


def _pod_mounts(pod: dict[str, Any], facts: ClusterFacts, node: Node, volumes: Path) -> list[str]:
    """bubblewrap arguments that mount the driver container's volumes as the kubelet would."""
    (container,) = [c for c in pod["containers"] if c["name"] == CONTAINER]
    by_name = {v["name"]: v for v in pod["volumes"]}
    args: list[str] = []
    for mount in container["volumeMounts"]:
        volume = by_name[mount["name"]]
        if "configMap" in volume:
            source = _config_map_volume(volume, facts, volumes)
        else:
            source = _host_path(volume["hostPath"], node)
        if mount.get("subPath"):
            source = source / mount["subPath"]
            assert source.exists(), f"kubelet: subPath {mount['subPath']} does not exist"
        args += ["--ro-bind" if mount.get("readOnly") else "--bind", str(source)]
        args.append(mount["mountPath"])
    return args


def _config_map_volume(volume: dict[str, Any], facts: ClusterFacts, volumes: Path) -> Path:
    config_map = facts.config_map(volume["configMap"]["name"])
    assert config_map is not None
    folder = volumes / volume["name"]
    folder.mkdir(parents=True, exist_ok=True)
    for key, text in config_map.data.items():
        (folder / key).write_text(text)
    return folder


def _host_path(host_path: dict[str, Any], node: Node) -> Path:
    path = node.root / host_path["path"].lstrip("/")
    kind = host_path.get("type", "")
    if kind == "Directory" and not path.is_dir():
        raise KubeletRefused(f"hostPath type check failed: {host_path['path']} is not a directory")
    if not path.exists():  # DirectoryOrCreate, and the runtime's default for an unset type
        path.mkdir(parents=True)
    return path


def _image() -> list[str]:
    """The driver image: this machine's Debian, read-only, without its default sources."""
    return [
        *("--ro-bind", "/usr", "/usr"),
        *("--symlink", "usr/bin", "/bin", "--symlink", "usr/sbin", "/sbin"),
        *("--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64"),
        *("--ro-bind", "/etc", "/etc"),
        *("--tmpfs", "/etc/apt/sources.list.d"),
        *("--ro-bind", "/var/lib/dpkg", "/var/lib/dpkg"),
        *("--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"),
    ]


def _apt_in_driver(pod: dict[str, Any], facts: ClusterFacts, node: Node, scratch: Path) -> str:
    """Run apt-get update and install --download-only hello in the driver container; return
    its output, raising AssertionError with the output when apt fails."""
    for folder in ("state", "cache"):
        (scratch / folder).mkdir(parents=True, exist_ok=True)
    sandbox = [
        "bwrap",
        "--unshare-all",
        "--die-with-parent",
        *_image(),
        *_pod_mounts(pod, facts, node, scratch / "volumes"),
        *("--bind", str(scratch / "state"), "/scratch/state"),
        *("--bind", str(scratch / "cache"), "/scratch/cache"),
    ]
    apt = " ".join(["apt-get", *APT_OPTIONS])
    script = f"{apt} update && {apt} install -y --download-only hello"
    done = subprocess.run(
        [*sandbox, "sh", "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    output = done.stdout + done.stderr
    if done.returncode != 0:
        raise AssertionError(output)
    return output


def _errors(policy: Any, facts: ClusterFacts) -> list[str]:
    problems = check_repo_config(policy, facts, now=datetime.now(UTC))
    return [p.message for p in problems if p.severity == "error"]


@pytest.mark.slow
def test_apt_installs_from_the_node_local_repository_through_the_rendered_mounts(
    node: Node, tmp_path: Path
) -> None:
    policy, facts = _policy_and_facts(_sources(), [REPOSITORY])
    assert check_repo_config(policy, facts, now=datetime.now(UTC)) == []
    pod = _driver_pod(policy, facts)
    output = _apt_in_driver(pod, facts, node, tmp_path / "scratch")
    assert "Get:1 file:/opt/local-packages ./ hello" in output
    assert "Download complete and in download only mode" in output
    assert "W:" not in output, output  # no unsigned or unverifiable repository
    lists = tmp_path / "scratch" / "state" / "lists"
    assert (lists / "_opt_local-packages_._InRelease").is_file()  # kept only once verified


@pytest.mark.slow
def test_without_node_local_paths_apt_cannot_see_the_repository(node: Node, tmp_path: Path) -> None:
    policy, facts = _policy_and_facts(_sources(), [])
    assert _errors(policy, facts) == [
        "ConfigMap 'local-package-repository' key 'local.sources' line 2: URIs "
        "'file:///opt/local-packages': the repository /opt/local-packages is inside no "
        "spec.driver.repoConfig.nodeLocalPaths entry, so the driver container cannot see it "
        "(add '/opt/local-packages' or a folder above it)",
        "ConfigMap 'local-package-repository' key 'local.sources' line 4: Signed-By "
        "'/opt/local-packages/keyring.gpg': the key file /opt/local-packages/keyring.gpg is "
        "inside no spec.driver.repoConfig.nodeLocalPaths entry, so the driver container cannot "
        "see it (add '/opt/local-packages' or a folder above it)",
    ]
    pod = _driver_pod(policy, facts)
    assert REPOSITORY not in [m["mountPath"] for m in pod["containers"][0]["volumeMounts"]]
    with pytest.raises(
        AssertionError,
        match=re.escape("'file:/opt/local-packages ./ Release' does not have a Release file"),
    ):
        _apt_in_driver(pod, facts, node, tmp_path / "scratch")


@pytest.mark.slow
def test_a_signed_by_outside_node_local_paths_fails_in_apt(node: Node, tmp_path: Path) -> None:
    keys = node.root / "opt" / "keys"  # on the node, but not a nodeLocalPaths entry
    keys.mkdir(parents=True)
    shutil.copy(node.repository / "keyring.gpg", keys / "keyring.gpg")
    policy, facts = _policy_and_facts(_sources("/opt/keys/keyring.gpg"), [REPOSITORY])
    assert _errors(policy, facts) == [
        "ConfigMap 'local-package-repository' key 'local.sources' line 4: Signed-By "
        "'/opt/keys/keyring.gpg': the key file /opt/keys/keyring.gpg is inside no "
        "spec.driver.repoConfig.nodeLocalPaths entry, so the driver container cannot see it "
        "(add '/opt/keys' or a folder above it)"
    ]
    with pytest.raises(AssertionError, match=r"NO_PUBKEY (.|\n)* InRelease' is not signed"):
        _apt_in_driver(_driver_pod(policy, facts), facts, node, tmp_path / "scratch")


@pytest.mark.slow
def test_a_keyring_of_another_key_fails_in_apt(node: Node, tmp_path: Path) -> None:
    # Beyond what check_repo_config can see: the path resolves, the key inside is wrong.
    node.gpg("--passphrase", "", "--quick-gen-key", "someone else <o@example.invalid>", "ed25519")
    node.gpg("--output", str(node.repository / "other.gpg"), "--export", "someone else")
    policy, facts = _policy_and_facts(_sources(f"{REPOSITORY}/other.gpg"), [REPOSITORY])
    assert _errors(policy, facts) == []
    with pytest.raises(AssertionError, match=r"NO_PUBKEY (.|\n)* InRelease' is not signed"):
        _apt_in_driver(_driver_pod(policy, facts), facts, node, tmp_path / "scratch")


@pytest.mark.slow
def test_a_tampered_packages_file_fails_in_apt(node: Node, tmp_path: Path) -> None:
    packages = node.repository / "Packages"
    packages.write_text(packages.read_text().replace("Version: ", "Version: 9:", 1))
    policy, facts = _policy_and_facts(_sources(), [REPOSITORY])
    assert _errors(policy, facts) == []
    with pytest.raises(
        AssertionError,
        match=re.escape("Failed to fetch file:/opt/local-packages/./Packages  Hash Sum mismatch"),
    ):
        _apt_in_driver(_driver_pod(policy, facts), facts, node, tmp_path / "scratch")


@pytest.mark.slow
def test_a_missing_node_folder_stops_the_pod_like_the_kubelet(node: Node, tmp_path: Path) -> None:
    policy, facts = _policy_and_facts(_sources(), [REPOSITORY])
    shutil.rmtree(node.repository)
    with pytest.raises(KubeletRefused, match="/opt/local-packages is not a directory"):
        _apt_in_driver(_driver_pod(policy, facts), facts, node, tmp_path / "scratch")
