"""Each starting rank's stage, the time against the grace, the estimate: pure.

Why: a start of many minutes used to be one word, "starting". Here, per replica that is
starting, each rank of its current generation gets a stage: first from its pod (not
placed, a container waiting on its image, which init container runs: the network
preflight, verify-model, the launch check), then, once the engine runs, from SGLang's own
log lines (``sglang_contract/start_log.py``), which the observe step read for exactly
these pods (:func:`pods_to_read`: engine running, the replica not serving). The time
counts from the generation's first rank pod; the estimate is this replica's last
completed start (``lastStartSeconds``, written when rank 0 turns Ready), else another
replica's of the same object. An Event says when ranks move to a new stage (not per
shard), and the pass looks again every :data:`POLL_SECONDS` while a start runs, since
log lines trigger no watch event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Final

from sparkllm.api import InferenceCluster, Phase, Reason
from sparkllm.api.start_status import RankStart, ReplicaStart
from sparkllm.keys import LABEL_GENERATION, LABEL_REPLICA
from sparkllm.reconcile.decide.actions import PendingEvent
from sparkllm.reconcile.decide.replica_state import pod_ready, pods_by_rank
from sparkllm.reconcile.decide.replicas import Observed, label
from sparkllm.reconcile.decide.status import ClusterReport, ReplicaReport
from sparkllm.sglang_contract.launch_check import LAUNCH_CHECK_CONTAINER
from sparkllm.sglang_contract.start_log import ORDER, StartStage, read_start_log

JSON = dict[str, Any]
ENGINE_CONTAINER: Final = "engine"
VERIFY_CONTAINER: Final = "verify-model"  # render/ranks.py's (render sits above decide)
POLL_SECONDS: Final = 5.0
LOG_TAIL_LINES: Final = 400  # a start's stage lines are few; progress bars fill the rest
LOG_LIMIT_BYTES: Final = 128 * 1024
# A container waiting for these reasons is waiting on its image (or its sandbox).
_PULLING: Final = frozenset({"ContainerCreating", "PodInitializing", "ErrImagePull",
                             "ImagePullBackOff", "PullImage"})  # fmt: skip


@dataclass(frozen=True)
class StartOutcome:
    """Per replica index: its ``start`` (None when not starting) and ``lastStartSeconds``;
    the printer column's summary; the Events; when to look again."""

    replicas: Mapping[int, tuple[ReplicaStart | None, int | None]] = field(default_factory=dict)
    summary: str | None = None
    events: tuple[PendingEvent, ...] = ()
    retry_after: float | None = None


