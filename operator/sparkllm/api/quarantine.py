"""``spec.restartPolicy.quarantine`` and the status it leads to: spare groups, quarantine.

A DGX Spark that runs out of unified memory can wedge: no OOM kill, the kubelet stops
posting, and the node needs a power cycle. A replica pinned to it would wait forever, and a
node that flaps would be restarted onto again and again. So a replica whose node fails
moves to a free, complete, healthy spare group at once (``status.replicaStatuses[].
lastFailover`` says from which group to which and why), and a node that failed a replica
more than ``maxNodeFailures`` times in ``windowSeconds`` — or whose heartbeat was lost
while its rank pod never reported an exit (a wedge) — is quarantined: no replica is
placed on it until it has been Ready for ``settleSeconds`` or an administrator lifts it
(annotation ``sparkllm.io/lift-quarantine: <node>[,<node>...]`` on the object). The
quarantine is this object's (its status), not the node's: it changes only where this
object's own replicas may go, among the groups its spec already names.
"""

from datetime import datetime
from typing import Annotated, Final

from pydantic import Field, StringConstraints

from sparkllm.api.common import NodeName
from sparkllm.api.rules import ApiModel

MAX_TRACKED_NODES: Final = 256  # status lists: at most every node of 16 groups of 16
MAX_FAILURE_TIMES: Final = 64


class QuarantineSpec(ApiModel):
    """When a failing node is kept from this object's replicas, and when it comes back."""

    max_node_failures: int = Field(
        default=2,
        ge=0,
        le=50,
        description="maxNodeFailures is how many failures a node may have: a node that "
        "failed a replica (NotReady, gone, or a rank pod that could not run there) more "
        "than this many times within "
        "windowSeconds is quarantined. Default 2; 0 (the first failure quarantines) to 50.",
    )
    window_seconds: int = Field(
        default=3600,
        ge=60,
        le=604_800,
        description="windowSeconds is the sliding window maxNodeFailures counts in. "
        "Default 3600; 60 to 604800 (a week).",
    )
    settle_seconds: int = Field(
        default=1800,
        ge=0,
        le=604_800,
        description="settleSeconds is how long a quarantined node must stay Ready: it is "
        "used again once it has been Ready this long without a break (or when lifted with "
        "the annotation "
        "sparkllm.io/lift-quarantine). Default 1800; 0 to 604800.",
    )


Why = Annotated[str, StringConstraints(max_length=1024)]
GroupKey = Annotated[str, StringConstraints(max_length=253)]


class QuarantinedNode(ApiModel):
    """One node no replica of this object is placed on, since when and why."""

    node: NodeName = Field(description="node is the quarantined node's name.")
    since: datetime = Field(description="since is when it was quarantined (RFC 3339).")
    reason: Why = Field(
        description="reason says why: the failures in the window, or a wedge (heartbeat "
        "lost while its rank pod never reported an exit)."
    )
    until: str | None = Field(
        default=None,
        max_length=256,
        description="until says what lifts it: Ready for settleSeconds, or the annotation.",
    )


class NodeFailures(ApiModel):
    """When one node failed a replica of this object, within the window."""

    node: NodeName = Field(description="node is the node that failed a replica.")
    times: tuple[datetime, ...] = Field(
        default=(),
        max_length=MAX_FAILURE_TIMES,
        description="times are its failures within restartPolicy.quarantine.windowSeconds.",
    )


class Failover(ApiModel):
    """A replica's move to a spare node group after a node of its group failed."""

    time: datetime = Field(description="time of the move (RFC 3339).")
    from_group: GroupKey = Field(alias="from", description="from is the group it left.")
    to_group: GroupKey = Field(alias="to", description="to is the spare group it moved to.")
    reason: Why = Field(description="reason is the failure that moved it.")
