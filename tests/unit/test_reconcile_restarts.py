"""Gang-restart decisions, pure: one big table of (observed replica, history) -> decision.

Each row is one situation from DESIGN.md's "Gang restart" paragraph: what the replica
looks like, whether it is stopped, what the status remembers (restart times, members,
exhausted), and the decision expected — action, phase, the cause (set only when a NEW
restart begins), whether the restart is counted against maxRestartsPerHour, and when
to look again. Backoff and budget rows use exact times: the first restart in an hour is
immediate, the n-th waits ``backoffSeconds[n-2]`` after the restart before it (the
previous entry in ``restartTimes``), the last entry repeats, and the hour slides.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sparkllm.api import Phase, RestartPolicySpec
from sparkllm.reconcile.decide.hang import hung_cause
from sparkllm.reconcile.decide.replica_state import RankState, ReplicaState
from sparkllm.reconcile.decide.restarts import (
    FORCE_CAUSE,
    HOUR,
    UPDATE_CAUSE,
    Action,
    Decision,
    DrainFacts,
    History,
    backoff_delay,
    current_members,
    decide,
    dropped_rank,
    recent,
)

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
GEN = 4
NODES = ("spark-a0", "spark-a1", "spark-a2")
UIDS = ("u0", "u1", "u2")
POLICY = RestartPolicySpec()  # backoff 10/30/60/300 s, 6 restarts per hour
OOM = "rank 1 container exited (code 137, OOMKilled)"
REPLACED_1 = "rank 1 pod replaced (deleted by someone else)"
REPLACED_2 = "rank 2 pod replaced (deleted by someone else)"


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def rank(
    k: int,
    *,
    present: bool = True,
    generation: int | None = GEN,
    uid: str | None = None,
    running: bool = True,
    ready: bool = True,
    terminating: bool = False,
    failure: str | None = None,
) -> RankState:
    if not present:
        return RankState(
            rank=k, node=NODES[k], pod=None, uid=None, generation=None, phase=None,
            running=False, ready=False, terminating=False, failure=None,
        )  # fmt: skip
    return RankState(
        rank=k,
        node=NODES[k],
        pod=f"llm-r0-rank{k}-0",
        uid=uid or UIDS[k],
        generation=generation,
        phase="Running" if running else "Pending",
        running=running,
        ready=ready,
        terminating=terminating,
        failure=failure,
    )


def replica(
    *ranks: RankState, not_ready: tuple[str, ...] = (), missing: tuple[str, ...] = ()
) -> ReplicaState:
    full = {r.rank: r for r in ranks}
    return ReplicaState(
        index=0,
        ranks=tuple(full.get(k, rank(k)) for k in range(3)),
        nodes_not_ready=not_ready,
        nodes_missing=missing,
    )


HEALTHY = replica()
FORMED = History(members=UIDS)
EMPTY = replica(*(rank(k, present=False) for k in range(3)))


def times(*seconds_ago: float) -> tuple[datetime, ...]:
    return tuple(ago(s) for s in sorted(seconds_ago, reverse=True))


@dataclass(frozen=True)
class Case:
    """One row: inputs to decide() and the expected decision fields."""

    state: ReplicaState = HEALTHY
    stopped: bool = False
    history: History = FORMED
    policy: RestartPolicySpec = POLICY
    kwargs: dict[str, Any] = field(default_factory=dict)
    action: Action = Action.RUN
    phase: Phase = Phase.READY
    cause: str | None = None
    message: str | None = None  # a substring of the decision's message
    restart_times: tuple[datetime, ...] | None = None  # None: same as history's recent ones
    members: tuple[str, ...] = ()
    exhausted: bool = False
    node_down: bool = False
    retry_at: datetime | None = None


MARK = DrainFacts(mark=True, retry_after=6.0)  # a serving rank 0 not yet out of routing


def policy(**fields: Any) -> RestartPolicySpec:
    return RestartPolicySpec.model_validate(fields)


CASES: dict[str, Case] = {
    # --- running replicas ------------------------------------------------------------
    "healthy-ready": Case(message="serving", members=UIDS),
    "healthy-first-pass-records-members": Case(history=History(), members=UIDS),
    "healthy-keeps-recent-restarts": Case(
        history=History(members=UIDS, restart_times=times(7200, 600)), members=UIDS,
        restart_times=times(600),
    ),
    "starting-rank0-not-ready": Case(
        state=replica(rank(0, ready=False)), phase=Phase.STARTING, message="ranks starting",
        members=UIDS,
    ),
    "starting-ranks-loading": Case(
        state=replica(*(rank(k, running=False, ready=False) for k in range(3))),
        history=History(), phase=Phase.STARTING, members=UIDS,
    ),
    "members-not-formed-missing-pod-is-no-restart": Case(
        state=replica(rank(2, present=False)), history=History(), phase=Phase.STARTING,
    ),
    "members-not-formed-old-pod-is-no-restart": Case(
        state=replica(rank(1, generation=GEN - 1)), history=History(), phase=Phase.STARTING,
    ),
    "container-exit-stops-counted": Case(
        state=replica(rank(1, running=False, failure=OOM)),
        action=Action.STOP, phase=Phase.RESTARTING, cause=OOM, message=f"gang restart: {OOM}",
        restart_times=(NOW,),
    ),
    "container-exit-before-members-formed": Case(
        state=replica(rank(1, running=False, failure=OOM), rank(2, present=False)),
        history=History(), action=Action.STOP, phase=Phase.RESTARTING, cause=OOM,
        restart_times=(NOW,),
    ),
    "failure-of-an-old-generation-pod-is-ignored": Case(
        state=replica(rank(1, generation=GEN - 1, uid="old", running=False, failure=OOM)),
        history=History(), phase=Phase.STARTING,
    ),
    "pod-deleted-after-members-formed": Case(
        state=replica(rank(2, present=False)), action=Action.STOP, phase=Phase.RESTARTING,
        cause="rank 2 pod deleted", restart_times=(NOW,),
    ),
    "pod-replaced-uid-differs": Case(
        state=replica(rank(1, uid="someone-elses")), action=Action.STOP,
        phase=Phase.RESTARTING, cause="rank 1 pod replaced (deleted by someone else)",
        restart_times=(NOW,),
    ),
    "pod-being-deleted": Case(
        state=replica(rank(0, terminating=True)), action=Action.STOP, phase=Phase.RESTARTING,
        cause="rank 0 pod is being deleted", restart_times=(NOW,),
    ),
    "first-failing-rank-names-the-cause": Case(
        state=replica(rank(0, present=False), rank(2, running=False, failure="rank 2 x")),
        action=Action.STOP, phase=Phase.RESTARTING, cause="rank 0 pod deleted",
        restart_times=(NOW,),
    ),
    # --- nodes ------------------------------------------------------------------------
    "node-not-ready-while-running-stops-uncounted": Case(
        state=replica(not_ready=("spark-a1",)),
        history=History(members=UIDS, restart_times=times(100)),
        action=Action.STOP, phase=Phase.DEGRADED, cause="node spark-a1 NotReady",
        node_down=True, restart_times=times(100),
    ),
    "node-missing-while-running": Case(
        state=replica(missing=("spark-a2",)), action=Action.STOP, phase=Phase.DEGRADED,
        cause="node spark-a2 missing", node_down=True, restart_times=(),
    ),
    "nodes-not-ready-and-missing": Case(
        state=replica(not_ready=("spark-a0",), missing=("spark-a2",)), action=Action.STOP,
        phase=Phase.DEGRADED, cause="node spark-a0 NotReady, spark-a2 missing", node_down=True,
        restart_times=(),
    ),
    "node-down-while-stopped-holds": Case(
        state=replica(*(rank(k, present=False) for k in range(3)), not_ready=("spark-a1",)),
        stopped=True, history=History(node_down=True, restart_times=times(50)),
        action=Action.HOLD, phase=Phase.DEGRADED,
        message="node spark-a1 NotReady; ranks are pinned to their nodes, waiting for the node",
        node_down=True,
    ),
    "node-down-while-stopped-keeps-exhausted": Case(
        state=replica(missing=("spark-a0",)), stopped=True,
        history=History(node_down=True, exhausted=True), action=Action.HOLD,
        phase=Phase.DEGRADED, message="spark-a0 missing", node_down=True, exhausted=True,
    ),
    "node-back-while-stopped-starts": Case(
        state=EMPTY, stopped=True, history=History(node_down=True), action=Action.RUN,
        phase=Phase.STARTING, message="starting ranks",
    ),
    "node-back-while-stopped-backs-off": Case(
        state=EMPTY, stopped=True, history=History(node_down=True, restart_times=times(600, 5)),
        action=Action.WAIT, phase=Phase.RESTARTING, retry_at=ago(5) + timedelta(seconds=10),
        message="backing off until 12:00:05",
    ),
    # --- stopped replicas: the start half of a restart ---------------------------------
    "stopped-with-old-generation-pods-waits": Case(
        state=replica(rank(0, generation=GEN - 1), rank(1, generation=GEN - 1, terminating=True),
                      rank(2, present=False)),
        stopped=True, history=History(restart_times=times(1)), action=Action.WAIT,
        phase=Phase.RESTARTING, message="stopping 2 rank(s) of the previous generation",
    ),
    "stopped-old-pods-wait-even-after-backoff": Case(
        state=replica(rank(0, generation=GEN - 1), rank(1, present=False), rank(2, present=False)),
        stopped=True, history=History(restart_times=times(3000)), action=Action.WAIT,
        phase=Phase.RESTARTING, message="stopping 1 rank(s)",
    ),
    "stopped-with-current-generation-pods-starts": Case(
        state=replica(rank(0, running=False, ready=False)), stopped=True, history=History(),
        action=Action.RUN, phase=Phase.STARTING, message="starting ranks",
    ),
    "backoff-first-restart-immediate": Case(
        state=EMPTY, stopped=True, history=History(restart_times=times(0)),
        action=Action.RUN, phase=Phase.STARTING,
    ),
    "backoff-second-waits-first-step-from-previous-restart": Case(
        state=EMPTY, stopped=True, history=History(restart_times=times(900, 4)),
        action=Action.WAIT, phase=Phase.RESTARTING, retry_at=ago(4) + timedelta(seconds=10),
    ),
    "backoff-second-due-exactly-now": Case(
        state=EMPTY, stopped=True, history=History(restart_times=times(900, 10)),
        action=Action.RUN, phase=Phase.STARTING,
    ),
    "backoff-third-waits-second-step": Case(
        state=EMPTY, stopped=True, history=History(restart_times=times(900, 800, 29)),
        action=Action.WAIT, phase=Phase.RESTARTING, retry_at=ago(29) + timedelta(seconds=30),
    ),
    "backoff-third-past-second-step": Case(
        state=EMPTY, stopped=True, history=History(restart_times=times(900, 800, 31)),
        action=Action.RUN, phase=Phase.STARTING,
    ),
    "backoff-last-entry-repeats": Case(
        state=EMPTY, stopped=True, policy=policy(maxRestartsPerHour=20),
        history=History(restart_times=times(3000, 2500, 2000, 1500, 1000, 500, 299)),
        action=Action.WAIT, phase=Phase.RESTARTING, retry_at=ago(299) + timedelta(seconds=300),
    ),
    "backoff-counts-only-the-last-hour": Case(
        state=EMPTY, stopped=True, history=History(restart_times=times(4000, 3700, 2)),
        action=Action.RUN, phase=Phase.STARTING, restart_times=times(2),
    ),
    "backoff-single-step-policy": Case(
        state=EMPTY, stopped=True, policy=policy(backoffSeconds=[45]),
        history=History(restart_times=times(500, 400, 44)),
        action=Action.WAIT, phase=Phase.RESTARTING, retry_at=ago(44) + timedelta(seconds=45),
    ),
    # --- the hourly budget --------------------------------------------------------------
    "budget-sixth-restart-allowed": Case(
        state=replica(rank(1, running=False, failure=OOM)),
        history=History(members=UIDS, restart_times=times(3000, 2500, 2000, 1500, 1000)),
        action=Action.STOP, phase=Phase.RESTARTING, cause=OOM,
        restart_times=(*times(3000, 2500, 2000, 1500, 1000), NOW),
    ),
    "budget-exhausted-holds-degraded": Case(
        state=replica(rank(1, running=False, failure=OOM)),
        history=History(members=UIDS, restart_times=times(3000, 2500, 2000, 1500, 1000, 500)),
        action=Action.HOLD, phase=Phase.DEGRADED, exhausted=True,
        message=f"{OOM}; restart budget exhausted (6 restarts in the last hour)",
    ),
    "budget-window-slides": Case(
        state=replica(rank(1, running=False, failure=OOM)),
        history=History(members=UIDS,
                        restart_times=times(3601, 3000, 2500, 2000, 1500, 1000)),
        action=Action.STOP, phase=Phase.RESTARTING, cause=OOM,
        restart_times=(*times(3000, 2500, 2000, 1500, 1000), NOW),
    ),
    "budget-restart-exactly-an-hour-old-no-longer-counts": Case(
        state=replica(rank(1, running=False, failure=OOM)),
        history=History(members=UIDS,
                        restart_times=times(3600, 3000, 2500, 2000, 1500, 1000)),
        action=Action.STOP, phase=Phase.RESTARTING, cause=OOM,
        restart_times=(*times(3000, 2500, 2000, 1500, 1000), NOW),
    ),
    "budget-zero-never-restarts": Case(
        state=replica(rank(2, present=False)), policy=policy(maxRestartsPerHour=0),
        action=Action.HOLD, phase=Phase.DEGRADED, exhausted=True,
        message="rank 2 pod deleted; restart budget exhausted (0 restarts",
    ),
    "exhausted-stays-held-when-the-window-passed": Case(
        state=EMPTY, stopped=True, history=History(exhausted=True, restart_times=times(7200)),
        action=Action.HOLD, phase=Phase.DEGRADED, exhausted=True, restart_times=(),
        message="restart budget exhausted (6 per hour)",
    ),
    "exhausted-stays-held-while-running": Case(
        history=History(members=UIDS, exhausted=True), action=Action.HOLD,
        phase=Phase.DEGRADED, exhausted=True,
    ),
    "force-restart-resets-an-exhausted-budget": Case(
        state=EMPTY, stopped=True,
        history=History(exhausted=True, restart_times=times(3000, 2500, 2000, 1500, 1000, 500)),
        kwargs={"force_restart": True}, action=Action.STOP, phase=Phase.RESTARTING,
        cause="restart requested (annotation sparkllm.io/restart)", restart_times=(NOW,),
    ),
    # Issue 16: a serving replica drains before a requested restart (was: STOP at once).
    "force-restart-of-a-serving-replica-drains-first": Case(
        kwargs={"force_restart": True, "drain": MARK}, action=Action.DRAIN,
        phase=Phase.RESTARTING, members=UIDS, retry_at=NOW + timedelta(seconds=6),
        message=f"draining before gang restart ({FORCE_CAUSE}): out of routing",
    ),
    "force-drain-continues-once-the-annotation-is-consumed": Case(
        kwargs={"drain": DrainFacts(reason=FORCE_CAUSE, mark=False, retry_after=2, running=3)},
        action=Action.DRAIN, phase=Phase.RESTARTING, members=UIDS,
        retry_at=NOW + timedelta(seconds=2), message="3 request(s) in flight",
    ),
    "force-drained-stops-counted-in-a-fresh-window": Case(
        history=History(members=UIDS, restart_times=times(3000, 100)),
        kwargs={"drain": DrainFacts(reason=FORCE_CAUSE, mark=False, done=True)},
        action=Action.STOP, phase=Phase.RESTARTING, cause=FORCE_CAUSE, restart_times=(NOW,),
    ),
    "force-restart-of-a-replica-not-serving-stops-at-once": Case(
        state=replica(rank(0, ready=False)), kwargs={"force_restart": True, "drain": MARK},
        action=Action.STOP, phase=Phase.RESTARTING, cause=FORCE_CAUSE, restart_times=(NOW,),
    ),
    "force-restart-of-a-crashed-replica-does-not-wait": Case(
        state=replica(rank(1, running=False, failure=OOM)),
        kwargs={"force_restart": True, "drain": MARK}, action=Action.STOP,
        phase=Phase.RESTARTING, cause=FORCE_CAUSE, restart_times=(NOW,),
    ),
    "node-down-beats-force-restart": Case(
        state=replica(not_ready=("spark-a2",)), kwargs={"force_restart": True},
        action=Action.STOP, phase=Phase.DEGRADED, cause="node spark-a2 NotReady", node_down=True,
    ),
    # --- rolling updates -----------------------------------------------------------------
    # Issue 16: the update drains the replica first (was: STOP at once), then stops it.
    "outdated-with-others-ready-drains-first": Case(
        history=History(members=UIDS, restart_times=times(100)),
        kwargs={"outdated": True, "others_ready": True, "drain": MARK}, action=Action.DRAIN,
        phase=Phase.RESTARTING, members=UIDS, retry_at=NOW + timedelta(seconds=6),
        message=f"draining before gang restart ({UPDATE_CAUSE})",
    ),
    "outdated-drained-stops-uncounted": Case(
        history=History(members=UIDS, restart_times=times(100)),
        kwargs={"outdated": True, "drain": DrainFacts(reason=UPDATE_CAUSE, mark=False, done=True)},
        action=Action.STOP, phase=Phase.RESTARTING, cause=UPDATE_CAUSE, restart_times=times(100),
    ),
    "update-drain-under-way-does-not-wait-for-others": Case(
        kwargs={"outdated": True, "others_ready": False,
                "drain": DrainFacts(reason=UPDATE_CAUSE, mark=False, retry_after=2)},
        action=Action.DRAIN, phase=Phase.RESTARTING, members=UIDS,
        retry_at=NOW + timedelta(seconds=2),
    ),
    "crash-during-a-drain-restarts-at-once-counted": Case(
        state=replica(rank(1, running=False, failure=OOM)),
        kwargs={"outdated": True, "drain": DrainFacts(reason=UPDATE_CAUSE, mark=False)},
        action=Action.STOP, phase=Phase.RESTARTING, cause=OOM, restart_times=(NOW,),
    ),
    "drained-replica-that-lost-rank-0-readiness-stops-at-once": Case(
        state=replica(rank(0, ready=False)),
        kwargs={"outdated": True, "drain": DrainFacts(reason=UPDATE_CAUSE, mark=False)},
        action=Action.STOP, phase=Phase.RESTARTING, cause=UPDATE_CAUSE,
    ),
    # --- hung pipelines: rank 0 alive, NotReady after it served (hang.unready_since) ------
    "rank-0-unready-after-serving-is-degraded-until-hung-after": Case(
        state=replica(rank(0, ready=False)), kwargs={"unready_since": ago(59)},
        phase=Phase.DEGRADED, members=UIDS, retry_at=ago(59) + timedelta(seconds=60),
        message="rank 0 not Ready since 11:59:01",
    ),
    "rank-0-unready-for-hung-after-is-a-counted-gang-restart": Case(
        state=replica(rank(0, ready=False)), kwargs={"unready_since": ago(60)},
        history=History(members=UIDS, restart_times=times(500)),
        action=Action.STOP, phase=Phase.RESTARTING, cause=hung_cause(ago(60)),
        restart_times=(*times(500), NOW),
    ),
    "hung-past-the-budget-holds": Case(
        state=replica(rank(0, ready=False)), kwargs={"unready_since": ago(600)},
        history=History(members=UIDS, restart_times=times(3000, 2500, 2000, 1500, 1000, 500)),
        action=Action.HOLD, phase=Phase.DEGRADED, exhausted=True,
        message="pipeline hung: rank 0 alive but not Ready since 11:50:00",
    ),
    "hung-outranks-a-waiting-update": Case(
        state=replica(rank(0, ready=False)),
        kwargs={"unready_since": ago(90), "outdated": True, "others_ready": True},
        action=Action.STOP, phase=Phase.RESTARTING, cause=hung_cause(ago(90)),
        restart_times=(NOW,),
    ),
    "outdated-without-others-ready-keeps-serving": Case(
        kwargs={"outdated": True, "others_ready": False}, action=Action.RUN, phase=Phase.READY,
        message="update waits for the other replicas", members=UIDS,
    ),
    "outdated-waiting-replica-still-starting": Case(
        state=replica(rank(0, ready=False)), kwargs={"outdated": True, "others_ready": False},
        action=Action.RUN, phase=Phase.STARTING, members=UIDS,
    ),
    "outdated-while-stopped-just-starts": Case(
        state=EMPTY, stopped=True, history=History(), kwargs={"outdated": True},
        action=Action.RUN, phase=Phase.STARTING, message="starting ranks",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_decide(name: str) -> None:
    case = CASES[name]
    decision = decide(
        state=case.state,
        generation=GEN,
        stopped=case.stopped,
        history=case.history,
        policy=case.policy,
        now=NOW,
        **case.kwargs,
    )
    assert decision.action is case.action
    assert decision.phase is case.phase
    assert decision.cause == case.cause
    if case.message is not None:
        assert case.message in decision.message
    want_times = (
        recent(case.history.restart_times, NOW)
        if case.restart_times is None
        else case.restart_times
    )
    assert decision.restart_times == want_times
    assert decision.members == case.members
    assert decision.exhausted is case.exhausted
    assert decision.node_down is case.node_down
    assert decision.retry_at == case.retry_at
    if decision.action is Action.STOP:
        assert decision.message == f"gang restart: {decision.cause}"
    else:
        assert decision.cause is None  # a cause marks a NEW restart only


def test_a_crash_is_restarted_even_while_an_update_waits() -> None:
    decision = decide(
        state=replica(rank(1, running=False, failure=OOM)),
        generation=GEN,
        stopped=False,
        history=History(members=UIDS),
        policy=POLICY,
        now=NOW,
        outdated=True,
        others_ready=False,
    )
    assert decision.action is Action.STOP
    assert decision.cause == OOM


def test_a_restart_sequence_backs_off_and_then_exhausts() -> None:
    """Crash, stop, start, crash again... the decisions of successive passes, chained."""
    history = History(members=UIDS)
    now = NOW
    retry_waits: list[float] = []
    crashed = replica(rank(1, running=False, failure=OOM))
    for _ in range(10):
        stop = decide(state=crashed, generation=GEN, stopped=False, history=history,
                      policy=POLICY, now=now)  # fmt: skip
        if stop.action is Action.HOLD:
            break
        assert stop.action is Action.STOP
        history = replace(history, restart_times=stop.restart_times, members=())
        start = decide(state=EMPTY, generation=GEN, stopped=True, history=history,
                       policy=POLICY, now=now)  # fmt: skip
        if start.action is Action.WAIT:
            assert start.retry_at is not None
            retry_waits.append((start.retry_at - now).total_seconds())
            now = start.retry_at
            start = decide(state=EMPTY, generation=GEN, stopped=True, history=history,
                           policy=POLICY, now=now)  # fmt: skip
        assert start.action is Action.RUN
        now += timedelta(seconds=1)  # the new generation crashes a second after it starts
    assert retry_waits == [10, 30, 60, 300, 300]
    assert stop.action is Action.HOLD
    assert stop.exhausted
    assert len(history.restart_times) == POLICY.max_restarts_per_hour


# --- the helpers directly ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("steps", "restarts", "seconds"),
    [
        ((10, 30, 60, 300), 0, 0),
        ((10, 30, 60, 300), 1, 10),
        ((10, 30, 60, 300), 2, 30),
        ((10, 30, 60, 300), 3, 60),
        ((10, 30, 60, 300), 4, 300),
        ((10, 30, 60, 300), 9, 300),
        ((7,), 0, 0),
        ((7,), 1, 7),
        ((7,), 5, 7),
    ],
)
def test_backoff_delay(steps: tuple[int, ...], restarts: int, seconds: int) -> None:
    spec = policy(backoffSeconds=list(steps))
    assert backoff_delay(spec, restarts) == timedelta(seconds=seconds)


def test_recent_keeps_the_last_hour_in_order() -> None:
    history = (ago(7200), ago(3600), ago(3599.5), ago(60), NOW)
    assert recent(history, NOW) == (ago(3599.5), ago(60), NOW)
    assert recent((), NOW) == ()
    assert timedelta(hours=1) == HOUR


@pytest.mark.parametrize(
    ("state", "previous", "members"),
    [
        pytest.param(HEALTHY, (), UIDS, id="records-once-all-exist"),
        pytest.param(HEALTHY, ("x", "y", "z"), ("x", "y", "z"), id="keeps-recorded"),
        pytest.param(replica(rank(2, present=False)), UIDS, UIDS, id="keeps-when-a-pod-goes"),
        pytest.param(replica(rank(2, present=False)), (), (), id="missing-pod"),
        pytest.param(replica(rank(1, generation=GEN - 1)), (), (), id="old-generation-pod"),
        pytest.param(replica(rank(1, generation=None)), (), (), id="unlabelled-pod"),
        pytest.param(replica(rank(0, terminating=True)), (), (), id="terminating-pod"),
        pytest.param(HEALTHY, ("u0", "u1"), UIDS, id="partial-record-is-redone"),
        pytest.param(HEALTHY, ("u0", "", "u2"), UIDS, id="blank-member-is-redone"),
        pytest.param(replica(rank(1, running=False, ready=False)), (), UIDS,
                     id="starting-pods-count"),
    ],
)  # fmt: skip
def test_current_members(
    state: ReplicaState, previous: tuple[str, ...], members: tuple[str, ...]
) -> None:
    assert current_members(state, GEN, previous) == members


@pytest.mark.parametrize(
    ("state", "members", "cause"),
    [
        pytest.param(HEALTHY, UIDS, None, id="healthy"),
        pytest.param(HEALTHY, (), None, id="healthy-not-formed"),
        pytest.param(replica(rank(1, failure=OOM)), (), OOM, id="failure-needs-no-members"),
        pytest.param(replica(rank(1, generation=GEN - 1, uid="old", failure=OOM)), UIDS,
                     REPLACED_1, id="old-failure-but-replaced"),
        pytest.param(replica(rank(1, generation=GEN - 1, failure=OOM)), (), None,
                     id="old-failure-ignored"),
        pytest.param(replica(rank(0, present=False)), UIDS, "rank 0 pod deleted", id="deleted"),
        pytest.param(replica(rank(0, present=False)), ("u0", "u1"), None, id="members-incomplete"),
        pytest.param(replica(rank(2, uid="other")), UIDS,
                     "rank 2 pod replaced (deleted by someone else)", id="replaced"),
        pytest.param(replica(rank(2, terminating=True)), UIDS, "rank 2 pod is being deleted",
                     id="terminating"),
        pytest.param(replica(rank(2, uid="other", terminating=True)), UIDS,
                     REPLACED_2, id="replaced-wins-over-terminating"),
        pytest.param(replica(rank(1, present=False), rank(2, failure="rank 2 boom")), UIDS,
                     "rank 1 pod deleted", id="lowest-rank-first"),
    ],
)  # fmt: skip
def test_dropped_rank(state: ReplicaState, members: tuple[str, ...], cause: str | None) -> None:
    assert dropped_rank(state, GEN, members) == cause


def test_decision_defaults_are_empty() -> None:
    decision = Decision(action=Action.RUN, phase=Phase.READY, message="m")
    assert (decision.cause, decision.retry_at, decision.members, decision.restart_times) == (
        None, None, (), (),
    )  # fmt: skip
    assert not decision.exhausted
    assert not decision.node_down
