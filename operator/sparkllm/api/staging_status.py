"""``status.modelStaging``: where each node's copy of ``spec.model.source`` is.

Why in status: a download of ~170 GB takes many minutes, and the person waiting wants the
bytes, the rate and the time left per node, and on a failure the reason (Unauthorized,
NotFound, DiskFull, HashMismatch, ...) without reading pod logs. ``summary`` is the
``kubectl get icl`` column (``2/3 nodes, 41%``). Written only when a source is set.
"""

from typing import Annotated, Final, Literal

from pydantic import Field, StringConstraints

from sparkllm.api.common import NodeName
from sparkllm.api.engine_status import MAX_REPLICAS
from sparkllm.api.rules import ApiModel

MAX_GROUP_NODES: Final = 64
NodeStageName = Literal["Pending", "Downloading", "Copying", "Verifying", "Ready", "Failed"]


class StagingNodeStatus(ApiModel):
    """One node's stage, from its staging pod's latest progress record."""

    node: NodeName = Field(description="node is the node the copy is made on.")
    rank: int = Field(ge=0, le=MAX_GROUP_NODES, description="rank is the node's rank.")
    stage: NodeStageName = Field(
        description="stage is Pending, Downloading (from the source), Copying (from a "
        "peer), Verifying, Ready or Failed."
    )
    source_node: NodeName | None = Field(
        default=None,
        description="sourceNode is the node copied from; absent on the node that downloads.",
    )
    bytes_done: int | None = Field(default=None, ge=0, description="bytesDone so far.")
    bytes_total: int | None = Field(
        default=None, ge=0, description="bytesTotal to fetch (the source's sizes)."
    )
    rate_bytes_per_second: float | None = Field(
        default=None, ge=0, description="rateBytesPerSecond since the stage began."
    )
    eta_seconds: float | None = Field(
        default=None, ge=0, description="etaSeconds left at that rate."
    )
    reason: Annotated[str, StringConstraints(max_length=64)] | None = Field(
        default=None, description="reason a Failed stage failed (the Event's reason)."
    )
    message: Annotated[str, StringConstraints(max_length=1024)] | None = Field(
        default=None, description="message says what failed, naming the file or host."
    )
    job: Annotated[str, StringConstraints(max_length=63)] | None = Field(
        default=None, description="job is the staging Job of this attempt."
    )


Digest = Annotated[str, StringConstraints(max_length=16)]


class StagingGroupStatus(ApiModel):
    """One replica's node group."""

    replica: int = Field(ge=0, le=MAX_REPLICAS, description="replica is the replica's index.")
    running_digest: Digest | None = Field(
        default=None,
        description="runningDigest is the digest of the copy every rank pod of the replica "
        "mounts: the current digest, or the one before while the replica rolls over to a "
        "new revision (it serves on its old copy meanwhile); absent while its pods differ "
        "or do not run.",
    )
    bytes_freed: int | None = Field(
        default=None,
        ge=0,
        description="bytesFreed by the clean Jobs on the group's nodes, once every replica "
        "and the gateway run the current digest (older copies removed, the one before "
        "kept).",
    )
    nodes: tuple[StagingNodeStatus, ...] = Field(
        default=(),
        max_length=MAX_GROUP_NODES,
        description="nodes are the group's nodes in the plan's order (the downloader first).",
    )


class ModelStagingStatus(ApiModel):
    """The copies of ``spec.model.source`` on every replica's nodes."""

    digest: Digest = Field(
        description="digest names the source and target staged (a new source, a new digest)."
    )
    summary: Annotated[str, StringConstraints(max_length=128)] = Field(
        description="summary is the printer column: staged nodes of all, and the bytes "
        "done (e.g. '2/3 nodes, 41%'), or the failure's reason and node."
    )
    groups: tuple[StagingGroupStatus, ...] = Field(
        default=(), max_length=MAX_REPLICAS, description="groups are the replicas' node groups."
    )
