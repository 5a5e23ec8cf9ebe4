"""Model staging as a reconcile step (``spec.model.source``): Jobs, holds, status, Events.

Why a step of its own: ranks must never start, or restart-loop, on a partial copy (issue
31), so every replica's node group is staged before its ranks run, and the step decides it
level-based from what the pass read — the staging Jobs of this object and each one's
latest progress record (``reads.read_staging``) — with no state of its own. Pure.

Per replica's node group, in ``staging.plan.plan_group``'s order:

- a node's **stage Job** is created once the node it copies from is Ready and serves
  (the downloader's at once); its outcome is the node's record: succeeded is Ready,
  failed is Failed with the reason of its last ``failed`` record;
- a Ready node with a successor still copying gets a **serve Job**; it is deleted once
  every node it serves is Ready or failed (the operator ends servers: it knows about
  retries, a server does not), and a successor's Job waits until its log says
  ``serving`` (a peer copy that finds no server fails at once, PeerUnavailable);
- a replica with no copy at all is held (its rank StatefulSets at 0 replicas, nothing
  starts) until every node of its group is Ready: ``holds`` names why, for
  ``replicas.plan_replica``. A replica that runs an older staged copy (a new revision:
  its StatefulSets' ``sparkllm.io/model-digest``, staging_copies.py) keeps serving on it
  and is rendered on the new copy (``digests``) once its group holds it: its spec hash
  changes and the rolling update restarts it, one replica at a time. The gateway and the
  Jobs mount the new copy once every group holds it (``gateway_digest``); once every pod
  runs it, the clean Jobs remove the copies older than the one before (staging_clean.py).

A failed stage stays failed (and stops no replica that has a copy): a spec change (a
new source or revision, a new digest and new Jobs, staged beside the old copy, which stays
on disk; the old source's Jobs are deleted) or ``sparkllm.io/restart=now`` (its failed
Jobs deleted, made again next pass) retries. A peer copy that failed PeerUnavailable is
retried without asking: it is the order's fault, not the user's. Events: StagingStarted
when a group's download Job is made, Staged when the group is Ready, a Warning with the
failure's reason once per failed attempt (the status remembers the Job it saw fail).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from sparkllm.api import ConditionType, InferenceCluster, Reason
from sparkllm.api.staging_status import ModelStagingStatus, StagingGroupStatus, StagingNodeStatus
from sparkllm.errors import SpecError
from sparkllm.kube.kinds import JSON
from sparkllm.reconcile.decide.actions import PendingEvent, Removal
from sparkllm.reconcile.decide.staging_clean import (
    decide_clean,
    roll_complete,
    with_clean_failures,
)
from sparkllm.reconcile.decide.staging_copies import LiveCopies
from sparkllm.reconcile.decide.staging_report import (
    BLOCKED_PREFIX,
    FAILED_PREFIX,
    failure_reason,
    hold_message,
    staged_condition,
    start_column,
    summary,
)
from sparkllm.reconcile.decide.staging_seen import StagingJob, job_removal
from sparkllm.reconcile.decide.status import condition
from sparkllm.render.model_staging import (
    render_staging_job,
    serve_args,
    stage_args,
    staging_digest,
    staging_job_name,
)
from sparkllm.render.product_image import ProductImage
from sparkllm.staging.plan import NodeStage, StagePlan, StageReason, StageState, advance, plan_group

POLL_SECONDS: Final = 2.0  # a pass while a stage runs: progress comes from logs, no watch


@dataclass(frozen=True)
class StagingOutcome:
    """What the step decided for this pass."""

    holds: Mapping[int, str] = field(default_factory=dict)  # replica -> its failed stage
    waits: Mapping[int, str] = field(default_factory=dict)  # replica -> its group still stages
    create_jobs: tuple[JSON, ...] = ()
    delete_jobs: tuple[Removal, ...] = ()
    status: ModelStagingStatus | None = None
    condition: JSON | None = None
    events: tuple[PendingEvent, ...] = ()
    retry_after: float | None = None
    column: str | None = None  # the Start printer column while a group stages
    digests: Mapping[int, str] = field(default_factory=dict)  # replica -> staged copy it runs
    gateway_digest: str | None = None  # the copy the gateway and Jobs mount, when staged


@dataclass
class _Group:
    """One group's decisions, filled node by node."""

    nodes: list[StagingNodeStatus] = field(default_factory=list)
    create: list[JSON] = field(default_factory=list)
    delete: list[Removal] = field(default_factory=list)
    events: list[PendingEvent] = field(default_factory=list)
    busy: bool = False  # a Job runs or is going: look again soon


