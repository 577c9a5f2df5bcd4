"""What NVIDIA's container runtime adds to a process-backed container: the driver's nvidia-smi.

A container gets it when its pod's RuntimeClass has an NVIDIA handler (``nvidia``,
``nvidia-cdi``, ...), its ``NVIDIA_VISIBLE_DEVICES`` asks for devices (set, and not ``void``
or ``none``) and its ``NVIDIA_DRIVER_CAPABILITIES`` include ``utility`` (or ``all``; unset
means ``utility,compute``), as for the real runtime. The binary comes from the node's driver
root: a driver container's ``<node root>/run/nvidia/driver`` when it holds one, else the
node's own root; a node with neither gets nothing (the container then finds no nvidia-smi).
It is bound read-only at `NVIDIA_SMI` - ``/usr/local/bin``, where the real runtime uses
``/usr/bin``: a mount in the sandbox's ``/usr/bin`` would rebuild that folder entry by entry,
about a second per container start.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from gpuctrl.runtime import ApiError

from ._bwrap import Mount
from ._container import ApiRequest, PodContext

__all__ = ["NVIDIA_SMI", "nvidia_runtime_mounts", "wants_utilities"]

NVIDIA_SMI = "/usr/local/bin/nvidia-smi"
# Driver roots in the order the runtime's config names them: a driver container's, the host's.
_DRIVER_ROOTS = ("run/nvidia/driver", "")
_SMI_IN_ROOT = "usr/bin/nvidia-smi"
_NO_DEVICES = frozenset({"", "void", "none"})


def wants_utilities(env: Mapping[str, str]) -> bool:
    """Whether NVIDIA's runtime would inject the driver's utilities into a container with
    ``env``: devices requested and the ``utility`` capability (pure)."""
    if env.get("NVIDIA_VISIBLE_DEVICES", "").strip() in _NO_DEVICES:
        return False
    capabilities = env.get("NVIDIA_DRIVER_CAPABILITIES") or "utility,compute"
    return bool({"utility", "all"} & {c.strip() for c in capabilities.split(",")})


async def nvidia_runtime_mounts(
    context: PodContext, env: Mapping[str, str], request: ApiRequest
) -> list[Mount]:
    """The mounts NVIDIA's runtime would add to a container of ``context``'s pod with ``env``
    (empty when it would add none; see the module docstring)."""
    if not wants_utilities(env) or not await _nvidia_handler(context, request):
        return []
    smi = _driver_smi(context.node_root)
    return [] if smi is None else [Mount(str(smi), NVIDIA_SMI, read_only=True)]


async def _nvidia_handler(context: PodContext, request: ApiRequest) -> bool:
    """Whether the pod's RuntimeClass exists and its handler is one of NVIDIA's runtimes."""
    name = context.pod["spec"].get("runtimeClassName")
    if not name:
        return False
    try:
        runtime_class = await request("GET", f"/apis/node.k8s.io/v1/runtimeclasses/{name}", None)
    except ApiError as error:
        if error.status == 404:
            return False
        raise
    return str(runtime_class.get("handler", "")).startswith("nvidia")


def _driver_smi(node_root: Path) -> Path | None:
    """The driver's nvidia-smi on the node with folder ``node_root``, if it has one."""
    return next((p for r in _DRIVER_ROOTS if (p := node_root / r / _SMI_IN_ROOT).is_file()), None)
