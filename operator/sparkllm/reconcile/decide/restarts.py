"""Gang-restart decisions for one replica: pure, from observed facts and history.

An SGLang pipeline cannot lose a rank and go on: the survivors hang in NCCL until a
watchdog fires. So when any rank drops, the whole replica restarts, in two phases that
survive an operator crash because their state lives in the StatefulSets themselves:

1. **stop**: every rank StatefulSet goes to ``replicas: 0`` with the next restart
   generation on its pod template (the old pods are deleted);
2. **start**: once no pod of an older generation is left, ``replicas: 1`` again, but
   not before the backoff since the previous restart has passed.

So two generations never run in one replica. The first restart in an hour is
immediate; each further one waits ``backoffSeconds[n-1]`` (the last entry repeats);
past ``maxRestartsPerHour`` the replica stays stopped and Degraded until the spec
changes or the user sets the annotation ``sparkllm.io/restart: now``.

A rank counts as dropped when its container exited or restarted, its pod failed, or its
pod was replaced or deleted after the replica's generation had formed (``members``: the
pod uids recorded once every rank of the generation existed). A NotReady or missing
node is not restarted around — the ranks are pinned by cable: the replica is stopped at
once (its survivors would only hang), marked Degraded, and started again when the node is
back — or, when a free healthy spare group exists, moved there at once (``failover``,
decided by placement: ``failover.py``), as a gang restart on the new group's nodes that
does not spend the budget. A quarantined node holds its replica like a NotReady one. A
spec change that needs new pods rolls replica by replica: a replica restarts for
an update only while every other replica serves.

A hung pipeline — rank 0 alive but NotReady after it had served (``hang.py``) — is a
dropped rank too, past ``HUNG_AFTER``: cause "pipeline hung", counted like a crash.

Planned restarts drain first (``Action.DRAIN``), crash restarts never wait: a rolling
update or ``sparkllm.io/restart=now`` takes a serving replica out of routing, waits for
its in-flight requests up to the drain deadline (``drain.py``, as for a scale-down), and
only then stops it. The drain lives on rank 0's pod (``DrainFacts``: the annotations
``sparkllm.io/drain-started`` and ``sparkllm.io/drain-reason``), so a consumed restart
annotation or an operator restart mid-drain loses nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum

from sparkllm.api import Phase, RestartPolicySpec
from sparkllm.reconcile.decide.hang import HUNG_AFTER, hung_cause
from sparkllm.reconcile.decide.replica_state import ReplicaState

HOUR = timedelta(hours=1)
FORCE_CAUSE = "restart requested (annotation sparkllm.io/restart)"
UPDATE_CAUSE = "spec changed (rolling update)"
REQUESTED_SUFFIX = "(requested)"  # a cause the user's sparkllm.io/restart=now gave


def is_requested(cause: str | None) -> bool:
    """A planned restart the user asked for (it opens a fresh budget window, and goes on
    once its annotation is consumed: the drain on rank 0 carries the cause)."""
    return cause is not None and (cause == FORCE_CAUSE or cause.endswith(REQUESTED_SUFFIX))


class Action(Enum):
    RUN = "run"  # keep (or put) the replica running at its generation
    STOP = "stop"  # begin a gang restart: stop all ranks, bump the generation
    WAIT = "wait"  # stopped; start when old pods are gone and backoff passed
    HOLD = "hold"  # stopped and left stopped (budget exhausted or node down)
    DRAIN = "drain"  # planned restart: out of routing, running, until its requests finish


@dataclass(frozen=True)
class History:
    """Restart bookkeeping carried in the replica's status."""

    restarts: int = 0
    restart_times: tuple[datetime, ...] = ()
    members: tuple[str, ...] = ()
    exhausted: bool = False
    node_down: bool = False  # a node of the replica was NotReady/missing last pass