def decide_staging(
    ic: InferenceCluster,
    *,
    groups: Mapping[int, Sequence[str]],
    addresses: Mapping[str, str | None],
    jobs: Sequence[StagingJob],
    previous: Mapping[str, Any] | None,
    force: bool,
    image: ProductImage,
    generation: int,
    had_condition: bool = False,
    copies: LiveCopies | None = None,
) -> StagingOutcome:
    """The step for one pass; an empty outcome without ``spec.model.source`` (but for
    ModelStaged True once a source was removed: its condition is not left stale).
    ``copies``: the staged copies the replicas and the gateway run now (staging_copies)."""
    if ic.spec.model.source is None:  # none, or removed: its Jobs go, its condition clears
        left = tuple(job_removal(j) for j in jobs if not j.deleting)
        if not had_condition:
            return StagingOutcome(delete_jobs=left)
        message = "no spec.model.source: the model is expected at spec.model.path"
        kind = ConditionType.MODEL_STAGED
        return StagingOutcome(
            delete_jobs=left,
            condition=condition(
                kind, status=True, reason=Reason.STAGED, message=message, generation=generation
            ),
        )
    copies = copies or LiveCopies()
    digest = staging_digest(ic)
    # A Job of another source, or of a node no longer in its replica's group (moved to a
    # spare, scaled away), is deleted; a node that comes back finds its copy staged.
    placed = {(replica, node) for replica, nodes in groups.items() for node in nodes}
    current = [j for j in jobs if j.digest == digest and (j.replica, j.node) in placed]
    live = {j.name: j for j in current}
    stale = tuple(job_removal(j) for j in jobs if j not in current and not j.deleting)
    before = _previous_nodes(previous, digest)
    unstaged: dict[int, str] = {}  # replica -> why its group holds no current copy yet
    out_groups: list[StagingGroupStatus] = []
    create: list[JSON] = []
    delete: list[Removal] = list(stale)
    events: list[PendingEvent] = []
    busy = bool(stale) or any(j.deleting for j in jobs)
    for replica in sorted(groups):
        nodes = tuple(groups[replica])
        try:
            plan = plan_group(
                nodes=nodes,
                addresses={n: a for n, a in addresses.items() if a},
                staging_node=ic.spec.model.source.staging_node,
                fan_out=ic.spec.model.source.fan_out,
            )
        except SpecError as exc:
            unstaged[replica] = f"model staging waits for the nodes' addresses: {exc}"
            continue
        group = _decide_group(
            ic, replica=replica, nodes=nodes, plan=plan, live=live, before=before,
            force=force, image=image, digest=digest, addresses=addresses,
        )  # fmt: skip
        out_groups.append(
            StagingGroupStatus(
                replica=replica, running_digest=copies.pods.get(replica), nodes=tuple(group.nodes)
            )
        )
        create.extend(group.create)
        delete.extend(group.delete)
        events.extend(group.events)
        busy = busy or group.busy
        hold = hold_message(group.nodes)
        if hold is not None:
            unstaged[replica] = hold
    # A replica whose group holds the current copy runs it; one that still runs an older
    # staged copy keeps serving on it (a new revision, or a failed one, stops nothing);
    # only a replica with no copy at all waits (held at 0), or is held on a failure.
    digests = {r: digest for r in groups if r not in unstaged}
    digests.update({r: d for r, d in copies.statefulsets.items() if r in unstaged and r in groups})
    holds = {r: m for r, m in unstaged.items() if r not in digests}
    everywhere = bool(groups) and not unstaged
    clean = decide_clean(
        ic, groups=groups, live=live, digest=digest, image=image, force=force,
        complete=everywhere and roll_complete(digest, sorted(groups), copies),
        freed_before=_previous_freed(previous, digest),
    )  # fmt: skip
    out_groups = [
        g.model_copy(update={"bytes_freed": clean.freed.get(g.replica)}) for g in out_groups
    ]
    status = ModelStagingStatus(
        digest=digest, summary=summary(out_groups), groups=tuple(out_groups)
    )
    failed = {r: m for r, m in holds.items() if m.startswith(FAILED_PREFIX)}
    return StagingOutcome(
        column=start_column(out_groups) if unstaged else None,
        holds=failed,
        waits={r: m for r, m in holds.items() if r not in failed},
        create_jobs=(*create, *clean.create),
        delete_jobs=(*delete, *clean.delete),
        status=status,
        condition=with_clean_failures(
            staged_condition(out_groups, unstaged, generation=generation), clean.failures
        ),
        events=(*events, *clean.events),
        retry_after=POLL_SECONDS if busy or clean.busy else None,
        digests=digests,
        gateway_digest=digest if everywhere else copies.gateway,
    )


