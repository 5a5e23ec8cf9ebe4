"""``status.engines``: per replica, the image digest and SGLang version each rank runs.

Why beside the condition: ``ImagesConsistent`` says in words whether every rank of a
replica runs one build; tools (and the user checking a digest split) need each rank's
pulled digest (the pod's ``imageID``), the version its own SGLang reported (the
``launch-check`` init container) and its model copy's digest (``verify-model``) as fields,
and the image the operator pinned the replica to after a split (``pinnedImage``), which
later passes keep rendering until spec.engine.image changes.
"""

from typing import Annotated, Final

from pydantic import Field, StringConstraints

from sparkllm.api.common import NodeName
from sparkllm.api.rules import ApiModel

MAX_RANKS: Final = 64
MAX_REPLICAS: Final = 64
ImageText = Annotated[str, StringConstraints(max_length=512)]


class EngineRankStatus(ApiModel):
    """One rank's engine build, as its pod reported it."""

    rank: int = Field(ge=0, description="rank is the rank's index in its replica.")
    node: NodeName | None = Field(default=None, description="node runs the rank's pod.")
    image_id: ImageText | None = Field(
        default=None,
        alias="imageID",
        description="imageID is the image the node pulled, by digest "
        "(the pod's status.initContainerStatuses[launch-check].imageID, else the engine's).",
    )
    sglang_version: Annotated[str, StringConstraints(max_length=64)] | None = Field(
        default=None,
        description="sglangVersion is what the image's own SGLang reported in the launch check.",
    )
    model_digest: Annotated[str, StringConstraints(max_length=64)] | None = Field(
        default=None,
        description="modelDigest is the start of the model copy's digest verify-model "
        "computed (ModelVerified compares it across every rank of every replica).",
    )


class ReplicaEngineStatus(ApiModel):
    """One replica's ranks' builds, and the image it is pinned to, if any."""

    replica: int = Field(ge=0, description="replica is the replica's index.")
    pinned_image: ImageText | None = Field(
        default=None,
        description="pinnedImage is spec.engine.image pinned to one digest (image@sha256:...) "
        "after the replica's ranks pulled different ones; every rank runs it until "
        "spec.engine.image changes.",
    )
    ranks: tuple[EngineRankStatus, ...] = Field(
        default=(), max_length=MAX_RANKS, description="ranks are the replica's ranks seen."
    )


__all__ = ["MAX_REPLICAS", "EngineRankStatus", "ReplicaEngineStatus"]
