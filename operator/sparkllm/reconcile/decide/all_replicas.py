"""The replicas' part of ``decide``: one decision per replica, desired objects.

Why apart from ``decide.py``: this is the loop over replicas — placed on node groups by
``spares.place`` (moves to spare groups, quarantined nodes) — planning each (run,
gang-restart, wait, hold; ``replicas.plan_replica``) with the decisions made earlier in
the same pass in view, so two replicas never stop for an update in one pass; it yields
the desired objects (the front door first, then the ranks), the replica reports for
status, and the names to keep while a replica cannot be rendered. Pure, like everything
``decide`` calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sparkllm.api import InferenceCluster, Phase
from sparkllm.reconcile.decide.actions import JSON, PendingEvent, PodPatch, earliest
from sparkllm.reconcile.decide.drain import mark_patch, restart_drain, undrain_patch
from sparkllm.reconcile.decide.moves import Move
from sparkllm.reconcile.decide.replica_state import pods_by_rank
from sparkllm.reconcile.decide.replicas import (
    Observed,
    ReplicaInputs,
    cause_class,
    plan_replica,
)
from sparkllm.reconcile.decide.status import ClusterReport, ReplicaReport
from sparkllm.reconcile.decide.upgrade import PendingUpdate, UpgradeSettings
from sparkllm.render import EngineKeyRef
from sparkllm.render.exposure import render_exposure
from sparkllm.render.gateway import render_gateway
from sparkllm.render.names import cluster_selector
from sparkllm.render.placement import Assignment
from sparkllm.render.product_image import ProductImage


@dataclass
class ReplicasDecision:
    """What the replica loop decided (accumulated replica by replica)."""

    reports: list[ReplicaReport] = field(default_factory=list)
    desired: list[JSON] = field(default_factory=list)
    keep: set[str] = field(default_factory=set)
    events: list[PendingEvent] = field(default_factory=list)
    gang_restarts: list[str] = field(default_factory=list)
    pod_patches: list[PodPatch] = field(default_factory=list)  # rank 0s leaving routing
    nodes: set[str] = field(default_factory=set)
    retry_after: float | None = None
    pending: list[tuple[int, PendingUpdate]] = field(default_factory=list)  # UpdatePending


@dataclass(frozen=True)
class PassFacts:
    """What every replica's decision shares."""

    previous_status: Mapping[str, Any]
    generation: int
    force: bool  # sparkllm.io/restart=now
    blocked: str | None  # model copies disagree
    engine_key: EngineKeyRef
    gateway_image: ProductImage  # the operator's own: gateway, init containers
    now: datetime
    running: Mapping[int, int | None] = field(default_factory=dict)  # requests per replica
    absent_apis: frozenset[tuple[str, str]] = frozenset()  # (apiVersion, kind) not served
    pins: Mapping[int, str] = field(default_factory=dict)  # replica -> image@digest (versions.py)
    upgrade: UpgradeSettings = field(default_factory=UpgradeSettings)  # operator updates
    moves: Mapping[int, Move] = field(default_factory=dict)  # failovers to spares (spares.py)
    quarantined: frozenset[str] = frozenset()  # nodes no replica runs on (quarantine.py)
    settle_after: float | None = None  # when a quarantined node settles: look again then
    staging_holds: Mapping[int, str] = field(default_factory=dict)  # a stage failed (staging.py)
    staging_waits: Mapping[int, str] = field(default_factory=dict)  # a group still stages
    model_digests: Mapping[int, str] = field(default_factory=dict)  # replica -> staged copy
    gateway_digest: str | None = None  # the copy every group holds, for the gateway


def decide_replicas(
    ic: InferenceCluster, observed: Observed, assignment: Assignment, facts: PassFacts
) -> ReplicasDecision:
    """Plan every placed replica in index order, then put the front door first."""
    previous = {int(r["index"]): r for r in facts.previous_status.get("replicaStatuses") or []}
    reset_budget = facts.generation != facts.previous_status.get("observedGeneration")
    # A replica rolls for an update only while every other one serves; decisions made
    # earlier in this pass count, so two replicas never stop in the same pass.
    phases = {i: str(p.get("phase")) for i, p in previous.items()}
    out = ReplicasDecision(retry_after=facts.settle_after)
    replicas = ic.spec.replicas
    for index in range(replicas):
        group = assignment.replicas.get(index)
        if group is None:
            continue
        out.nodes.update(group.nodes)
        others_ready = all(
            phases.get(i) == Phase.READY.value for i in range(replicas) if i != index
        )
        rank0 = pods_by_rank(observed.by_replica(observed.pods, index)).get(0)
        running = facts.running.get(index)
        inputs = ReplicaInputs(
            index=index,
            group_key=group.key,
            nodes=group.nodes,
            previous=previous.get(index),
            reset_budget=reset_budget,
            force=facts.force,
            others_ready=others_ready,
            blocked=facts.blocked or facts.staging_holds.get(index),
            waiting=facts.staging_waits.get(index),
            engine_key=facts.engine_key,
            tools_image=facts.gateway_image,
            now=facts.now,
            drain=restart_drain(rank0, running=running, now=facts.now),
            upgrade=facts.upgrade,
            engine_image=facts.pins.get(index),
            failover=facts.moves.get(index),
            quarantined=facts.quarantined,
            model_digest=facts.model_digests.get(index),
        )
        result = plan_replica(ic, observed, inputs)
        if result.drain_mark is not None and rank0 is not None:
            out.pod_patches.append(mark_patch(rank0, now=facts.now, reason=result.drain_mark))
        elif result.serving and rank0 is not None and (back := undrain_patch(rank0)):
            out.pod_patches.append(back)  # a drain abandoned (scaled back up): routed again
        out.pod_patches.extend(result.adopt)  # stamp-less pods get the spec digest
        out.events.extend(result.events)
        if result.pending is not None:
            out.pending.append((index, result.pending))
        if result.restart_cause is not None:
            out.gang_restarts.append(cause_class(result.restart_cause))
        out.reports.append(result.report)
        phases[index] = result.report.phase.value  # later replicas see this pass's view
        if result.objects is None:  # cannot render (rank 0 node gone): keep what exists
            live = observed.by_replica(observed.statefulsets + observed.services, index)
            out.keep.update(o["metadata"]["name"] for o in live)
        else:
            out.desired.extend(result.objects)
        out.retry_after = earliest(out.retry_after, result.retry_after)
    # The front door (admission layer + router) goes first in apply order, before
    # the ranks: a Role must exist before the router's pod watch needs it.
    out.desired[:0] = render_gateway(
        ic, engine_key=facts.engine_key, gateway_image=facts.gateway_image,
        model_digest=facts.gateway_digest,
    )  # fmt: skip
    # Last; a kind whose CRD the cluster lacks is not planned (status says so instead).
    exposure = render_exposure(ic)
    out.desired.extend(o for o in exposure if (o["apiVersion"], o["kind"]) not in facts.absent_apis)
    return out


def cluster_report(
    ic: InferenceCluster,
    *,
    decision: ReplicasDecision,
    assignment: Assignment,
    problems: tuple[str, ...],
    generation: int,
) -> ClusterReport:
    """The report status is derived from (proof conditions are added by ``decide``)."""
    return ClusterReport(
        generation=generation,
        desired_replicas=ic.spec.replicas,
        selector=cluster_selector(ic.metadata.name),
        replicas=tuple(decision.reports),
        unplaced=assignment.unplaced,
        placement_problems=problems,
    )