@dataclass(frozen=True)
class Decision:
    action: Action
    phase: Phase
    message: str
    cause: str | None = None  # set when a NEW restart begins (for status, events, metrics)
    retry_at: datetime | None = None  # when to look again (backoff expiry)
    members: tuple[str, ...] = ()
    restart_times: tuple[datetime, ...] = ()
    exhausted: bool = False
    node_down: bool = False
    drain_reason: str | None = None  # DRAIN: the planned restart's cause
    drain_mark: bool = False  # DRAIN: take rank 0 out of routing (and stamp it) now


@dataclass(frozen=True)
class DrainFacts:
    """Rank 0's drain before a planned restart, as its pod shows it."""

    reason: str | None = None  # a planned restart's drain under way, and its cause
    mark: bool = True  # rank 0 still serves: take it out of routing first
    done: bool = False  # drained (no request left after the router let go, or deadline)
    retry_after: float | None = None  # when to look again
    running: int | None = None  # requests rank 0 still runs (None: not read)


def recent(times: Sequence[datetime], now: datetime) -> tuple[datetime, ...]:
    return tuple(t for t in times if now - t < HOUR)


def backoff_delay(policy: RestartPolicySpec, restarts_in_window: int) -> timedelta:
    """Wait before the restart that follows ``restarts_in_window`` earlier ones."""
    if restarts_in_window == 0:
        return timedelta(0)
    steps = policy.backoff_seconds
    return timedelta(seconds=steps[min(restarts_in_window - 1, len(steps) - 1)])


def dropped_rank(state: ReplicaState, generation: int, members: Sequence[str]) -> str | None:
    """Why the running generation lost a rank, or None if it did not."""
    formed = len(members) == len(state.ranks) and all(members)
    for rank in state.ranks:
        if rank.failure is not None and rank.generation == generation:
            return rank.failure
        if not formed:
            continue
        if rank.pod is None:
            return f"rank {rank.rank} pod deleted"
        if rank.uid != members[rank.rank]:
            return f"rank {rank.rank} pod replaced (deleted by someone else)"
        if rank.terminating:
            return f"rank {rank.rank} pod is being deleted"
    return None


def current_members(
    state: ReplicaState, generation: int, previous: Sequence[str]
) -> tuple[str, ...]:
    """Keep the recorded members, or record them once every rank of ``generation`` exists."""
    if len(previous) == len(state.ranks) and all(previous):
        return tuple(previous)
    if all(r.uid and r.generation == generation and not r.terminating for r in state.ranks):
        return tuple(r.uid or "" for r in state.ranks)
    return ()


