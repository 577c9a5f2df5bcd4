"""The install manifests as the install tests see them: kustomize output and Helm's render.

Shared by test/unit/install and test/integration/install (importable because pytest puts the
folder of test/conftest.py on sys.path). Rendering uses the real tools: kubectl's built-in
kustomize (Debian's kubectl 1.20 from hack/kubectl.sh, plus a newer kubectl when the machine
has one) and the Helm v4 engine of the ``helm-python-sdk`` package.
"""

from __future__ import annotations

import asyncio
import copy
import shutil
import subprocess
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

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


def kubectls() -> list[Path]:
    """Every kubectl to build config/ with: Debian's 1.20, and the machine's own if it has one."""
    found = [debian_kubectl()]
    other = shutil.which("kubectl")
    if other is not None and Path(other).resolve() != found[0].resolve():
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


def for_apiserver_1_20(objects: Iterable[Obj]) -> list[Obj]:
    """``objects`` with the API versions kube-apiserver 1.20 lacks translated to its own.

    The manifests target Kubernetes 1.27+; the local control plane is 1.20.2. Only
    PodDisruptionBudget needs it (``policy/v1`` is 1.21+; ``policy/v1beta1`` has the same
    fields for what the manifests use).
    """
    out = []
    for obj in objects:
        obj = copy.deepcopy(obj)
        if (obj["apiVersion"], obj["kind"]) == ("policy/v1", "PodDisruptionBudget"):
            obj["apiVersion"] = "policy/v1beta1"
        out.append(obj)
    return out


def documents(path: Path) -> list[Obj]:
    """The objects of a YAML stream file."""
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


# Kinds whose CRDs the install brings: applied once those are Established.
CUSTOM = {"ClusterPolicy", "PodPolicy"}


async def kubectl(kubeconfig: Path, *args: str, stdin: str = "", check: bool = True) -> str:
    """Run Debian's kubectl 1.20 against the control plane; stdout (stderr too on failure)."""
    process = await asyncio.create_subprocess_exec(
        str(debian_kubectl()),
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
    objects = for_apiserver_1_20(objects)
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
    objects = for_apiserver_1_20(objects)
    custom = [o for o in objects if o["kind"] in CUSTOM]
    if custom:
        await kubectl(
            kubeconfig, "delete", "--ignore-not-found", "--wait", "-f", "-", stdin=stream(custom)
        )
    rest = [o for o in objects if o["kind"] not in CUSTOM]
    delete = ("delete", "--ignore-not-found", "--wait", "--timeout=120s", "-f", "-")
    await kubectl(kubeconfig, *delete, stdin=stream(rest))
