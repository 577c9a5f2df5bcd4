"""Fields every operand section shares: image, pull settings, env, resources, args."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from api.v1alpha1._base import (
    MAX_LIST_ITEMS,
    ApiModel,
    EnvVar,
    ObjectName,
    PullPolicy,
    ResourceRequirements,
)
from api.v1alpha1._cel import Rule, cel_rules

__all__ = [
    "AGENT_REPOSITORY",
    "AGENT_VERSION",
    "Component",
    "Image",
    "ImageVersion",
    "image_reference",
]

# gpuctrl's own image, which runs the toolkit and validator agents.
AGENT_REPOSITORY = "ghcr.io/gpuctrl"
AGENT_VERSION = "0.1.0"

# An image's tag or sha256: digest. The whole reference is checked by `validate`, as the
# driver's tag gets the node's OS appended at render time.
ImageVersion = Annotated[
    str,
    Field(
        max_length=512,
        json_schema_extra=cel_rules(
            Rule(rule="self != ''", message="an image needs a version: a tag or a sha256: digest")
        ),
    ),
]


class Component(ApiModel):
    """An operand: where its image comes from and how its container runs.

    Subclasses set the defaults of ``repository``, ``image`` and ``version``; the image
    reference is ``repository/image:version``, or ``repository/image@sha256:...`` when
    ``version`` is a digest.
    """

    enabled: bool = Field(default=True, description="Whether gpuctrl deploys this operand.")
    repository: str = Field(description="Image registry and path, e.g. nvcr.io/nvidia.")
    image: str = Field(description="Image name.")
    version: ImageVersion = Field(description="Image tag, or a sha256: digest.")
    image_pull_policy: PullPolicy = Field(
        default="IfNotPresent", description="Pull policy of the image."
    )
    image_pull_secrets: list[ObjectName] = Field(
        default_factory=list,
        max_length=MAX_LIST_ITEMS,
        description="Secrets in the operator namespace used to pull.",
    )
    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=MAX_LIST_ITEMS,
        description="Extra environment variables.",
    )
    resources: ResourceRequirements | None = Field(
        default=None, description="Resources of the operand's containers."
    )
    args: list[str] = Field(
        default_factory=list, max_length=MAX_LIST_ITEMS, description="Extra container arguments."
    )


class Image(ApiModel):
    """An image named as NVIDIA's ClusterPolicy names one: ``repository/image:version``."""

    repository: str = Field(description="Image registry and path, e.g. nvcr.io/nvidia/k8s.")
    image: str = Field(description="Image name.")
    version: ImageVersion = Field(description="Image tag, or a sha256: digest.")


def image_reference(component: Component | Image, tag_suffix: str = "") -> str:
    """The image of ``component``; ``tag_suffix`` (``-ubuntu22.04``) extends a tag, not a digest."""
    base = f"{component.repository}/{component.image}" if component.repository else component.image
    if component.version.startswith("sha256:"):
        return f"{base}@{component.version}"
    return f"{base}:{component.version}{tag_suffix}"
