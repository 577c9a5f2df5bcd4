"""The cdi section: whether GPUs reach containers through the Container Device Interface."""

from __future__ import annotations

from pydantic import Field

from api.v1alpha1._base import ApiModel

__all__ = ["CDISpec"]


class CDISpec(ApiModel):
    """CDI, on by default as in NVIDIA's chart (``cdi.enabled``).

    Enabled: NVIDIA's installer writes the CDI spec of the management containers to
    ``/var/run/cdi`` and sets the NVIDIA runtime to CDI mode, the toolkit agent turns on
    containerd's own CDI support (``enable_cdi``) and leaves the default runtime alone, and the
    device plugin hands GPUs to containers as CDI devices (``cdi-annotations,cdi-cri``), so a
    pod that requests ``nvidia.com/gpu`` gets it without ``runtimeClassName``. Disabled: the
    legacy path, where the NVIDIA runtime is made containerd's default runtime (NVIDIA's
    installer's default) and the device plugin passes ``NVIDIA_VISIBLE_DEVICES``.
    """

    enabled: bool = Field(
        default=True,
        description="Give GPUs to containers as CDI devices (NVIDIA's cdi.enabled).",
    )
