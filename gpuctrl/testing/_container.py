"""What a process-backed container gets, as a kubelet gives it: environment, volumes, identity.

`container_env` resolves the spec's ``envFrom`` and ``env`` (values with ``$(VAR)``
references, ``fieldRef`` to the pod's and node's fields, ``configMapKeyRef`` and
``secretKeyRef`` read through the apiserver); `expand` expands ``$(VAR)`` in command and args.
`container_mounts` turns the container's ``volumeMounts`` into host paths: ``hostPath`` from the
node's own folder (``<node root>/<path>``, its symbolic links followed inside that folder as
the node would, created for the types that create), ConfigMaps and Secrets written as files
(always read-only), ``projected`` volumes of ServiceAccount tokens, ConfigMaps, Secrets and
downward API fields (the ``kube-api-access-*`` volume that ServiceAccount admission adds to
every pod), ``emptyDir`` a folder of the pod's; ``readOnly`` and ``subPath`` are respected (a
``subPath`` whose links lead out of its volume is refused, as by a kubelet).
`service_account` gives a pod that ServiceAccount admission did not give that volume (a control
plane without it) the standard ServiceAccount folder plus a kubeconfig for ``$KUBECONFIG``, and
every pod the variables that locate the apiserver. Tokens come from the TokenRequest API, bound
to the pod. Anything a kubelet would
refuse raises `ContainerConfigError` with a kubelet-like message; the
container then shows CreateContainerConfigError.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gpuctrl.runtime import ApiError

from ._bwrap import Mount
from ._kubeconfig import write_kubeconfig

__all__ = [
    "SERVICE_ACCOUNT_DIR",
    "ApiRequest",
    "Cluster",
    "ContainerConfigError",
    "PodContext",
    "container_env",
    "container_mounts",
    "default_path",
    "expand",
    "python_roots",
    "resolve_in_root",
    "service_account",
]

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
_TOKEN_SECONDS = 24 * 3600
_REFERENCE = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")
_FIELD = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")
_MAX_LINKS = 40  # the kernel's limit before ELOOP
_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

ApiRequest = Callable[[str, str, Any], Awaitable[Any]]
"""Send one request (method, path, body) to the apiserver; errors raise `ApiError`."""


class ContainerConfigError(Exception):
    """What keeps a container from being created; the message is the kubelet's reason."""


@dataclass(frozen=True)
class Cluster:
    """Where the processes reach the apiserver: its URL and CA certificate (PEM)."""

    server: str
    ca_pem: bytes


@dataclass(frozen=True)
class PodContext:
    """A pod as its kubelet starts a container of it."""

    pod: Mapping[str, Any]
    node_name: str
    node_root: Path  # the node's own folder: hostPath volumes live under it
    pod_dir: Path  # the kubelet's folder for this pod (volumes, identity)
    host_ip: str
    pod_ip: str
    log_dir: Path  # its containers' output, kept after the pod is gone

    @property
    def namespace(self) -> str:
        """The pod's namespace."""
        return str(self.pod["metadata"]["namespace"])


def expand(text: str, env: Mapping[str, str]) -> str:
    """`text` with each ``$(VAR)`` of a defined variable replaced and ``$$`` made ``$``, as
    the kubelet expands command, args and env values (undefined references stay as written)."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "$"
        return env.get(name, match.group(0))

    return _REFERENCE.sub(replace, text)


async def container_env(
    context: PodContext, container: Mapping[str, Any], request: ApiRequest
) -> dict[str, str]:
    """The container's environment from its spec (``envFrom`` first, then ``env`` in order)."""
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        env.update(await _env_from(context, source, request))
    for variable in container.get("env") or []:
        name = variable["name"]
        if "valueFrom" in variable:
            value = await _value_from(context, variable["valueFrom"], request)
            if value is None:  # an optional reference that is not there
                continue
        else:
            value = expand(variable.get("value", ""), env)
        env[name] = value
    return env


def default_path() -> str:
    """``PATH`` for a container whose spec sets none: the venv's ``bin`` (``gpuctrl``) first."""
    return f"{Path(sys.prefix) / 'bin'}:{_SYSTEM_PATH}"


def python_roots() -> list[str]:
    """The host folders the sandbox needs to run this Python and this project's code."""
    project = Path(__file__).resolve().parents[2]
    return [sys.prefix, sys.base_prefix, str(project)]