def decide(
    *,
    state: ReplicaState,
    generation: int,
    stopped: bool,
    history: History,
    policy: RestartPolicySpec,
    now: datetime,
    force_restart: bool = False,
    outdated: bool = False,
    others_ready: bool = True,
    blocked: str | None = None,
    unready_since: datetime | None = None,
    drain: DrainFacts = DrainFacts(),
    update_cause: str = UPDATE_CAUSE,
    force_cause: str = FORCE_CAUSE,
    failover: str | None = None,
    waiting: str | None = None,
) -> Decision:
    """What to do with one replica this pass, the first rule that applies winning.

    ``update_cause`` is why the replica is ``outdated`` (the restart cause status shows);
    ``force_cause`` the cause ``force_restart`` gives (an operator update it applies).

    ``blocked`` is a reason the replica must not run (the ranks' model copies disagree):
    it is stopped and held, uncounted, until the spec changes or a restart is requested.
    ``unready_since``: rank 0 lost readiness after serving, container alive (``hang.py``).
    ``failover``: why placement moved the replica to a spare group this pass.
    ``waiting``: what the replica waits for before it may start (its group's model copy,
    decide/staging.py): held stopped, Pending, nothing counted, no one asked to act.
    """
    times = recent(history.restart_times, now)
    if failover is not None and not stopped:  # stop the old group's ranks, start anew
        return _stop(cause=f"failover: {failover}", times=times, now=now, counted=False)
    if state.nodes_not_ready or state.nodes_missing or state.nodes_quarantined:
        return _node_down(state, stopped=stopped, history=history, times=times, now=now)
    members = current_members(state, generation, history.members)
    crashed = None if stopped else dropped_rank(state, generation, members)
    if crashed is None and not stopped and unready_since is not None:
        crashed = hung_cause(unready_since) if now - unready_since >= HUNG_AFTER else None
    planned = functools.partial(
        _planned,
        state=state,
        generation=generation,
        drain=drain,
        members=members,
        times=times,
        now=now,
    )
    if force_restart or (is_requested(drain.reason) and not stopped):
        cause = drain.reason if drain.reason and not force_restart else force_cause
        if stopped or crashed is not None:
            return _stop(cause=cause, times=(), now=now)
        return planned(cause)
    if blocked is not None:
        return _blocked(blocked, stopped=stopped, times=times, now=now)
    if waiting is not None:
        if not stopped:
            return _stop(cause=waiting, times=times, now=now, counted=False, phase=Phase.PENDING)
        return Decision(
            action=Action.HOLD, phase=Phase.PENDING, message=waiting, restart_times=times
        )
    if stopped:
        if history.exhausted:
            return _exhausted(policy, times)
        return _start(state, generation=generation, policy=policy, times=times, now=now)
    if crashed is None and (drain.reason is not None or outdated):
        if drain.reason is None and not others_ready:
            return Decision(
                action=Action.RUN,
                phase=Phase.READY if state.serving(generation) else Phase.STARTING,
                message="update waits for the other replicas",
                members=history.members,
                restart_times=times,
            )
        cause = drain.reason or update_cause
        return planned(cause)
    if history.exhausted:
        return _exhausted(policy, times)
    if crashed is not None:
        return _crashed(crashed, policy=policy, times=times, now=now)
    return _running(
        state, generation=generation, members=members, times=times, unready_since=unready_since
    )


def _running(
    state: ReplicaState,
    *,
    generation: int,
    members: tuple[str, ...],
    times: tuple[datetime, ...],
    unready_since: datetime | None,
) -> Decision:
    """Nothing to restart: serving, starting, or rank 0 unready for less than HUNG_AFTER."""
    if unready_since is not None:
        due = unready_since + HUNG_AFTER
        return Decision(
            action=Action.RUN,
            phase=Phase.DEGRADED,
            message=f"rank 0 not Ready since {unready_since:%H:%M:%S} (/health: no output); "
            f"restarted as a hung pipeline at {due:%H:%M:%S} unless it recovers",
            retry_at=due,
            members=members,
            restart_times=times,
        )
    ready = state.serving(generation)
    return Decision(
        action=Action.RUN,
        phase=Phase.READY if ready else Phase.STARTING,
        message="serving" if ready else "ranks starting",
        members=members,
        restart_times=times,
    )


def _planned(
    cause: str,
    *,
    state: ReplicaState,
    generation: int,
    drain: DrainFacts,
    members: tuple[str, ...],
    times: tuple[datetime, ...],
    now: datetime,
) -> Decision:
    """A planned restart: drain a serving replica first; stop at once what serves nothing."""
    if drain.done or not state.serving(generation):
        if is_requested(cause):  # the user's request also opens a fresh budget window
            return _stop(cause=cause, times=(), now=now)
        return _stop(cause=cause, times=times, now=now, counted=False)
    waiting = "" if drain.running is None else f", {drain.running} request(s) in flight"
    retry = drain.retry_after if drain.retry_after is not None else 2.0
    return Decision(
        action=Action.DRAIN,
        phase=Phase.RESTARTING,
        message=f"draining before gang restart ({cause}): out of routing{waiting}",
        retry_at=now + timedelta(seconds=retry),
        members=members,
        restart_times=times,
        drain_reason=cause,
        drain_mark=drain.mark,
    )