def _decide_group(
    ic: InferenceCluster,
    *,
    replica: int,
    nodes: tuple[str, ...],
    plan: StagePlan,
    live: Mapping[str, StagingJob],
    before: Mapping[tuple[int, str], Mapping[str, Any]],
    force: bool,
    image: ProductImage,
    digest: str,
    addresses: Mapping[str, str | None],
) -> _Group:
    cluster = ic.metadata.name
    rank = {node: index for index, node in enumerate(nodes)}
    out = _Group()
    stages: dict[str, NodeStage] = {}
    serving: dict[str, bool] = {}
    for transfer in plan.transfers:  # sources come before the nodes they serve
        node = transfer.target
        name = staging_job_name(
            cluster, replica=replica, rank=rank[node], role="stage", digest=digest, node=node
        )
        job = live.get(name)
        stage = node_stage(job, node=node, copying=transfer.source is not None)
        stages[node] = stage
        source_ready = transfer.source is None or (
            stages[transfer.source].state is StageState.READY and serving[transfer.source]
        )
        retry = (
            job is not None
            and job.outcome == "failed"
            and not job.deleting
            and (force or (stage.reason is StageReason.PEER_UNAVAILABLE and source_ready))
        )
        if retry and job is not None:
            out.delete.append(job_removal(job))
            out.busy = True
        elif job is None and source_ready:
            args = stage_args(ic, transfer=transfer, address=addresses.get(node))
            out.create.append(
                render_staging_job(
                    ic,
                    replica=replica,
                    rank=rank[node],
                    node=node,
                    role="stage",
                    args=args,
                    digest=digest,
                    image=image,
                )
            )
            out.busy = True
            if transfer.source is None:
                message = (
                    f"replica {replica}: staging the model on node group "
                    f"{', '.join(nodes)}: {node} downloads, {_order(plan)}"
                )
                out.events.append(PendingEvent(False, Reason.STAGING_STARTED, message))
        elif job is not None and (job.outcome == "running" or job.deleting):
            out.busy = True
        serving[node] = _serve(
            ic, out, replica=replica, node=node, rank=rank[node], plan=plan, live=live,
            stages=stages, digest=digest, image=image, address=addresses.get(node),
        )  # fmt: skip
        entry = _node_status(
            job, stage, node=node, rank=rank[node], source=transfer.source, name=name,
            before=before.get((replica, node)),
        )  # fmt: skip
        out.nodes.append(entry)
        out.events.extend(_node_events(entry, before.get((replica, node)), replica=replica))
    return _finish(out, replica=replica, nodes=nodes, before=before)


def _serve(
    ic: InferenceCluster,
    out: _Group,
    *,
    replica: int,
    node: str,
    rank: int,
    plan: StagePlan,
    live: Mapping[str, StagingJob],
    stages: Mapping[str, NodeStage],
    digest: str,
    image: ProductImage,
    address: str | None,
) -> bool:
    """Plan the node's serve Job; whether its server answers now.

    Wanted while the node is Ready and a node it serves is not yet Ready or Failed (a
    successor's stage is decided after this node's, so its Job is read from ``live``)."""
    cluster = ic.metadata.name
    name = staging_job_name(
        cluster, replica=replica, rank=rank, role="serve", digest=digest, node=node
    )
    job = live.get(name)
    successors = [t.target for t in plan.transfers if t.source == node]
    pending = [s for s in successors if not _finished(s, live, replica=replica)]
    wanted = stages[node].state is StageState.READY and bool(pending) and address is not None
    if job is not None and not job.deleting and (not wanted or job.outcome != "running"):
        out.delete.append(job_removal(job))  # done serving, or a server that ended: anew
        out.busy = True
        return False
    if job is None and wanted and address is not None:
        out.create.append(
            render_staging_job(
                ic,
                replica=replica,
                rank=rank,
                node=node,
                role="serve",
                args=serve_args(ic, address=address),
                digest=digest,
                image=image,
            )
        )
        out.busy = True
        return False
    if job is not None and not job.serving:
        out.busy = True  # its log says ``serving`` soon: a log line is no watch event, poll
    return job is not None and job.serving and not job.deleting


def _finished(node: str, live: Mapping[str, StagingJob], *, replica: int) -> bool:
    """Whether ``node``'s stage Job ended (succeeded, or failed for a reason of its own)."""
    for job in live.values():
        if job.role == "stage" and job.node == node and job.replica == replica:
            if job.outcome == "succeeded":
                return True
            reason = _reason_of(job)
            return job.outcome == "failed" and reason is not StageReason.PEER_UNAVAILABLE
    return False