async def _env_from(
    context: PodContext, source: Mapping[str, Any], request: ApiRequest
) -> dict[str, str]:
    prefix = source.get("prefix", "")
    for field, kind in (("configMapRef", "configmap"), ("secretRef", "secret")):
        if field in source:
            reference = source[field]
            data = await _read(context, kind, reference["name"], request)
            if data is None:
                if reference.get("optional"):
                    return {}
                raise ContainerConfigError(f'{kind} "{reference["name"]}" not found')
            return {prefix + key: value for key, value in data.items()}
    raise ContainerConfigError(f"envFrom without configMapRef or secretRef: {dict(source)}")


async def _value_from(
    context: PodContext, source: Mapping[str, Any], request: ApiRequest
) -> str | None:
    if "fieldRef" in source:
        return _field(context, source["fieldRef"]["fieldPath"])
    for field, kind in (("configMapKeyRef", "configmap"), ("secretKeyRef", "secret")):
        if field in source:
            reference = source[field]
            data = await _read(context, kind, reference["name"], request)
            if data is None or reference["key"] not in data:
                if reference.get("optional"):
                    return None
                if data is None:
                    raise ContainerConfigError(f'{kind} "{reference["name"]}" not found')
                raise ContainerConfigError(
                    f"couldn't find key {reference['key']} in {kind.capitalize()} "
                    f"{context.namespace}/{reference['name']}"
                )
            return data[reference["key"]]
    raise ContainerConfigError(f"valueFrom not supported by the simulated kubelet: {dict(source)}")


def _field(context: PodContext, path: str) -> str:
    metadata, spec = context.pod["metadata"], context.pod["spec"]
    fields = {
        "metadata.name": metadata["name"],
        "metadata.namespace": metadata["namespace"],
        "metadata.uid": metadata["uid"],
        "spec.nodeName": context.node_name,
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.hostIP": context.host_ip,
        "status.podIP": context.pod_ip,
        "status.podIPs": context.pod_ip,
    }
    if path in fields:
        return str(fields[path])
    match = _FIELD.match(path)
    if match is not None:
        return str((metadata.get(match.group(1)) or {}).get(match.group(2), ""))
    raise ContainerConfigError(f"unsupported fieldRef fieldPath {path!r}")


async def _read(
    context: PodContext, kind: str, name: str, request: ApiRequest
) -> dict[str, str] | None:
    """The data of ConfigMap or Secret `name` (Secrets decoded), None when there is none."""
    path = f"/api/v1/namespaces/{context.namespace}/{kind}s/{name}"
    try:
        obj = await request("GET", path, None)
    except ApiError as error:
        if error.status == 404:
            return None
        raise
    if kind == "secret":
        return {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
    return dict(obj.get("data") or {})


async def container_mounts(
    context: PodContext, container: Mapping[str, Any], request: ApiRequest
) -> list[Mount]:
    """The container's ``volumeMounts`` as sandbox mounts of host paths, made ready."""
    volumes = {v["name"]: v for v in context.pod["spec"].get("volumes") or []}
    mounts = []
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount["name"])
        if volume is None:
            raise ContainerConfigError(f'volume "{mount["name"]}" not found in the pod')
        source, read_only = await _volume_source(context, volume, request)
        if mount.get("subPath"):
            source = _sub_path(context.node_root, volume, source, mount)
        mounts.append(
            Mount(str(source), mount["mountPath"], read_only or bool(mount.get("readOnly")))
        )
    return mounts


def _sub_path(
    node_root: Path, volume: Mapping[str, Any], source: Path, mount: Mapping[str, Any]
) -> Path:
    """The ``subPath`` of ``mount`` inside the volume at ``source`` (made when missing), its
    links followed where they live (a hostPath's on the node, the others on this machine);
    one that leads out of the volume is refused, as a kubelet refuses it."""
    sub_path = str(mount["subPath"])
    if "hostPath" in volume:
        path = resolve_in_root(node_root, f"{volume['hostPath']['path']}/{sub_path}")
    else:
        path = Path(os.path.realpath(source / sub_path))
        source = Path(os.path.realpath(source))
    if not path.is_relative_to(source):
        raise ContainerConfigError(
            f'failed to prepare subPath for volumeMount "{mount["name"]}": subpath '
            f"{sub_path!r} is not within the volume"
        )
    if not path.exists():
        path.mkdir(parents=True)
    return path


