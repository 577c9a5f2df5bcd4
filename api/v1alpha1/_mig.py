"""The mig section: how MIG devices are advertised to Kubernetes."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from api.v1alpha1._base import ApiModel

__all__ = ["MIGSpec", "MIGStrategy"]

MIGStrategy = Literal["none", "single", "mixed"]


class MIGSpec(ApiModel):
    """NVIDIA's ``mig`` section: its strategy reaches the device plugin as ``MIG_STRATEGY``.

    ``single``: every GPU of a node is split the same way and its MIG devices are advertised as
    ``nvidia.com/gpu``; ``mixed``: each MIG profile is its own resource
    (``nvidia.com/mig-1g.5gb``); ``none``: MIG devices are not advertised. NVIDIA's default is
    ``single``.
    """

    strategy: MIGStrategy = Field(
        default="single", description="none, single or mixed (NVIDIA's mig.strategy)."
    )
