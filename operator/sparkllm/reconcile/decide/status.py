"""Status as an API: per-replica reports -> phase, counts, conditions. Pure.

Status is built as the typed ``api.status`` models (``InferenceClusterStatus``,
``ReplicaStatus``, ``Condition``) and serialised once (:func:`wire`: camelCase, no
nulls), so its shape is the CRD's by construction. Conditions enter through the one
setter, ``api.status.set_condition`` (metav1.Condition: a transition time that moves only
when the status flips), in the registry's order (``api.conditions``). ``Ready`` is
derived from the replica reports and the registry (a ``blocks`` condition False holds
it), never set on its own. ``decide`` compares the result with the live status and plans
a write only when they differ, so an idle pass makes no write.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from pydantic import ValidationError

from sparkllm.api import Condition, ConditionType, Phase, Reason
from sparkllm.api.conditions import ORDER, ready_blockers
from sparkllm.api.engine_status import ReplicaEngineStatus
from sparkllm.api.governance_store import GatewayStatus
from sparkllm.api.memory import MemoryStatus
from sparkllm.api.network_status import NetworkStatus
from sparkllm.api.quarantine import Failover, NodeFailures, QuarantinedNode
from sparkllm.api.rules import ApiModel
from sparkllm.api.staging_status import ModelStagingStatus
from sparkllm.api.start_status import ReplicaStart
from sparkllm.api.status import (
    FrontDoorStatus,
    InferenceClusterStatus,
    LastRestart,
    PhaseName,
    ReplicaStatus,
    set_condition,
)

JSON = dict[str, Any]


@dataclass(frozen=True)
class ReplicaReport:
    """What status says about one replica."""

    index: int
    nodes: tuple[str, ...]
    phase: Phase
    ready_ranks: int
    generation: int
    endpoint: str | None = None
    restarts: int = 0
    last_restart: JSON | None = None
    recent_restarts: tuple[str, ...] = ()
    members: tuple[str, ...] = ()
    budget_exhausted: bool = False
    node_down: bool = False
    start: ReplicaStart | None = None  # while starting: each rank's stage (start_stages.py)
    last_start_seconds: int | None = None
    message: str = ""
    node_group: str | None = None  # the group it is placed on (spares.py)
    last_failover: JSON | None = None  # its latest move to a spare group

    def to_status(self) -> ReplicaStatus:
        """The typed ``status.replicaStatuses[]`` entry (absent = not so: no message, no
        budgetExhausted/nodeDown while false)."""
        last = None if self.last_restart is None else LastRestart.model_validate(self.last_restart)
        return ReplicaStatus(
            index=self.index,
            nodes=self.nodes,
            phase=cast(PhaseName, self.phase.value),
            ready_ranks=self.ready_ranks,
            restarts=self.restarts,
            generation=self.generation,
            last_restart=last,
            endpoint=self.endpoint,
            message=self.message or None,
            restart_times=tuple(datetime.fromisoformat(t) for t in self.recent_restarts),
            members=self.members,
            budget_exhausted=True if self.budget_exhausted else None,
            node_down=True if self.node_down else None,
            start=self.start,
            last_start_seconds=self.last_start_seconds,
            node_group=self.node_group,
            last_failover=_failover(self.last_failover),
        )

    def to_json(self) -> JSON:
        return wire(self.to_status())


@dataclass(frozen=True)
class ClusterReport:
    """Everything the reconciler learned in one pass, for status."""

    generation: int
    desired_replicas: int
    selector: str
    replicas: tuple[ReplicaReport, ...]
    unplaced: tuple[int, ...] = ()
    placement_problems: tuple[str, ...] = ()
    in_use: tuple[str, ...] = ()  # groups not free because another object holds them
    unschedulable: tuple[str, ...] = ()  # rank pods Pending past the grace, and why
    spec_error: str | None = None
    spec_error_reason: Reason = Reason.INVALID_SPEC
    extra_conditions: tuple[JSON, ...] = field(default_factory=tuple)
    start_summary: str | None = None  # status.start, the Start printer column


def _failover(last: JSON | None) -> Failover | None:
    return None if last is None else Failover.model_validate(last)


def condition(
    kind: ConditionType, *, status: bool | None, reason: Reason, message: str, generation: int
) -> JSON:
    """A condition without its transition time (set by merge_conditions)."""
    return {
        "type": kind.value,
        "status": "Unknown" if status is None else ("True" if status else "False"),
        "reason": reason.value,
        "message": message,
        "observedGeneration": generation,
    }


def all_clear(
    kind: ConditionType,
    previous: Mapping[str, Any],
    *,
    status: bool,
    reason: Reason,
    message: str,
    generation: int,
) -> tuple[JSON, ...]:
    """A condition reported only once it had something to say (Exposed, UpdatePending):
    its all-clear once it was ever written; nothing while it never was."""
    if not any(c.get("type") == kind.value for c in previous.get("conditions") or []):
        return ()
    return (condition(kind, status=status, reason=reason, message=message, generation=generation),)


def merge_conditions(
    previous: Sequence[Mapping[str, Any]], updates: Sequence[JSON], now: datetime
) -> list[JSON]:
    """Apply ``updates`` over ``previous`` with the one setter (``set_condition``: keep
    lastTransitionTime unless status flips), in the registry's order, as written."""
    typed, hand_made = _set_conditions(previous, updates, now)
    return _ordered([*(wire(c) for c in typed), *hand_made])