async def _volume_source(
    context: PodContext, volume: Mapping[str, Any], request: ApiRequest
) -> tuple[Path, bool]:
    """The host path of `volume` and whether it is read-only whatever the mount says."""
    folder = context.pod_dir / "volumes" / volume["name"]
    if "hostPath" in volume:
        return _host_path(context.node_root, volume["hostPath"]), False
    if "emptyDir" in volume:
        folder.mkdir(parents=True, exist_ok=True)
        return folder, False
    if "projected" in volume:
        projected = volume["projected"]
        files: dict[str, tuple[bytes, int | None]] = {}
        for source in projected.get("sources") or []:
            files.update(await _projection(context, source, request))
        _write_volume(folder, files, projected.get("defaultMode", 0o644))
        return folder, True
    for field, kind, key in (
        ("configMap", "configmap", "name"),
        ("secret", "secret", "secretName"),
    ):
        if field in volume:
            source = volume[field]
            files = await _object_files(context, kind, source[key], source, request)
            _write_volume(folder, files, source.get("defaultMode", 0o644))
            return folder, True
    kinds = sorted(set(volume) - {"name"})
    raise ContainerConfigError(f"volume type {kinds} not supported by the simulated kubelet")


async def _projection(
    context: PodContext, source: Mapping[str, Any], request: ApiRequest
) -> dict[str, tuple[bytes, int | None]]:
    """The files one source of a ``projected`` volume contributes (path -> content, mode)."""
    if "serviceAccountToken" in source:
        projection = source["serviceAccountToken"]
        audience = projection.get("audience")
        expiration = projection.get("expirationSeconds", 3600)
        token = await _token(context, [audience] if audience else [], expiration, request)
        return {projection["path"]: (token.encode(), None)}
    if "downwardAPI" in source:
        items = source["downwardAPI"].get("items") or []
        return {
            item["path"]: (
                _field(context, item["fieldRef"]["fieldPath"]).encode(),
                item.get("mode"),
            )
            for item in items
        }
    for field, kind in (("configMap", "configmap"), ("secret", "secret")):
        if field in source:
            reference = source[field]
            return await _object_files(context, kind, reference["name"], reference, request)
    kinds = sorted(source)
    raise ContainerConfigError(f"projected source {kinds} not supported by the simulated kubelet")


async def _object_files(
    context: PodContext, kind: str, name: str, source: Mapping[str, Any], request: ApiRequest
) -> dict[str, tuple[bytes, int | None]]:
    """The files ConfigMap or Secret ``name`` gives a volume as ``source`` (its ``items`` and
    ``optional``) asks; a missing one that is not optional raises `ContainerConfigError`."""
    data = await _read(context, kind, name, request)
    if data is None and not source.get("optional"):
        raise ContainerConfigError(f'{kind} "{name}" not found')
    return _items(data or {}, source, kind)


def _host_path(node_root: Path, host_path: Mapping[str, Any]) -> Path:
    path = resolve_in_root(node_root, str(host_path["path"]))
    kind = host_path.get("type", "")
    if kind in ("", "DirectoryOrCreate") and not path.exists():
        path.mkdir(parents=True)
    elif kind == "FileOrCreate" and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    checks: dict[str, Callable[[Path], bool]] = {
        "Directory": Path.is_dir,
        "DirectoryOrCreate": Path.is_dir,
        "File": Path.is_file,
        "FileOrCreate": Path.is_file,
        "Socket": Path.is_socket,
        "CharDevice": Path.is_char_device,
        "BlockDevice": Path.is_block_device,
    }
    check = checks.get(kind)
    if check is not None and not check(path):
        raise ContainerConfigError(
            f"hostPath type check failed: {host_path['path']} is not a {kind}"
        )
    return path


def resolve_in_root(root: Path, path: str) -> Path:
    """Where absolute ``path`` of a node whose ``/`` is ``root`` leads: each symbolic link on
    the way followed inside ``root`` (an absolute target starts again from ``root``, ``..``
    stops at it), as the node's kubelet follows links on its own disk - never out onto this
    machine's. Components that do not exist are kept as written. A loop (more than 40 links)
    raises `ContainerConfigError`."""
    parts = [part for part in path.split("/") if part not in ("", ".")]
    resolved: list[str] = []
    links = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            resolved = resolved[:-1]
            continue
        here = root.joinpath(*resolved, part)
        if not here.is_symlink():
            resolved.append(part)
            continue
        links += 1
        if links > _MAX_LINKS:
            raise ContainerConfigError(f"hostPath {path}: too many levels of symbolic links")
        target = os.readlink(here)
        if target.startswith("/"):
            resolved = []
        parts = [p for p in target.split("/") if p not in ("", ".")] + parts
    return root.joinpath(*resolved)