def _node_down(
    state: ReplicaState,
    *,
    stopped: bool,
    history: History,
    times: tuple[datetime, ...],
    now: datetime,
) -> Decision:
    """A node of the replica is NotReady or missing: stop now, then hold for the node."""
    which = ", ".join(
        [f"{n} NotReady" for n in state.nodes_not_ready]
        + [f"{n} missing" for n in state.nodes_missing]
        + [f"{n} quarantined" for n in state.nodes_quarantined]
    )
    if not stopped:
        # The survivors would hang in NCCL: stop them now (out of routing at once);
        # a lost node is not a restart loop, so it does not spend the budget.
        return _stop(
            cause=f"node {which}",
            times=times,
            now=now,
            counted=False,
            phase=Phase.DEGRADED,
            node_down=True,
        )
    return Decision(
        action=Action.HOLD,
        phase=Phase.DEGRADED,
        message=f"node {which}; ranks are pinned to their nodes, waiting for the node",
        restart_times=times,
        exhausted=history.exhausted,
        node_down=True,
    )


def _blocked(
    blocked: str, *, stopped: bool, times: tuple[datetime, ...], now: datetime
) -> Decision:
    if not stopped:
        return _stop(cause=blocked, times=times, now=now, counted=False, phase=Phase.DEGRADED)
    return Decision(
        action=Action.HOLD,
        phase=Phase.DEGRADED,
        message=f"{blocked}; fix the cause, then change the spec or annotate "
        "sparkllm.io/restart=now",
        restart_times=times,
    )


def _exhausted(policy: RestartPolicySpec, times: tuple[datetime, ...]) -> Decision:
    return Decision(
        action=Action.HOLD,
        phase=Phase.DEGRADED,
        message=f"restart budget exhausted ({policy.max_restarts_per_hour} per hour); "
        "fix the cause, then change the spec or annotate sparkllm.io/restart=now",
        restart_times=times,
        exhausted=True,
    )


def _start(
    state: ReplicaState,
    *,
    generation: int,
    policy: RestartPolicySpec,
    times: tuple[datetime, ...],
    now: datetime,
) -> Decision:
    """A stopped replica starts once its old pods are gone and the backoff has passed."""
    old_pods = [r for r in state.ranks if r.pod is not None and r.generation != generation]
    due = (times[-1] + backoff_delay(policy, len(times) - 1)) if times else now
    if old_pods:
        return Decision(
            action=Action.WAIT,
            phase=Phase.RESTARTING,
            message=f"stopping {len(old_pods)} rank(s) of the previous generation",
            restart_times=times,
        )
    if due > now:
        return Decision(
            action=Action.WAIT,
            phase=Phase.RESTARTING,
            message=f"backing off until {due:%H:%M:%S}",
            retry_at=due,
            restart_times=times,
        )
    return Decision(
        action=Action.RUN, phase=Phase.STARTING, message="starting ranks", restart_times=times
    )


def _crashed(
    cause: str, *, policy: RestartPolicySpec, times: tuple[datetime, ...], now: datetime
) -> Decision:
    """A rank dropped: gang restart, unless the hour's budget is spent."""
    if len(times) >= policy.max_restarts_per_hour:
        return Decision(
            action=Action.HOLD,
            phase=Phase.DEGRADED,
            message=f"{cause}; restart budget exhausted ({len(times)} restarts in the "
            "last hour); change the spec or annotate sparkllm.io/restart=now to resume",
            restart_times=times,
            exhausted=True,
        )
    return _stop(cause=cause, times=times, now=now)


def _stop(
    *,
    cause: str,
    times: tuple[datetime, ...],
    now: datetime,
    counted: bool = True,
    phase: Phase = Phase.RESTARTING,
    node_down: bool = False,
) -> Decision:
    """Begin a gang restart; ``counted`` restarts spend the hourly budget."""
    return Decision(
        action=Action.STOP,
        phase=phase,
        message=f"gang restart: {cause}",
        cause=cause,
        restart_times=(*times, now) if counted else times,
        node_down=node_down,
    )