def _set_conditions(
    previous: Sequence[Mapping[str, Any]], updates: Sequence[JSON], now: datetime
) -> tuple[list[Condition], list[JSON]]:
    """The typed conditions after ``updates``, and the previous entries the Condition model
    refuses (only a hand-made status can hold one: the CRD requires the fields), kept as
    they are unless an update replaces them."""
    stamp = now.replace(microsecond=0)
    typed: list[Condition] = []
    raw: dict[str, Mapping[str, Any]] = {}
    for old in previous:
        try:
            typed.append(Condition.model_validate(old))
        except ValidationError:
            raw[str(old.get("type"))] = old
    for update in updates:
        old_raw = raw.pop(update["type"], None)
        time = stamp
        if old_raw is not None and old_raw.get("status") == update["status"]:
            time = _parse_time(old_raw.get("lastTransitionTime")) or stamp
        set_condition(typed, Condition.model_validate({**update, "lastTransitionTime": time}))
    return typed, [dict(c) for c in raw.values()]


def _ordered(conditions: list[JSON]) -> list[JSON]:
    return sorted(
        conditions, key=lambda c: ORDER.index(c["type"]) if c["type"] in ORDER else len(ORDER)
    )


def _parse_time(text: object) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text)) if text else None
    except ValueError:
        return None


def cluster_phase(report: ClusterReport) -> Phase:
    if report.spec_error is not None:
        return Phase.FAILED
    phases = [r.phase for r in report.replicas]
    ready = sum(1 for p in phases if p is Phase.READY)
    if report.desired_replicas == 0:
        return Phase.STOPPED
    if Phase.DEGRADED in phases or report.unplaced:
        return Phase.DEGRADED
    if Phase.RESTARTING in phases:
        return Phase.RESTARTING
    if ready >= report.desired_replicas:
        return Phase.READY
    if any(p is Phase.STARTING for p in phases):
        return Phase.STARTING
    return Phase.PENDING


def _conditions(report: ClusterReport) -> list[JSON]:
    if report.spec_error is not None:
        return _refused_conditions(report, report.spec_error)
    gen = report.generation
    derived = (
        (ConditionType.READY, _ready(report)),
        (ConditionType.PROGRESSING, progressing_verdict(report)),
        (ConditionType.DEGRADED, _degraded(report)),
    )
    return [
        *(
            condition(kind, status=status, reason=reason, message=message, generation=gen)
            for kind, (status, reason, message) in derived
        ),
        *report.extra_conditions,
    ]


Verdict = tuple[bool, Reason, str]  # a condition's status, reason and message


def _refused_conditions(report: ClusterReport, message: str) -> list[JSON]:
    """The spec cannot be acted on: not Ready, not Progressing, for the same reason."""
    return [
        condition(
            kind,
            status=False,
            reason=report.spec_error_reason,
            message=message,
            generation=report.generation,
        )
        for kind in (ConditionType.READY, ConditionType.PROGRESSING)
    ] + list(report.extra_conditions)


def _ready(report: ClusterReport) -> Verdict:
    ready = sum(1 for r in report.replicas if r.phase is Phase.READY)
    desired = report.desired_replicas
    held = ready_blockers(tuple((c["type"], c["status"]) for c in report.extra_conditions))
    if desired == 0:
        status, reason, message = False, Reason.SCALED_TO_ZERO, "spec.replicas is 0"
    elif held:  # the registry's BLOCKS rows: a False one holds the replicas
        status, reason = False, Reason.REPLICAS_NOT_READY
        message = f"{ready}/{desired} replicas ready; held while {', '.join(held)} is False"
    elif ready >= desired:
        status, reason, message = (
            True,
            Reason.ALL_REPLICAS_READY,
            f"{ready}/{desired} replicas ready",
        )
    else:
        status, reason, message = (
            False,
            Reason.REPLICAS_NOT_READY,
            f"{ready}/{desired} replicas ready",
        )
    return status, reason, message