def _items(
    data: Mapping[str, str], source: Mapping[str, Any], kind: str
) -> dict[str, tuple[bytes, int | None]]:
    """The keys of a ConfigMap or Secret as files (``items`` picks and renames them)."""
    items = source.get("items") or [{"key": key, "path": key} for key in data]
    files: dict[str, tuple[bytes, int | None]] = {}
    for item in items:
        if item["key"] not in data:
            if source.get("optional"):
                continue
            raise ContainerConfigError(f"{kind} references non-existent key {item['key']}")
        files[item["path"]] = (data[item["key"]].encode(), item.get("mode"))
    return files


def _write_volume(
    folder: Path, files: Mapping[str, tuple[bytes, int | None]], default_mode: int
) -> None:
    """``folder`` made anew holding ``files`` (a file without a mode of its own gets
    ``default_mode``)."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for path, (content, mode) in files.items():
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        target.chmod(default_mode if mode is None else mode)


async def service_account(
    context: PodContext, cluster: Cluster, request: ApiRequest
) -> tuple[Mount | None, dict[str, str]] | None:
    """The variables that locate the apiserver and, for a pod that mounts nothing at
    `SERVICE_ACCOUNT_DIR` (no ServiceAccount admission), the standard ServiceAccount folder
    (token, ca.crt, namespace, kubeconfig) as a mount; None when the pod opts out of a token."""
    spec = context.pod["spec"]
    if spec.get("automountServiceAccountToken") is False:
        return None
    address = urlsplit(cluster.server)
    env = {
        "KUBERNETES_SERVICE_HOST": address.hostname or "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(address.port or 443),
    }
    if _mounts_service_account(spec):
        return None, env
    name = spec.get("serviceAccountName") or "default"
    token = await _token(context, [], _TOKEN_SECONDS, request)
    folder = context.pod_dir / "serviceaccount"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "token").write_text(token)
    (folder / "ca.crt").write_bytes(cluster.ca_pem)
    (folder / "namespace").write_text(context.namespace)
    user = f"system:serviceaccount:{context.namespace}:{name}"
    ca_inside = Path(SERVICE_ACCOUNT_DIR) / "ca.crt"
    write_kubeconfig(
        folder / "kubeconfig", server=cluster.server, ca_file=ca_inside, user=user, token=token
    )
    for file in folder.iterdir():
        file.chmod(0o644)  # a non-root process of the container reads them too
    env["KUBECONFIG"] = f"{SERVICE_ACCOUNT_DIR}/kubeconfig"
    return Mount(str(folder), SERVICE_ACCOUNT_DIR, read_only=True), env


def _mounts_service_account(spec: Mapping[str, Any]) -> bool:
    """Whether a container of the pod mounts a volume at `SERVICE_ACCOUNT_DIR` (ServiceAccount
    admission adds that mount to every container, with its ``kube-api-access-*`` volume)."""
    return any(
        mount.get("mountPath", "").rstrip("/") == SERVICE_ACCOUNT_DIR
        for kind in ("initContainers", "containers")
        for container in spec.get(kind) or []
        for mount in container.get("volumeMounts") or []
    )


async def _token(
    context: PodContext, audiences: list[str], expiration_seconds: int, request: ApiRequest
) -> str:
    """A token of the pod's ServiceAccount bound to the pod (TokenRequest API); no audiences
    means the apiserver's own."""
    metadata = context.pod["metadata"]
    name = context.pod["spec"].get("serviceAccountName") or "default"
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": audiences,
            "expirationSeconds": expiration_seconds,
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": metadata["name"],
                "uid": metadata["uid"],
            },
        },
    }
    path = f"/api/v1/namespaces/{context.namespace}/serviceaccounts/{name}/token"
    try:
        response = await request("POST", path, body)
    except ApiError as error:
        raise ContainerConfigError(f'serviceaccount "{name}": {error}') from error
    return str(response["status"]["token"])
