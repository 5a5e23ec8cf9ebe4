"""The staging plan: which node downloads, who copies from whom, and each node's stage.

Why a plan: a node group's nodes are joined by direct links (the documents' ring of three
200 GbE links), which are far faster than any node's way out to the source. So exactly one
node downloads, and the rest copy node to node over the addresses NetworkVerified checked
(issue 31). Pure: a function of the group's nodes, their addresses and the spec; no I/O,
no clock. Phase 2 (the operator) renders one Job per node from :class:`StagePlan` and
folds each node's progress into :class:`NodeStage` with :func:`advance`.

Fan-out orders, over the nodes in ring order starting at the downloader:

- ``Chain``: each node copies from the one before it. One link per copy, every link used
  once; the only order a ring of direct links without a switch supports for every group
  size, since a node reaches only its two neighbours.
- ``Tree``: each finished node serves two more (breadth first): fewer waves
  (log2 instead of n-1) where every node reaches every other (a switch, or a ring of three).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Final, Literal

from sparkllm.errors import SpecError

TREE_FAN_OUT: Final = 2


class StageState(StrEnum):
    """Where one node's copy is: the per-node state machine's states."""

    PENDING = "Pending"
    DOWNLOADING = "Downloading"
    COPYING = "Copying"
    VERIFYING = "Verifying"
    READY = "Ready"
    FAILED = "Failed"


class StageReason(StrEnum):
    """Why a stage failed: the reasons status and Events carry (CamelCase)."""

    UNAUTHORIZED = "Unauthorized"  # the source refused the credentials (401/403)
    NOT_FOUND = "NotFound"  # repository, revision, bucket, object or URL missing (404)
    DISK_FULL = "DiskFull"  # not enough free space at the target, up front or while writing
    HASH_MISMATCH = "HashMismatch"  # a file's sha256/ETag/size differs, after one re-fetch
    CONNECTION_LOST = "ConnectionLost"  # the source or peer went away, retries exhausted
    VERIFICATION_FAILED = "VerificationFailed"  # verify-model refused the staged copy
    INVALID_SOURCE = "InvalidSource"  # the source answered something unusable
    PEER_UNAVAILABLE = "PeerUnavailable"  # the node to copy from serves no finished copy


Event = Literal["start", "verify", "ready", "fail"]


@dataclass(frozen=True, slots=True)
class NodeStage:
    """One node's stage: its state, and the reason and message when it failed."""

    node: str
    state: StageState = StageState.PENDING
    reason: StageReason | None = None
    message: str = ""


@dataclass(frozen=True, slots=True)
class Copy:
    """One transfer: ``target`` fetches the model from ``source`` (None: from the origin)."""

    target: str
    source: str | None
    source_address: str | None
    wave: int


@dataclass(frozen=True, slots=True)
class StagePlan:
    """The group's transfers, wave by wave: wave 0 the download, then the copies."""

    downloader: str
    transfers: tuple[Copy, ...]

    def copies(self) -> tuple[Copy, ...]:
        """The node-to-node transfers (every transfer but the download)."""
        return tuple(t for t in self.transfers if t.source is not None)

    def transfer_of(self, node: str) -> Copy:
        """The transfer that brings the model to ``node``."""
        return next(t for t in self.transfers if t.target == node)

    def waves(self) -> int:
        return max(t.wave for t in self.transfers) + 1


def plan_group(
    *,
    nodes: Sequence[str],
    addresses: Mapping[str, str],
    staging_node: str | None = None,
    fan_out: Literal["Chain", "Tree"] = "Chain",
) -> StagePlan:
    """The plan for one node group (``nodes`` in rank order, which is ring order).

    ``staging_node`` downloads when it is in the group, else the rank-0 node does. Every
    node that serves a copy needs an address; raises SpecError naming what is missing.
    """
    if not nodes or len(set(nodes)) != len(nodes):
        raise SpecError(f"a staging plan needs distinct nodes, got {list(nodes)}")
    start = nodes.index(staging_node) if staging_node in nodes else 0
    ring = [*nodes[start:], *nodes[:start]]
    if fan_out == "Chain":
        sources: list[str | None] = [None, *ring[:-1]]
        waves = list(range(len(ring)))
    else:
        sources = [None] + [ring[(i - 1) // TREE_FAN_OUT] for i in range(1, len(ring))]
        waves = [0] * len(ring)
        for i in range(1, len(ring)):
            waves[i] = waves[(i - 1) // TREE_FAN_OUT] + 1
    missing = sorted({s for s in sources if s is not None and not addresses.get(s)})
    if missing:
        raise SpecError(f"no address for node(s) that serve a copy: {', '.join(missing)}")
    transfers = tuple(
        Copy(
            target=node,
            source=source,
            source_address=addresses[source] if source is not None else None,
            wave=wave,
        )
        for node, source, wave in zip(ring, sources, waves, strict=True)
    )
    return StagePlan(downloader=ring[0], transfers=transfers)


_NEXT: Final[Mapping[tuple[StageState, Event], StageState]] = {
    (StageState.PENDING, "start"): StageState.DOWNLOADING,  # replaced by COPYING for copies
    (StageState.DOWNLOADING, "verify"): StageState.VERIFYING,
    (StageState.COPYING, "verify"): StageState.VERIFYING,
    (StageState.VERIFYING, "ready"): StageState.READY,
}


def advance(
    stage: NodeStage,
    event: Event,
    *,
    copying: bool = False,
    reason: StageReason | None = None,
    message: str = "",
) -> NodeStage:
    """``stage`` after ``event``: Pending -> Downloading/Copying -> Verifying -> Ready.

    ``fail`` (with a reason) moves any unfinished state to Failed; ``start`` from Failed
    is a retry (back to Downloading/Copying). An event that does not apply leaves the
    stage as it is: progress reports arrive more than once, and a level-based reconcile
    replays them.
    """
    if event == "fail":
        if stage.state is StageState.READY:
            return stage
        if reason is None:
            raise ValueError("a failure needs a reason")
        return replace(stage, state=StageState.FAILED, reason=reason, message=message)
    if event == "start" and stage.state in (StageState.PENDING, StageState.FAILED):
        state = StageState.COPYING if copying else StageState.DOWNLOADING
        return NodeStage(node=stage.node, state=state)
    following = _NEXT.get((stage.state, event))
    return stage if following is None else replace(stage, state=following)


def group_ready(stages: Sequence[NodeStage]) -> bool:
    """True when every node of the group holds a verified copy: ranks may start."""
    return bool(stages) and all(s.state is StageState.READY for s in stages)