def _held(report: ClusterReport) -> str:
    """What the degraded replicas say, one after the other."""
    return "; ".join(
        f"replica {r.index}: {r.message or 'degraded'}"
        for r in report.replicas
        if r.phase is Phase.DEGRADED
    )


def progressing_verdict(report: ClusterReport) -> Verdict:
    """The Progressing condition's status, reason and message for ``report``."""
    ready = sum(1 for r in report.replicas if r.phase is Phase.READY)
    desired = report.desired_replicas
    degraded = any(r.phase is Phase.DEGRADED for r in report.replicas)
    status = False
    if report.unplaced:
        problems = "; ".join((*report.in_use, *report.placement_problems))
        reason = Reason.NODE_GROUP_IN_USE if report.in_use else Reason.INSUFFICIENT_NODE_GROUPS
        message = f"no free node group for replica(s) {list(report.unplaced)}" + (
            f": {problems}" if problems else ""
        )
    elif report.unschedulable:
        reason, message = Reason.UNSCHEDULABLE, "; ".join(report.unschedulable)
    elif ready >= desired:
        reason, message = Reason.RECONCILED, "desired state reached"
    elif degraded and all(r.phase in {Phase.READY, Phase.DEGRADED} for r in report.replicas):
        # nothing moves: every replica not serving is held (budget, node, model files)
        reason = Reason.REPLICA_DEGRADED
        message = f"{ready}/{desired} replicas ready; the others are held: " + _held(report)
    else:
        restarting = any(r.phase is Phase.RESTARTING for r in report.replicas)
        status, message = True, f"{ready}/{desired} replicas ready"
        reason = Reason.GANG_RESTART if restarting else Reason.RANKS_STARTING
    return status, reason, message


def _degraded(report: ClusterReport) -> Verdict:
    if any(r.phase is Phase.DEGRADED for r in report.replicas):
        status, reason, message = True, Reason.REPLICA_DEGRADED, _held(report)
    elif report.unplaced:
        status = True
        reason = Reason.NODE_GROUP_IN_USE if report.in_use else Reason.INSUFFICIENT_NODE_GROUPS
        message = f"{len(report.unplaced)} replica(s) cannot be placed" + (
            ": " + "; ".join(report.in_use) if report.in_use else ""
        )
    else:
        status, reason, message = False, Reason.NOT_DEGRADED, ""
    return status, reason, message


def wire(model: ApiModel) -> JSON:
    """A status model as written: camelCase, no null (absent = not observed), RFC 3339."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


@dataclass(frozen=True)
class StatusParts:
    """The parts of status other steps decide, typed: where clients reach the front door,
    the network preflight's findings, where governance state lives, and the latest
    benchmark and acceptance runs (open summaries, as their reports are)."""

    front_door: FrontDoorStatus | None = None
    network: NetworkStatus | None = None
    memory: MemoryStatus | None = None
    gateway: GatewayStatus | None = None
    benchmark: JSON | None = None
    acceptance: JSON | None = None
    engines: tuple[ReplicaEngineStatus, ...] = ()
    quarantine: tuple[QuarantinedNode, ...] | None = None  # quarantine.py ([]: all lifted)
    node_failures: tuple[NodeFailures, ...] | None = None
    model_staging: ModelStagingStatus | None = None  # staging.py (spec.model.source only)


def derive_status(
    report: ClusterReport,
    previous: Mapping[str, Any],
    now: datetime,
    parts: StatusParts | None = None,
) -> JSON:
    """The full status object for ``report`` and the other steps' ``parts``, reusing
    transition times from ``previous``: one typed InferenceClusterStatus, serialised once."""
    ready = sum(1 for r in report.replicas if r.phase is Phase.READY)
    given = parts or StatusParts()
    previous_conditions = previous.get("conditions") or []
    conditions, hand_made = _set_conditions(previous_conditions, _conditions(report), now)
    status = InferenceClusterStatus(
        observed_generation=report.generation,
        phase=cluster_phase(report).value,
        replicas=len(report.replicas),
        ready_replicas=ready,
        selector=report.selector,
        start=report.start_summary,
        conditions=tuple(conditions),
        replica_statuses=tuple(r.to_status() for r in report.replicas),
        restarts=sum(r.restarts for r in report.replicas),  # kubectl get icl -o wide
        front_door=given.front_door,
        network=given.network,
        memory=given.memory,
        engines=given.engines or None,
        quarantine=given.quarantine,
        node_failures=given.node_failures,
        gateway=given.gateway,
        benchmark=given.benchmark,
        acceptance=given.acceptance,
        model_staging=given.model_staging,
    )
    out = wire(status)
    if hand_made:  # only a hand-made previous status has them; kept as they were
        out["conditions"] = _ordered([*out["conditions"], *hand_made])
    return out
