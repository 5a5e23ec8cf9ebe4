"""One replica's pass, pure: observed objects + history in, decision + objects + report out.

Part of ``decide``: everything a pass decides about one replica is a function of its
inputs (no API, no clock, no metrics) — observe and execute do the I/O and the counting,
this module reasons. It also holds ``Observed`` (the objects and nodes a pass read). The
ModelVerified verdict, which must outlive the pods it came from, is proofs.py's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from sparkllm.api import ENGINE_HTTP_PORT, InferenceCluster, Phase, Reason
from sparkllm.keys import LABEL_GENERATION, LABEL_REPLICA
from sparkllm.reconcile.decide.actions import PendingEvent, PodPatch
from sparkllm.reconcile.decide.hang import unready_since
from sparkllm.reconcile.decide.moves import Move
from sparkllm.reconcile.decide.replica_state import ReplicaState, observe_replica, pods_by_rank
from sparkllm.reconcile.decide.restarts import (
    FORCE_CAUSE,
    Action,
    Decision,
    DrainFacts,
    History,
    decide,
    is_requested,
)
from sparkllm.reconcile.decide.status import ReplicaReport
from sparkllm.reconcile.decide.upgrade import (
    PendingUpdate,
    UpgradeSettings,
    adopt_patches,
    drained_cause,
    drift,
    requested_cause,
)
from sparkllm.render import EngineKeyRef, ReplicaPlan, render_replica
from sparkllm.render.placement import NodeFacts
from sparkllm.render.product_image import ProductImage
from sparkllm.render.rank_stamp import Stamp

JSON = dict[str, Any]


def label(obj: Mapping[str, Any], key: str) -> str | None:
    value = (obj["metadata"].get("labels") or {}).get(key)
    return None if value is None else str(value)


@dataclass(frozen=True)
class Observed:
    """The nodes and the cluster's own objects and pods, as one pass read them."""

    nodes: dict[str, NodeFacts]
    pods: list[JSON]
    owned: dict[str, list[JSON]]  # kind -> live objects of that kind with our label
    forbidden: frozenset[str] = frozenset()  # kinds (owned.MAY_BE_FORBIDDEN) we may not list

    @property
    def statefulsets(self) -> list[JSON]:
        return self.owned["StatefulSet"]

    @property
    def services(self) -> list[JSON]:
        return self.owned["Service"]

    def by_replica(self, items: Sequence[JSON], index: int) -> list[JSON]:
        return [o for o in items if label(o, LABEL_REPLICA) == str(index)]


@dataclass(frozen=True)
class ReplicaInputs:
    """What the reconciler knows about one replica when it plans it."""

    index: int
    group_key: str
    nodes: tuple[str, ...]
    previous: Mapping[str, Any] | None  # the replica's last status entry
    reset_budget: bool  # the spec changed since the last pass
    force: bool  # sparkllm.io/restart=now
    others_ready: bool  # every other replica serves (rolling updates)
    blocked: str | None  # why the replica must not run (model copies disagree)
    engine_key: EngineKeyRef
    tools_image: ProductImage
    now: datetime
    drain: DrainFacts = field(default_factory=DrainFacts)  # the drain before a planned restart
    upgrade: UpgradeSettings = field(default_factory=UpgradeSettings)  # the chart's upgrade.*
    engine_image: str | None = None  # pinned to one digest after a split (versions.py)
    failover: Move | None = None  # placement moved the replica to a spare group this pass
    quarantined: frozenset[str] = frozenset()  # nodes kept from replicas (quarantine.py)
    waiting: str | None = None  # what it waits for before starting (its model copy)
    model_digest: str | None = None  # the staged copy it runs (spec.model.source; staging.py)


@dataclass(frozen=True)
class ReplicaResult:
    report: ReplicaReport
    objects: list[JSON] | None  # None: cannot render (rank 0's node is gone); keep live ones
    retry_after: float | None
    events: tuple[PendingEvent, ...]
    restart_cause: str | None  # set when this pass began a gang restart
    drain_mark: str | None = None  # take rank 0 out of routing now, for this planned restart
    serving: bool = False  # RUN: neither draining nor restarting; rank 0 belongs in routing
    pending: PendingUpdate | None = None  # an operator update the running pods wait for
    adopt: tuple[PodPatch, ...] = ()  # the spec digest recorded on pods without one


def _template_generation(sts: Mapping[str, Any]) -> int:
    labels = sts["spec"]["template"]["metadata"].get("labels") or {}
    value = str(labels.get(LABEL_GENERATION, "0"))
    return int(value) if value.isdigit() else 0


def _parse_times(values: Sequence[str]) -> tuple[datetime, ...]:
    return tuple(datetime.fromisoformat(v.replace("Z", "+00:00")) for v in values)


