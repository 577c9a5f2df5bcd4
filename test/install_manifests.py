"""The install manifests as the install tests see them: kustomize output and Helm's render.

Shared by test/unit/install and test/integration/install (importable because pytest puts the
folder of test/conftest.py on sys.path). Rendering uses the real tools: kubectl's built-in
kustomize (Debian's kubectl 1.20 from hack/kubectl.sh, the oldest kustomize the manifests
support, plus the control plane's kubectl and the machine's own) and the Helm v4 engine of the
``helm-python-sdk`` package. Objects go to the control plane as written, with the kubectl built
beside it (its release).
"""

from __future__ import annotations

import asyncio
import copy
import json
import shutil
import subprocess
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuctrl.testing import default_assets_dir

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "config"
CHART = CONFIG / "helm" / "gpuctrl"
NAMESPACE = "gpuctrl"
# Labels Helm charts conventionally add (and kustomize output does not carry).
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance")

Obj = dict[str, Any]


@cache
def debian_kubectl() -> Path:
    """Debian's kubectl 1.20 (kustomize v2.0.3), unpacked by hack/kubectl.sh on first use."""
    done = subprocess.run(
        ["bash", str(REPO / "hack" / "kubectl.sh")], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"hack/kubectl.sh failed: {done.stderr}")
    return Path(done.stdout.strip())


def cluster_kubectl() -> Path:
    """The kubectl of the control plane's release, built with its binaries."""
    return default_assets_dir() / "kubectl"


def kubectls() -> list[Path]:
    """Every kubectl to build config/ with: Debian's 1.20, the control plane's, and the
    machine's own if it has one."""
    found = [debian_kubectl(), cluster_kubectl()]
    other = shutil.which("kubectl")
    if other is not None and all(Path(other).resolve() != k.resolve() for k in found):
        found.append(Path(other))
    return found


def kustomize(folder: Path, kubectl: Path | None = None) -> list[Obj]:
    """``kubectl kustomize folder`` parsed into objects (in kustomize's order)."""
    done = subprocess.run(
        [str(kubectl or debian_kubectl()), "kustomize", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def helm_render(
    values: dict[str, Any] | None = None, *, namespace: str = NAMESPACE, name: str = "gpuctrl"
) -> list[Obj]:
    """The chart's templates rendered by Helm's engine with ``values``, as objects.

    Raises ``helm_python.HelmValuesError`` when the values fail ``values.schema.json``.
    """
    helm = pytest.importorskip(
        "helm_python", reason="the chart tests need `make test`'s helm extra"
    )
    with helm.Chart.load(str(CHART)) as chart:
        rendered = chart.render(values or {}, name=name, namespace=namespace)
    objects: list[Obj] = []
    for path in sorted(rendered):
        if path.endswith(".yaml"):
            objects += [doc for doc in yaml.safe_load_all(rendered[path]) if doc]
    return objects


def helm_crds() -> list[Obj]:
    """The chart's crds/ folder, as Helm loads it."""
    helm = pytest.importorskip(
        "helm_python", reason="the chart tests need `make test`'s helm extra"
    )
    with helm.Chart.load(str(CHART)) as chart:
        return [yaml.safe_load(crd["data"]) for crd in chart.crds]


def key(obj: Obj) -> tuple[str, str, str, str]:
    """(apiVersion, kind, namespace, name): what identifies an object in a cluster."""
    meta = obj["metadata"]
    return (obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])


def by_key(objects: Iterable[Obj]) -> dict[tuple[str, str, str, str], Obj]:
    """``objects`` by `key`; fails on a duplicate."""
    found: dict[tuple[str, str, str, str], Obj] = {}
    for obj in objects:
        assert key(obj) not in found, f"duplicate {key(obj)}"
        found[key(obj)] = obj
    return found


def without_helm_labels(obj: Obj) -> Obj:
    """A copy of ``obj`` without `HELM_LABELS` on its metadata (pod templates carry none)."""
    out = copy.deepcopy(obj)
    labels = out["metadata"].get("labels", {})
    for label in HELM_LABELS:
        labels.pop(label, None)
    return out


def documents(path: Path) -> list[Obj]:
    """The objects of a YAML stream file."""
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


# Kinds whose CRDs the install brings: applied once those are Established.
CUSTOM = {"ClusterPolicy", "PodPolicy"}
CRD = "CustomResourceDefinition"


async def kubectl(kubeconfig: Path, *args: str, stdin: str = "", check: bool = True) -> str:
    """Run the control plane's kubectl against it; stdout (stderr too when not ``check``)."""
    process = await asyncio.create_subprocess_exec(
        str(cluster_kubectl()),
        f"--kubeconfig={kubeconfig}",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate(stdin.encode())
    if check:
        assert process.returncode == 0, f"kubectl {' '.join(args)}: {err.decode()}"
    return out.decode() + ("" if check else err.decode())


def stream(objects: list[Obj]) -> str:
    """``objects`` as one YAML stream."""
    return yaml.safe_dump_all(objects, sort_keys=False)


async def install(kubeconfig: Path, objects: list[Obj]) -> None:
    """Server-side apply ``objects`` with an admin's ``kubeconfig``: everything but the CRDs'
    objects first, those once the CRDs are Established."""
    first = [o for o in objects if o["kind"] not in CUSTOM]
    apply = ("apply", "--server-side", "--field-manager=gpuctrl-install", "-f", "-")
    await kubectl(kubeconfig, *apply, stdin=stream(first))
    await kubectl(
        kubeconfig, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"
    )
    custom = [o for o in objects if o["kind"] in CUSTOM]
    if custom:
        await kubectl(kubeconfig, *apply, stdin=stream(custom))


async def uninstall(kubeconfig: Path, objects: list[Obj]) -> None:
    """Delete the ClusterPolicy first (the operands go with it), then the install."""
    custom = [o for o in objects if o["kind"] in CUSTOM]
    if custom:
        await kubectl(
            kubeconfig, "delete", "--ignore-not-found", "--wait", "-f", "-", stdin=stream(custom)
        )
    rest = [o for o in objects if o["kind"] not in CUSTOM]
    delete = ("delete", "--ignore-not-found", "--wait", "--timeout=120s", "-f", "-")
    await kubectl(kubeconfig, *delete, stdin=stream([o for o in rest if o["kind"] != CRD]))
    # A CRD's deletion can take minutes on its own: while the watch cache of its objects
    # re-initializes, the apiserver's CRD finalizer cannot list them ("could not list
    # instances: storage is (re)initializing") and retries with backoff (seen here twice in
    # 120 s; operator-framework/operator-controller#1437 waits 5 minutes for it).
    crds = ("delete", "--ignore-not-found", "--wait", "--timeout=300s", "-f", "-")
    try:
        await kubectl(kubeconfig, *crds, stdin=stream([o for o in rest if o["kind"] == CRD]))
    except AssertionError as error:  # say what each CRD left still waits for
        found = json.loads(await kubectl(kubeconfig, "get", "crd", "-o", "json"))["items"]
        waiting = {
            crd["metadata"]["name"]: (
                crd["metadata"].get("finalizers"),
                [
                    (c["type"], c.get("message"))
                    for c in crd.get("status", {}).get("conditions", ())
                ],
            )
            for crd in found
        }
        raise AssertionError(f"{error}; CRDs left: {waiting}") from error