def node_stage(job: StagingJob | None, *, node: str, copying: bool) -> NodeStage:
    """A node's stage from its stage Job: none yet Pending; running, its latest record
    (Downloading or Copying before the first); succeeded Ready; failed, the reason."""
    stage = NodeStage(node=node)
    if job is None:
        return stage
    if job.outcome == "succeeded":
        return NodeStage(node=node, state=StageState.READY)
    if job.outcome == "failed":
        reason = _reason_of(job)
        record = job.record
        message = record.message if record is not None and record.message else job.detail
        if reason is None:
            return NodeStage(node=node, state=StageState.FAILED, message=message)
        return advance(stage, "fail", reason=reason, message=message)
    started = advance(stage, "start", copying=copying)
    if job.record is not None and job.record.stage in (StageState.VERIFYING, StageState.READY):
        return advance(started, "verify")
    return started


def _reason_of(job: StagingJob) -> StageReason | None:
    record = job.record
    return record.reason if record is not None and record.stage is StageState.FAILED else None


def _node_status(
    job: StagingJob | None,
    stage: NodeStage,
    *,
    node: str,
    rank: int,
    source: str | None,
    name: str,
    before: Mapping[str, Any] | None = None,
) -> StagingNodeStatus:
    """The node's status entry; a Ready node whose log was not read keeps its last bytes."""
    record = job.record if job is not None else None
    if record is None and stage.state is StageState.READY and before is not None:
        return StagingNodeStatus.model_validate({**before, "job": name})
    failed = stage.state is StageState.FAILED
    reason = (stage.reason.value if stage.reason else Reason.STAGE_FAILED.value) if failed else None
    done = record.bytes_done if record is not None else None
    total = record.bytes_total if record is not None and record.bytes_total else None
    if stage.state is StageState.READY and total is not None:
        done = total
    return StagingNodeStatus(
        node=node,
        rank=rank,
        stage=stage.state.value,
        source_node=source,
        bytes_done=done,
        bytes_total=total,
        rate_bytes_per_second=record.rate_bytes_per_second if record is not None else None,
        eta_seconds=None if record is None or stage.state is StageState.READY
        else record.eta_seconds,
        reason=reason,
        message=_node_message(job, stage),
        job=name if job is not None else None,
    )  # fmt: skip


def _node_message(job: StagingJob | None, stage: NodeStage) -> str | None:
    """A failure's message; while the Job runs, why its pod cannot start, if it cannot."""
    if stage.state is StageState.FAILED:
        return stage.message[:1024] if stage.message else None
    if job is not None and job.blocked:
        return f"{BLOCKED_PREFIX}{job.blocked}"[:1024]
    return None


def _node_events(
    entry: StagingNodeStatus, before: Mapping[str, Any] | None, *, replica: int
) -> list[PendingEvent]:
    """A Warning when this attempt (its Job) is newly seen Failed."""
    if entry.stage != StageState.FAILED.value:
        return []
    old = before or {}
    if old.get("stage") == StageState.FAILED.value and old.get("job") == entry.job:
        return []
    reason = failure_reason(entry.reason)
    message = (
        f"replica {replica}: staging the model on node {entry.node} failed: {entry.reason}: "
        f"{entry.message or 'the staging pod failed'}; to retry, kubectl delete job "
        f"{entry.job} (made again at the next pass; replicas that serve keep serving), or "
        "change spec.model.source"
    )
    return [PendingEvent(True, reason, message)]


def _finish(
    out: _Group,
    *,
    replica: int,
    nodes: tuple[str, ...],
    before: Mapping[tuple[int, str], Mapping[str, Any]],
) -> _Group:
    """The group's Staged Event, the pass its last node turned Ready."""
    ready = all(n.stage == StageState.READY.value for n in out.nodes)
    was = all(
        (before.get((replica, n)) or {}).get("stage") == StageState.READY.value for n in nodes
    )
    if ready and not was:
        total = out.nodes[0].bytes_total if out.nodes else None
        size = f" ({total} bytes each)" if total else ""
        message = f"replica {replica}: the model is staged on {', '.join(nodes)}{size}"
        out.events.append(PendingEvent(False, Reason.STAGED, message))
    return out


def _order(plan: StagePlan) -> str:
    copies = [f"{c.source} -> {c.target}" for c in plan.copies()]
    return "then " + ", ".join(copies) if copies else "no copies"


def _previous_freed(previous: Mapping[str, Any] | None, digest: str) -> dict[int, int]:
    """The last status's bytes freed per group of the same source (its clean reported)."""
    if not previous or previous.get("digest") != digest:
        return {}
    return {
        int(g.get("replica", 0)): int(g["bytesFreed"])
        for g in previous.get("groups") or []
        if g.get("bytesFreed") is not None
    }


def _previous_nodes(
    previous: Mapping[str, Any] | None, digest: str
) -> dict[tuple[int, str], Mapping[str, Any]]:
    """The last status's node entries of the same source, by (replica, node)."""
    if not previous or previous.get("digest") != digest:
        return {}
    return {
        (int(g.get("replica", 0)), str(n.get("node"))): n
        for g in previous.get("groups") or []
        for n in g.get("nodes") or []
    }