def history_from_status(previous: Mapping[str, Any] | None, *, reset_budget: bool) -> History:
    if not previous:
        return History()
    return History(
        restarts=int(previous.get("restarts", 0)),
        restart_times=() if reset_budget else _parse_times(previous.get("restartTimes") or []),
        members=tuple(previous.get("members") or ()),
        exhausted=False if reset_budget else bool(previous.get("budgetExhausted", False)),
        node_down=bool(previous.get("nodeDown", False)),
    )


def timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def precise_timestamp(moment: datetime) -> str:
    """RFC 3339 with milliseconds: restart times feed the backoff, which is in seconds."""
    text = moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
    return text[:-3] + "Z"


Render = Callable[..., list[JSON]]


def _renderer(
    ic: InferenceCluster, inputs: ReplicaInputs, rank0_ip: str, node_ips: tuple[str, ...]
) -> Render:
    """The replica's objects at a generation, rendered once per (generation, running)."""

    @functools.cache  # the hash render is, in the common case, the one applied
    def render(generation: int, *, running: bool) -> list[JSON]:
        plan = ReplicaPlan(
            index=inputs.index,
            group_key=inputs.group_key,
            nodes=inputs.nodes,
            rank0_ip=rank0_ip,
            generation=generation,
            running=running,
            node_ips=node_ips,
            engine_image=inputs.engine_image,
            model_digest=inputs.model_digest,
        )
        return render_replica(
            ic, plan=plan, engine_key=inputs.engine_key, tools_image=inputs.tools_image
        )

    return render


def _ips(observed: Observed, nodes: Sequence[str]) -> tuple[str, ...]:
    """Every rank's node address, in rank order; empty while one is unknown."""
    facts = [observed.nodes.get(node) for node in nodes]
    ips = tuple(f.internal_ip for f in facts if f is not None and f.internal_ip)
    return ips if len(ips) == len(nodes) else ()


def plan_replica(ic: InferenceCluster, observed: Observed, inputs: ReplicaInputs) -> ReplicaResult:
    """Observe, decide and render one replica."""
    index, nodes, previous = inputs.index, inputs.nodes, inputs.previous
    live = observed.by_replica(observed.statefulsets, index)
    live_generation = max((_template_generation(s) for s in live), default=0)
    recorded = int((previous or {}).get("generation", 0))
    generation = live_generation or recorded + 1
    # A live generation ahead of the status: a pass applied a gang restart's stop and the
    # operator died before that pass wrote its status. The restart still counts.
    unrecorded = live_generation - recorded if previous and live_generation > recorded else 0
    # A replica with no (or not all) rank StatefulSets is not running: it starts
    # through the same path as a restart, so two generations never mix.
    stopped = len(live) < ic.spec.engine.nodes_per_replica or any(
        s["spec"].get("replicas", 1) == 0 for s in live
    )
    pods = observed.by_replica(observed.pods, index)
    state = observe_replica(index=index, nodes=nodes, pods=pods, node_facts=observed.nodes)
    held = tuple(n for n in nodes if n in inputs.quarantined and n not in state.nodes_not_ready)
    state = replace(state, nodes_quarantined=held)
    history = history_from_status(previous, reset_budget=inputs.reset_budget)
    rank0_pod = pods_by_rank(pods).get(0)
    current = rank0_pod is not None and label(rank0_pod, LABEL_GENERATION) == str(generation)
    rank0 = observed.nodes.get(nodes[0])
    rank0_ip = rank0.internal_ip if rank0 is not None else None
    render = None if rank0_ip is None else _renderer(ic, inputs, rank0_ip, _ips(observed, nodes))
    want: dict[int, Stamp] = {}
    for rank, sts in enumerate(render(generation, running=True) if render else []):
        if sts["kind"] == "StatefulSet":
            want[rank] = Stamp.of(sts["spec"]["template"]["metadata"].get("annotations"))
    changed = drift(pods, generation, want)
    adopt = tuple(adopt_patches(pods, generation, want))
    update_cause, pending = changed.roll, changed.pending
    if pending is not None and inputs.upgrade.apply == "drained":
        update_cause = drained_cause(pending)
    decision = decide(
        state=state,
        generation=generation,
        stopped=stopped,
        history=history,
        policy=ic.spec.restart_policy,
        now=inputs.now,
        force_restart=inputs.force,
        outdated=update_cause is not None,
        update_cause=update_cause or "",
        force_cause=FORCE_CAUSE if pending is None else requested_cause(pending),
        others_ready=inputs.others_ready,
        blocked=inputs.blocked,
        waiting=inputs.waiting,
        unready_since=unready_since(rank0_pod) if current else None,
        drain=inputs.drain,
        failover=None if inputs.failover is None else inputs.failover.reason,
    )
    if decision.action is Action.STOP:
        generation += 1
    report = _report(
        inputs,
        state=state,
        decision=decision,
        generation=generation,
        restarts=history.restarts + unrecorded,
        rank0_ip=rank0_ip,
    )
    running = decision.action in (Action.RUN, Action.DRAIN)  # a drain keeps serving
    retry = decision.retry_at - inputs.now if decision.retry_at else None
    return ReplicaResult(
        report=report,
        objects=None if render is None else render(generation, running=running),
        retry_after=None if retry is None else retry.total_seconds(),
        events=(*moved_events(inputs), *_events(index, previous, decision)),
        restart_cause=decision.cause if decision.action is Action.STOP else None,
        drain_mark=decision.drain_reason if decision.drain_mark else None,
        serving=decision.action is Action.RUN,
        pending=None if decision.action is Action.STOP else pending,
        adopt=() if decision.action is Action.STOP else adopt,
    )