def _state(status: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    state = status.get("state") or {}
    for key in ("running", "terminated", "waiting"):
        if key in state:
            return key, state[key] or {}
    return "waiting", {}


def _engine_status(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((s for s in statuses if s.get("name") == ENGINE_CONTAINER), None)


def engine_running(pod: Mapping[str, Any]) -> bool:
    status = _engine_status(pod)
    return status is not None and _state(status)[0] == "running"


def _init_stage(name: str) -> StartStage:
    if name == VERIFY_CONTAINER:
        return StartStage.MODEL_CHECK
    if name == LAUNCH_CHECK_CONTAINER:
        return StartStage.LAUNCH_CHECK
    return StartStage.PREFLIGHT  # the network (and memory) preflight's containers


def pod_stage(pod: Mapping[str, Any], log: str | None, *, rank: int) -> RankStart:
    """One rank pod's stage: its pod's state before the engine runs, its log after."""
    if not (pod.get("spec") or {}).get("nodeName"):
        return RankStart(rank=rank, stage=StartStage.PENDING.value)
    status = pod.get("status") or {}
    inits = status.get("initContainerStatuses") or []
    for init in inits:
        kind, detail = _state(init)
        if kind == "terminated" and detail.get("exitCode") == 0:
            continue
        if kind == "waiting" and detail.get("reason", "ContainerCreating") in _PULLING:
            return RankStart(rank=rank, stage=StartStage.PULLING_IMAGE.value)
        return RankStart(rank=rank, stage=_init_stage(str(init.get("name"))).value)
    if not inits and (pod.get("spec") or {}).get("initContainers"):
        return RankStart(rank=rank, stage=StartStage.PULLING_IMAGE.value)
    engine = _engine_status(pod)
    if engine is None or _state(engine)[0] == "waiting":
        return RankStart(rank=rank, stage=StartStage.PULLING_IMAGE.value)
    if rank == 0 and pod_ready(pod):
        return RankStart(rank=rank, stage=StartStage.READY.value)
    reading = None if log is None else read_start_log(log.splitlines(), rank=rank)
    if reading is None:
        return RankStart(rank=rank, stage=StartStage.ENGINE_STARTING.value)
    return RankStart(rank=rank, stage=reading.stage.value, shards=reading.shards)


def _current(observed: Observed, report: ReplicaReport) -> dict[int, JSON]:
    pods = [
        p
        for p in observed.by_replica(observed.pods, report.index)
        if label(p, LABEL_GENERATION) == str(report.generation)
        and not (p.get("metadata") or {}).get("deletionTimestamp")
    ]
    return pods_by_rank(pods)


def pods_to_read(observed: Observed) -> list[JSON]:
    """The pods whose engine log the observe step reads: engine running, and the
    replica's rank 0 not Ready (a serving replica's log is not read at all)."""
    chosen = []
    for pod in observed.pods:
        if not engine_running(pod):
            continue
        replica = label(pod, LABEL_REPLICA)
        generation = label(pod, LABEL_GENERATION)
        peers = [
            p
            for p in observed.pods
            if label(p, LABEL_REPLICA) == replica and label(p, LABEL_GENERATION) == generation
        ]
        rank0 = pods_by_rank(peers).get(0)
        if rank0 is None or not pod_ready(rank0):
            chosen.append(pod)
    return chosen


def _created(pod: Mapping[str, Any]) -> datetime | None:
    text = (pod.get("metadata") or {}).get("creationTimestamp")
    try:
        return datetime.fromisoformat(str(text)) if text else None
    except ValueError:
        return None


def _ready_since(pod: Mapping[str, Any]) -> datetime | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") == "True":
            try:
                return datetime.fromisoformat(str(cond.get("lastTransitionTime")))
            except ValueError:
                return None
    return None


def _previous(previous: Mapping[str, Any]) -> dict[int, Mapping[str, Any]]:
    return {int(r["index"]): r for r in previous.get("replicaStatuses") or [] if "index" in r}


def _estimate(index: int, last: Mapping[int, int | None]) -> int | None:
    own = last.get(index)
    if own is not None:
        return own
    others = [v for v in last.values() if v is not None]
    return max(others) if others else None


def decide_starts(
    ic: InferenceCluster,
    observed: Observed,
    replicas: Sequence[ReplicaReport],
    *,
    previous: Mapping[str, Any],
    logs: Mapping[str, str],
    now: datetime,
) -> StartOutcome:
    """Every replica's start block and lastStartSeconds, the summary, the Events.

    ``logs`` is each read pod's log text by pod uid (``pods_to_read``).
    """
    grace = ic.spec.restart_policy.startup_grace_seconds
    before = _previous(previous)
    last: dict[int, int | None] = {
        i: (int(r["lastStartSeconds"]) if r.get("lastStartSeconds") is not None else None)
        for i, r in before.items()
    }
    out: dict[int, tuple[ReplicaStart | None, int | None]] = {}
    events: list[PendingEvent] = []
    starting: list[tuple[int, ReplicaStart]] = []
    for report in replicas:
        pods = _current(observed, report)
        was = before.get(report.index, {}).get("start")
        if report.phase is Phase.READY and was and 0 in pods:
            began = datetime.fromisoformat(str(was["startedAt"]))
            ready_at = _ready_since(pods[0]) or now
            last[report.index] = max(0, round((ready_at - began).total_seconds()))
        if report.phase is not Phase.STARTING or not pods:  # a restart's new pods start
            continue
        began_at = min((t for p in pods.values() if (t := _created(p)) is not None), default=now)
        old_ranks = {int(r["rank"]): r for r in (was or {}).get("ranks") or []}
        ranks = []
        for rank, pod in sorted(pods.items()):
            uid = str((pod.get("metadata") or {}).get("uid") or "")
            seen = pod_stage(pod, logs.get(uid), rank=rank)
            old = old_ranks.get(rank)
            since = now.replace(microsecond=0)
            if old is not None and old.get("stage") == seen.stage and old.get("since"):
                since = datetime.fromisoformat(str(old["since"]))
            ranks.append(seen.model_copy(update={"since": since}))
        start = ReplicaStart(
            started_at=began_at,
            elapsed_seconds=max(0, int((now - began_at).total_seconds())),
            grace_seconds=grace,
            estimate_seconds=_estimate(report.index, last),
            ranks=tuple(ranks),
        )
        starting.append((report.index, start))
        moved = [r for r in ranks if (old_ranks.get(r.rank) or {}).get("stage") != r.stage]
        if moved:
            events.append(
                PendingEvent(False, Reason.START_STAGE, _event(report.index, moved, start))
            )
    started = dict(starting)
    for report in replicas:
        out[report.index] = (started.get(report.index), last.get(report.index))
    return StartOutcome(
        replicas=out,
        summary=_summary(starting, last),
        events=tuple(events),
        retry_after=POLL_SECONDS if starting else None,
    )


def _event(index: int, moved: Sequence[RankStart], start: ReplicaStart) -> str:
    ranks = ", ".join(
        f"rank {r.rank} {r.stage}" + (f" ({r.shards} shards)" if r.shards else "") for r in moved
    )
    estimate = (
        f"; last start took {start.estimate_seconds} s"
        if start.estimate_seconds is not None
        else ""
    )
    return (
        f"replica {index} start: {ranks}, {start.elapsed_seconds} s since the start of "
        f"startupGraceSeconds {start.grace_seconds} s{estimate}"
    )


def _summary(
    starting: Sequence[tuple[int, ReplicaStart]], last: Mapping[int, int | None]
) -> str | None:
    """The least advanced rank of any starting replica, as one word; else how long the
    last start took (``Ready:300s``); None before any start was seen."""
    ranks = [(ORDER.index(StartStage(r.stage)), i, r, s) for i, s in starting for r in s.ranks]
    if ranks:
        _, _, rank, start = min(ranks, key=lambda item: (item[0], item[1], item[2].rank))
        word = rank.stage + (f":{rank.shards}" if rank.shards else "")
        word += f":{start.elapsed_seconds}s/{start.grace_seconds}s"
        return word + (f"~{start.estimate_seconds}s" if start.estimate_seconds is not None else "")
    known = [v for _, v in sorted(last.items()) if v is not None]
    return f"Ready:{known[0]}s" if known else None


def with_starts(report: ClusterReport, outcome: StartOutcome) -> ClusterReport:
    """``report`` with each replica's start block and lastStartSeconds, and the summary."""
    replicas = tuple(
        replace(
            r, start=outcome.replicas[r.index][0], last_start_seconds=outcome.replicas[r.index][1]
        )
        if r.index in outcome.replicas
        else r
        for r in report.replicas
    )
    return replace(report, replicas=replicas, start_summary=outcome.summary)
