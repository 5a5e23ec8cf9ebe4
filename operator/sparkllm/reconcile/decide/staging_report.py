"""What model staging reports: the status summary, the Start column, ModelStaged, a hold.

Why apart from ``decide/staging.py``: the step decides Jobs node by node; this module
turns the nodes' entries into the words a person reads (``kubectl get icl``, the
condition, the replica's message) and maps a stage's failure reason (``staging.plan``,
the command's) to the condition's and Events' reason. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from sparkllm.api import ConditionType, Reason
from sparkllm.api.staging_status import StagingGroupStatus, StagingNodeStatus
from sparkllm.kube.kinds import JSON
from sparkllm.reconcile.decide.status import condition
from sparkllm.staging.plan import StageReason, StageState

FAILED_PREFIX: Final = "model staging failed"
# A running stage Job whose pod cannot start (staging_seen.blocked_reason): the node's
# message, and the replica's hold message names it, until someone acts (no failure: the
# Job starts once the Secret exists, the image pulls, ...).
BLOCKED_PREFIX: Final = "the staging pod cannot start: "
# A stage's failure reason (staging.plan, the command's) as the condition's and Event's.
FAILURE_REASONS: Final[Mapping[StageReason, Reason]] = {
    StageReason.UNAUTHORIZED: Reason.UNAUTHORIZED,
    StageReason.NOT_FOUND: Reason.NOT_FOUND,
    StageReason.DISK_FULL: Reason.DISK_FULL,
    StageReason.HASH_MISMATCH: Reason.HASH_MISMATCH,
    StageReason.CONNECTION_LOST: Reason.CONNECTION_LOST,
    StageReason.VERIFICATION_FAILED: Reason.VERIFICATION_FAILED,
    StageReason.INVALID_SOURCE: Reason.INVALID_SOURCE,
    StageReason.PEER_UNAVAILABLE: Reason.PEER_UNAVAILABLE,
}


def hold_message(nodes: Sequence[StagingNodeStatus]) -> str | None:
    """Why the replica waits, or None when every node is Ready."""
    failed = [n for n in nodes if n.stage == StageState.FAILED.value]
    if failed:
        first = failed[0]
        return (
            f"{FAILED_PREFIX} on node {first.node}: {first.reason}: {first.message or ''}"
        ).rstrip(": ")
    if all(n.stage == StageState.READY.value for n in nodes):
        return None
    waiting = f"model staging: {summary([StagingGroupStatus(replica=0, nodes=tuple(nodes))])}"
    blocked = [
        f"node {n.node}: {n.message}"
        for n in nodes
        if n.stage != StageState.READY.value and (n.message or "").startswith(BLOCKED_PREFIX)
    ]
    return "; ".join([waiting, *blocked])


def summary(groups: Sequence[StagingGroupStatus]) -> str:
    """The printer column: ``2/3 nodes, 41%``; a failure's reason and node; ``3/3 nodes``."""
    nodes = [n for g in groups for n in g.nodes]
    failed = [n for n in nodes if n.stage == StageState.FAILED.value]
    if failed:
        return f"Failed: {failed[0].reason} on {failed[0].node}"[:128]
    ready = sum(n.stage == StageState.READY.value for n in nodes)
    if not nodes or ready == len(nodes):
        return f"{ready}/{len(nodes)} nodes"
    total = max((n.bytes_total or 0 for n in nodes), default=0)
    if not total:
        return f"{ready}/{len(nodes)} nodes"
    done = sum(total if n.stage == StageState.READY.value else n.bytes_done or 0 for n in nodes)
    return f"{ready}/{len(nodes)} nodes, {min(100, done * 100 // (total * len(nodes)))}%"


def start_column(groups: Sequence[StagingGroupStatus]) -> str:
    """The Start printer column while a group stages, one word as the column's other
    values: ``Staging:2/3:41%`` (nodes staged of all, bytes done), or
    ``StagingFailed:HashMismatch:spark-a1``. The same column, not a new one: an object
    without a source prints as it always did."""
    nodes = [n for g in groups for n in g.nodes]
    failed = [n for n in nodes if n.stage == StageState.FAILED.value]
    if failed:
        return f"StagingFailed:{failed[0].reason}:{failed[0].node}"
    text = summary(groups)
    counted, _, percent = text.partition(" nodes")
    return f"Staging:{counted}" + (f":{percent.lstrip(', ')}" if percent else "")


def staged_condition(
    groups: Sequence[StagingGroupStatus], holds: Mapping[int, str], *, generation: int
) -> JSON:
    """ModelStaged: True when every group is Ready; False Staging, or the failure's reason;
    Unknown while no replica is placed on a group (nothing staged, nothing to say True of)."""
    kind = ConditionType.MODEL_STAGED
    failed = [n for g in groups for n in g.nodes if n.stage == StageState.FAILED.value]
    if failed:
        first = failed[0]
        message = "; ".join(holds.values()) or f"{first.node}: {first.reason}"
        reason = failure_reason(first.reason)
        return condition(kind, status=False, reason=reason, message=message, generation=generation)
    if holds:
        message = "; ".join(f"replica {r}: {m}" for r, m in sorted(holds.items()))
        return condition(
            kind, status=False, reason=Reason.STAGING, message=message, generation=generation
        )
    count = sum(len(g.nodes) for g in groups)
    if not count:  # scaled to 0, or no group placed (NodeGroupInUse, none free): not "staged"
        message = "no replica is placed on a node group: nothing is staged yet"
        return condition(
            kind, status=None, reason=Reason.VERIFICATION_PENDING, message=message,
            generation=generation,
        )  # fmt: skip
    message = f"every replica's node group holds a verified copy ({count} nodes)"
    return condition(
        kind, status=True, reason=Reason.STAGED, message=message, generation=generation
    )


def failure_reason(text: str | None) -> Reason:
    """The condition's and Event's reason for a node's failure reason (status text);
    StageFailed when the pod failed without saying why."""
    known = {stage.value: reason for stage, reason in FAILURE_REASONS.items()}
    return known.get(text or "", Reason.STAGE_FAILED)