def _report(
    inputs: ReplicaInputs,
    *,
    state: ReplicaState,
    decision: Decision,
    generation: int,
    restarts: int,
    rank0_ip: str | None,
) -> ReplicaReport:
    """What status says about the replica after this pass's decision."""
    last_restart = (inputs.previous or {}).get("lastRestart")
    last_failover = (inputs.previous or {}).get("lastFailover")
    if inputs.failover is not None:
        last_failover = inputs.failover.status(inputs.now)
    if decision.action is Action.STOP:  # generation is already the new one
        restarts += 1
        last_restart = {"time": timestamp(inputs.now), "reason": decision.cause or ""}
    return ReplicaReport(
        index=inputs.index,
        nodes=inputs.nodes,
        phase=decision.phase,
        ready_ranks=state.ready_ranks(generation),
        generation=generation,
        endpoint=f"http://{rank0_ip}:{ENGINE_HTTP_PORT}" if rank0_ip else None,
        restarts=restarts,
        last_restart=last_restart,
        recent_restarts=tuple(precise_timestamp(t) for t in decision.restart_times),
        members=decision.members,
        budget_exhausted=decision.exhausted,
        node_down=decision.node_down,
        message=decision.message,
        node_group=inputs.group_key,
        last_failover=last_failover,
    )


def _events(
    index: int, previous: Mapping[str, Any] | None, decision: Decision
) -> tuple[PendingEvent, ...]:
    """A gang restart's (or its drain's) Event first, then the phase transition's."""
    events = transition_events(index, previous, decision)
    if decision.drain_mark and decision.drain_reason is not None:
        kind = Reason.GANG_RESTART if is_requested(decision.drain_reason) else Reason.ROLLING_UPDATE
        message = f"replica {index}: out of routing; restarts once its requests finish"
        return (PendingEvent(False, kind, f"{message} ({decision.drain_reason})"), *events)
    if decision.action is not Action.STOP:
        return events
    restart = PendingEvent(
        warning=True, reason=Reason.GANG_RESTART, message=f"replica {index}: {decision.cause}"
    )
    return (restart, *events)


def moved_events(inputs: ReplicaInputs) -> tuple[PendingEvent, ...]:
    """The Warning that says from which group to which the replica moved, and why."""
    move = inputs.failover
    if move is None:
        return ()
    return (PendingEvent(True, Reason.NODE_FAILOVER, move.message()),)


def transition_events(
    index: int, previous: Mapping[str, Any] | None, decision: Decision
) -> tuple[PendingEvent, ...]:
    """Events for a replica's phase transition (none when the phase did not change)."""
    if decision.phase.value == (previous or {}).get("phase"):
        return ()
    if decision.phase is Phase.READY:
        return (PendingEvent(False, Reason.REPLICA_READY, f"replica {index} serving"),)
    if decision.exhausted and not (previous or {}).get("budgetExhausted"):
        message = f"replica {index}: {decision.message}"
        return (PendingEvent(True, Reason.RESTART_BUDGET_EXHAUSTED, message),)
    if decision.node_down and decision.action is not Action.STOP:
        return (PendingEvent(True, Reason.NODE_NOT_READY, f"replica {index}: {decision.message}"),)
    return ()


def cause_class(cause: str) -> str:
    """A bounded metric label from a free-text restart cause."""
    for word, name in (
        ("operator update", "operator_update"),
        ("model staged", "update"),  # a new revision's copy (decide/upgrade.model_cause)
        ("template changed", "update"),  # before "node": its cause names a node address
        ("pipeline hung", "pipeline_hung"),
        ("model copies", "model_mismatch"),
        ("network preflight", "network_preflight"),
        ("memory preflight", "memory_preflight"),
        ("container exited", "container_exit"),
        ("init container", "init_failed"),
        ("pod failed", "pod_failed"),
        ("pod deleted", "pod_deleted"),
        ("pod replaced", "pod_deleted"),
        ("being deleted", "pod_deleted"),
        ("node", "node_failure"),
        ("spec changed", "update"),
        ("requested", "manual"),
    ):
        if word in cause:
            return name
    return "other"
