"""``decide`` as a table: an observation in, the plan of every write out — no cluster.

In the style of LWS's and CloudNativePG's controller tables: each case builds what one
pass observes from small fixtures (``reconcile_fixtures``: the object, nodes, the
objects the operator applied, rank pods; ``reconcile_world``: faults and the moves
between passes) and states what the plan must hold — objects applied and pruned, the
status phase, conditions and replica phases, the Events, the restarts counted, the
drain patches, when to look again. Every documented behaviour (docs/operator.md,
DESIGN.md "Behaviour") has a row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from sparkllm.api import Reason
from sparkllm.integrity import ModelSummary
from sparkllm.keys import (
    ANNOTATION_BENCHMARK,
    ANNOTATION_DRAIN_REASON,
    ANNOTATION_DRAIN_STARTED,
    ANNOTATION_RESTART,
    LABEL_SERVING,
)
from sparkllm.reconcile.decide import decide
from sparkllm.reconcile.decide.actions import Plan
from sparkllm.reconcile.decide.benchmark import BenchmarkSeen
from sparkllm.reconcile.decide.observation import Observation, ServerInfo
from sparkllm.reconcile.decide.restarts import FORCE_CAUSE, UPDATE_CAUSE
from sparkllm.render.placement import NODE_RANK_LABEL
from tests.unit.reconcile_fixtures import (
    GATEWAY_IMAGE,
    NOW,
    cluster,
    gateway_objects,
    later,
    matching,
    mismatching,
    nodes,
    observation,
    rank_pods,
    replica_objects,
    serving,
    settled,
    status_of,
    with_obj,
    with_status,
)
from tests.unit.reconcile_world import (
    advance,
    edit_pod,
    exited,
    gone,
    init_failed,
    not_ready,
    pod_name,
    replaced,
)

JSON = dict[str, Any]
SIX = tuple(range(100, 700, 100))  # restarts in the last hour: the sample's budget
ANY = object()  # an expectation not checked
GROUP_LABEL = "example.com/spark-group"
GATEWAY = ("ServiceAccount/llm-gateway", "Role/llm-gateway", "RoleBinding/llm-gateway",
           "Deployment/llm", "Service/llm")  # fmt: skip


def replica_names(index: int) -> tuple[str, ...]:
    return (*(f"StatefulSet/llm-r{index}-rank{r}" for r in range(3)), f"Service/llm-r{index}")


STOP0 = tuple(f"StatefulSet/llm-r0-rank{r}" for r in range(3))


@dataclass(frozen=True)
class Expect:
    """What the plan must hold; fields left at ANY are not checked."""

    phase: Any = ANY  # status.phase after the pass
    replicas: Mapping[int, str] = field(default_factory=dict)  # index -> phase
    conditions: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # type -> (s, r)
    events: Any = ANY  # Event reasons, in order
    applied: Any = ANY  # "Kind/name" in apply order
    pruned: Any = ANY  # "Kind/name" in prune order
    restarts: Any = ANY  # gang-restart cause classes counted
    patched: Any = ANY  # pod names patched (drain)
    retry: Any = ANY
    writes: Any = ANY
    stopped: Any = ANY  # replica indexes whose StatefulSets are applied with replicas 0
    more: Callable[[Observation, Plan], None] | None = None


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[], Observation]
    expect: Expect


# --- the builders: one function per situation -------------------------------------------


def fresh() -> Observation:
    return observation(cluster(), key_exists=False)


def fresh_user_key_missing() -> Observation:
    obj = cluster(engine={"apiKeySecretRef": {"name": "mine", "key": "k"}})
    return observation(obj, key_exists=False)


def crash(rank: int) -> Callable[[], Observation]:
    return lambda: edit_pod(serving(), 0, rank, exited())


def pod_deleted() -> Observation:
    return edit_pod(serving(), 0, 1, gone)


def pod_replaced() -> Observation:
    return edit_pod(serving(), 0, 2, replaced)


def init_container_failed() -> Observation:
    return edit_pod(serving(), 0, 1, init_failed)


def node_down(**faults: tuple[str, ...]) -> Callable[[], Observation]:
    def build() -> Observation:
        obs = serving(groups=1)  # no spare group: the replica waits for its node
        return replace(obs, observed=replace(obs.observed, nodes=nodes(**faults)))

    return build


def pass_after(
    build: Callable[[], Observation],
    *,
    seconds: float = 1.0,
    times: int = 1,
    edit: Callable[[Observation], Observation] | None = None,
) -> Callable[[], Observation]:
    """The observation ``times`` passes after ``build``'s, each plan executed."""

    def run() -> Observation:
        obs = build()
        for _ in range(times):
            obs = advance(obs, decide(obs, gateway_image=GATEWAY_IMAGE), seconds=seconds)
            obs = edit(obs) if edit is not None else obs
        return obs

    return run


def node_back(obs: Observation) -> Observation:
    return replace(obs, observed=replace(obs.observed, nodes=nodes()))


def old_pods_remain() -> Observation:
    """The stop is applied, but the previous generation's pods are still terminating."""
    obs = crash(1)()
    plan = decide(obs, gateway_image=GATEWAY_IMAGE)
    return advance(obs, plan, pods=False)


def with_restart_times(*ages: float) -> Callable[[], Observation]:
    """Serving, with restarts ``ages`` seconds ago recorded, then rank 1 crashes."""

    def build() -> Observation:
        obs = serving()
        assert obs.obj is not None
        entry = dict(obs.obj["status"]["replicaStatuses"][0])
        entry["restartTimes"] = [
            (NOW.replace(microsecond=0) - _seconds(a)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
            for a in ages
        ]
        status = {**obs.obj["status"], "replicaStatuses": [entry]}
        return edit_pod(with_status(obs, status), 0, 1, exited())

    return build


def _seconds(value: float) -> Any:
    from datetime import timedelta

    return timedelta(seconds=value)


def exhausted_and_stopped() -> Observation:
    return pass_after(with_restart_times(*range(100, 700, 100)), times=1)()


def restart_annotation() -> Observation:
    obs = serving()
    assert obs.obj is not None
    obj = {
        **obs.obj,
        "metadata": {**obs.obj["metadata"], "annotations": {ANNOTATION_RESTART: "now"}},
    }
    return with_obj(obs, obj)


def scaled(replicas: int, *, groups: int = 2) -> Callable[[], Observation]:
    """Serving 1 (or 2) replicas, then the spec asks for ``replicas``."""

    def build() -> Observation:
        before = 2 if replicas < 2 else 1
        obs = serving(replicas=before, groups=groups)
        assert obs.obj is not None
        obj = {**obs.obj, "spec": {**obs.obj["spec"], "replicas": replicas},
               "metadata": {**obs.obj["metadata"], "generation": 2}}  # fmt: skip
        return with_obj(obs, obj)

    return build


def no_free_group() -> Observation:
    """Groups by node label; only group a is complete when a second replica is asked for."""
    obj = cluster(placement={"nodeGroups": None, "nodeGroupLabel": GROUP_LABEL})
    del obj["spec"]["placement"]["nodeGroups"]
    facts = {
        n: replace(f, labels={GROUP_LABEL: "a", NODE_RANK_LABEL: n[1]} if n[0] == "a" else {})
        for n, f in nodes().items()
    }
    replica = replica_objects(obj, 0, group_key="a")
    obs = settled(observation(obj, objects=gateway_objects(obj) + replica, node_facts=facts,
                              pods=rank_pods(replica), server_info=matching(0)))  # fmt: skip
    assert obs.obj is not None
    return with_obj(obs, {**obs.obj, "spec": {**obs.obj["spec"], "replicas": 2}})


def draining(*, seconds: float, running: int | None) -> Callable[[], Observation]:
    """Scaled 2 -> 1; replica 1's rank 0 was taken out of routing ``seconds`` ago."""

    def build() -> Observation:
        obs = pass_after(scaled(1), seconds=0)()

        def marked(pod: JSON) -> JSON:
            pod["metadata"]["labels"][LABEL_SERVING] = "false"
            pod["metadata"]["annotations"][ANNOTATION_DRAIN_STARTED] = "2026-11-30T12:00:00Z"
            return pod

        obs = edit_pod(obs, 1, 0, marked)
        return replace(
            later(obs, seconds), running_requests={} if running is None else {1: running}
        )

    return build


def restart_draining(
    build: Callable[[], Observation], *, reason: str, seconds: float, running: int
) -> Callable[[], Observation]:
    """Replica 0's rank 0 left routing ``seconds`` ago to drain for a planned restart."""

    def run() -> Observation:
        obs = build()

        def marked(pod: JSON) -> JSON:
            pod["metadata"]["labels"][LABEL_SERVING] = "false"
            pod["metadata"]["annotations"][ANNOTATION_DRAIN_STARTED] = "2026-11-30T12:00:00Z"
            pod["metadata"]["annotations"][ANNOTATION_DRAIN_REASON] = reason
            return pod

        obs = edit_pod(obs, 0, 0, marked)
        return replace(later(obs, seconds), running_requests={0: running})

    return run


def drained_rank0_gone() -> Observation:
    return edit_pod(scaled(1)(), 1, 0, gone)


def spec_changed(replicas: int, *, second_starting: bool = False) -> Callable[[], Observation]:
    """A spec change that needs new pods (chunked prefill), all replicas serving (or not)."""

    def build() -> Observation:
        obs = serving(replicas=replicas)
        if second_starting:
            obs = settled(edit_pod(obs, 1, 0, not_ready))
        assert obs.obj is not None
        spec = {
            **obs.obj["spec"],
            "engine": {**obs.obj["spec"]["engine"], "chunkedPrefillSize": 2048},
        }
        obj = {**obs.obj, "spec": spec, "metadata": {**obs.obj["metadata"], "generation": 2}}
        return with_obj(obs, obj)

    return build


def models(*digests: str) -> Callable[[], Observation]:
    """Serving, each rank pod's verify-model summary naming ``digests[rank]``."""

    def build() -> Observation:
        obj = cluster()
        replica = replica_objects(obj, 0)
        pods = []
        for rank, pod in enumerate(rank_pods(replica)):
            verified = ModelSummary(ok=True, mode="sha256", files=52, total_bytes=10**9,
                                    shards=46, digest=digests[rank] * 64)  # fmt: skip
            term = {"exitCode": 0, "reason": "Completed", "message": verified.to_message()}
            pod["status"]["initContainerStatuses"] = [
                {"name": "verify-model", "state": {"terminated": term}}
            ]
            pods.append(pod)
        return observation(obj, objects=gateway_objects(obj) + replica, pods=pods,
                           server_info=matching(0))  # fmt: skip

    return build


def model_verdict_outlives_pods() -> Observation:
    return pass_after(models("a", "a", "b"), times=1)()


def config_mismatch() -> Observation:
    return replace(serving(), server_info=mismatching(0))


def config_unreadable() -> Observation:
    return replace(serving(), server_info={0: ServerInfo(1, "cannot read: ConnectError")})


def too_big(status: JSON | None = None) -> Observation:
    obj = cluster(model={"weightsGB": 2000.0}, status=status)
    return observation(obj)


def refused_again() -> Observation:
    first = too_big()
    plan = decide(first, gateway_image=GATEWAY_IMAGE)
    return with_status(first, plan.status)


def invalid() -> Observation:
    obj = cluster(engine={"layerPartition": [1, 2, 3]})
    return Observation(
        key=("llm", "llm"), obj=obj, now=NOW, spec_error="layerPartition sums to 6, numLayers is 43"
    )


def gone_object() -> Observation:
    return Observation(key=("llm", "llm"), obj=None, now=NOW)


def benchmark_requested() -> Observation:
    obs = serving()
    assert obs.obj is not None
    meta = {**obs.obj["metadata"], "annotations": {ANNOTATION_BENCHMARK: "alice"}}
    return replace(with_obj(obs, {**obs.obj, "metadata": meta}),
                   benchmark=BenchmarkSeen(jobs={}, user_keys=frozenset({"alice"})))  # fmt: skip


def starting_then_ready() -> Observation:
    obj = cluster()
    replica = replica_objects(obj, 0)
    starting = observation(obj, objects=gateway_objects(obj) + replica,
                           pods=[not_ready(p) for p in rank_pods(replica)])  # fmt: skip
    obs = with_status(starting, decide(starting, gateway_image=GATEWAY_IMAGE).status)
    return replace(obs, observed=replace(obs.observed, pods=rank_pods(replica)),
                   server_info=matching(0))  # fmt: skip


# --- the table ---------------------------------------------------------------------------

NO_WRITE = Expect(writes=0, retry=None, events=())
RESTART = Reason.GANG_RESTART.value
NO_GROUP = Reason.INSUFFICIENT_NODE_GROUPS.value
NODE_A1_DOWN = node_down(not_ready=("a1",))

CASES = [
    Case(
        "fresh object: the front door, then the ranks; the key generated",
        fresh,
        Expect(
            phase="Starting",
            applied=(*GATEWAY, *replica_names(0)),
            pruned=(),
            events=(),
            replicas={0: "Starting"},
            conditions={
                "Ready": ("False", "ReplicasNotReady"),
                "Progressing": ("True", "RanksStarting"),
            },
            restarts=(),
            more=lambda o, p: _one_secret(p, "llm-engine-key"),
        ),
    ),
    Case(
        "a user-named key Secret is missing: reported, not made",
        fresh_user_key_missing,
        Expect(events=("SecretMissing",), more=lambda o, p: _no_secret(p)),
    ),
    Case("steady state, one replica: no write", serving, NO_WRITE),
    Case("steady state, two replicas: no write", lambda: serving(replicas=2), NO_WRITE),
    Case(
        "rank 0 container exits: gang restart",
        crash(0),
        Expect(
            phase="Restarting",
            events=(RESTART,),
            restarts=("container_exit",),
            applied=STOP0,
            stopped={0},
            replicas={0: "Restarting"},
            more=lambda o, p: _restart(p, 0, "rank 0 container exited (code 137, OOMKilled)"),
        ),
    ),
    Case(
        "rank 1 container exits: gang restart",
        crash(1),
        Expect(
            events=(RESTART,),
            restarts=("container_exit",),
            stopped={0},
            more=lambda o, p: _restart(p, 0, "rank 1 container exited (code 137, OOMKilled)"),
        ),
    ),
    Case(
        "rank 2 container exits: gang restart",
        crash(2),
        Expect(
            events=(RESTART,),
            restarts=("container_exit",),
            stopped={0},
            more=lambda o, p: _restart(p, 0, "rank 2 container exited (code 137, OOMKilled)"),
        ),
    ),
    Case(
        "a rank pod deleted after the generation formed: gang restart",
        pod_deleted,
        Expect(
            events=(RESTART,),
            restarts=("pod_deleted",),
            stopped={0},
            more=lambda o, p: _restart(p, 0, "rank 1 pod deleted"),
        ),
    ),
    Case(
        "a rank pod replaced by someone else: gang restart",
        pod_replaced,
        Expect(
            restarts=("pod_deleted",),
            stopped={0},
            more=lambda o, p: _restart(p, 0, "rank 2 pod replaced (deleted by someone else)"),
        ),
    ),
    Case(
        "an init container fails: gang restart",
        init_container_failed,
        Expect(restarts=("init_failed",), stopped={0}),
    ),
    Case(
        "a node NotReady: stopped at once, Degraded, budget untouched",
        NODE_A1_DOWN,
        Expect(
            phase="Degraded",
            events=(RESTART,),
            restarts=("node_failure",),
            stopped={0},
            replicas={0: "Degraded"},
            conditions={"Degraded": ("True", "ReplicaDegraded")},
            more=lambda o, p: _times(p, 0, 0),
        ),
    ),
    Case(
        "a node missing: stopped at once, Degraded",
        node_down(missing=("a2",)),
        Expect(
            phase="Degraded",
            restarts=("node_failure",),
            stopped={0},
            more=lambda o, p: _message(p, 0, "gang restart: node a2 missing"),
        ),
    ),
    Case(
        "node still down: held, pinned ranks wait for it",
        pass_after(NODE_A1_DOWN),
        Expect(
            phase="Degraded",
            events=(),
            restarts=(),
            applied=(),
            retry=None,
            more=lambda o, p: _message(
                p, 0, "node a1 NotReady; ranks are pinned to their nodes, waiting for the node"
            ),
        ),
    ),
    Case(
        "node back: the replica starts again",
        pass_after(NODE_A1_DOWN, edit=node_back),
        Expect(phase="Starting", replicas={0: "Starting"}, applied=STOP0, stopped=set()),
    ),
    Case(
        "stopped, old pods still there: waits for them",
        old_pods_remain,
        Expect(
            phase="Restarting",
            applied=(),
            events=(),
            more=lambda o, p: _message(p, 0, "stopping 3 rank(s) of the previous generation"),
        ),
    ),
    Case(
        "first restart in the hour starts at once",
        pass_after(crash(1)),
        Expect(phase="Starting", applied=STOP0, stopped=set(), retry=None),
    ),
    Case(
        "a second restart within the hour backs off",
        pass_after(with_restart_times(20)),
        Expect(
            phase="Restarting",
            applied=(),
            retry=9.0,
            more=lambda o, p: _message(p, 0, "backing off until 12:00:10"),
        ),
    ),
    Case(
        "after the backoff the replica starts",
        pass_after(with_restart_times(20), seconds=10),
        Expect(phase="Starting", applied=STOP0, stopped=set()),
    ),
    Case(
        "restart budget exhausted: held, Degraded, no restart",
        with_restart_times(*SIX),
        Expect(
            phase="Degraded",
            events=("RestartBudgetExhausted",),
            restarts=(),
            applied=STOP0,
            stopped={0},
            more=lambda o, p: _exhausted(p, 0),
        ),
    ),
    Case(
        "budget exhausted stays held, silently",
        pass_after(with_restart_times(*SIX), times=2),
        Expect(events=(), restarts=(), applied=(), writes=0),
    ),
    Case(
        "a spec change lifts an exhausted budget: the replica starts",
        lambda: _new_generation(pass_after(with_restart_times(*SIX))()),
        Expect(phase="Starting", events=(), restarts=(), applied=STOP0, stopped=set()),
    ),
    Case(  # issue 16: planned restarts drain (was: stopped at once)
        "restart annotation: out of routing first, annotation consumed",
        restart_annotation,
        Expect(
            events=(RESTART,),
            restarts=(),
            stopped=set(),
            patched=(pod_name(0, 0),),
            replicas={0: "Restarting"},
            retry=6.0,
            more=lambda o, p: (
                _consumed(p, ANNOTATION_RESTART),
                _drain_patch(p, reason=FORCE_CAUSE),
            ),
        ),
    ),
    Case(
        "restart annotation consumed: the drain waits while requests run",
        restart_draining(serving, reason=FORCE_CAUSE, seconds=10, running=1),
        Expect(
            restarts=(), stopped=set(), patched=(), events=(), retry=2.0, replicas={0: "Restarting"}
        ),
    ),
    Case(
        "restart annotation consumed: drained, the replica restarts",
        restart_draining(serving, reason=FORCE_CAUSE, seconds=10, running=0),
        Expect(events=(RESTART,), restarts=("manual",), stopped={0}, patched=()),
    ),
    Case(
        "scale up: the next free group, the rest untouched",
        scaled(2),
        Expect(
            applied=replica_names(1),
            pruned=(),
            replicas={0: "Ready", 1: "Starting"},
            more=lambda o, p: _group(p, 1, "group-1"),
        ),
    ),
    Case(
        "scale up without a free group: nothing half made",
        no_free_group,
        Expect(
            applied=(),
            phase="Degraded",
            conditions={"Progressing": ("False", NO_GROUP), "Degraded": ("True", NO_GROUP)},
            more=lambda o, p: _waiting(p),
        ),
    ),
    Case(
        "scale down: out of routing first, objects kept",
        scaled(1),
        Expect(
            patched=(pod_name(1, 0),),
            events=("ScalingDown",),
            pruned=(),
            retry=6.0,
            more=lambda o, p: _drain_patch(p),
        ),
    ),
    Case(
        "scale down: waits while requests run",
        draining(seconds=10, running=2),
        Expect(patched=(), pruned=(), retry=2.0, events=()),
    ),
    Case(
        "scale down: removed once drained",
        draining(seconds=10, running=0),
        Expect(
            pruned=("Service/llm-r1", *replica_names(1)[:3]),
            patched=(),
            retry=None,
            more=lambda o, p: _uids(p),
        ),
    ),
    Case(
        "scale down: removed at the deadline even if busy",
        draining(seconds=301, running=3),
        Expect(pruned=("Service/llm-r1", *replica_names(1)[:3]), retry=None),
    ),
    Case(
        "scale down: before the router let go, not removed",
        draining(seconds=3, running=0),
        Expect(pruned=(), patched=(), retry=3.0),
    ),
    Case(
        "scale down: nothing serves, removed at once",
        drained_rank0_gone,
        Expect(pruned=("Service/llm-r1", *replica_names(1)[:3]), patched=(), events=()),
    ),
    Case(  # issue 16: planned restarts drain (was: stopped at once)
        "rolling update, one replica: it drains first",
        spec_changed(1),
        Expect(
            events=("RollingUpdate",),
            restarts=(),
            stopped=set(),
            patched=(pod_name(0, 0),),
            more=lambda o, p: _drain_patch(p, reason=UPDATE_CAUSE),
        ),
    ),
    Case(
        "rolling update, one replica: drained, it restarts",
        restart_draining(spec_changed(1), reason=UPDATE_CAUSE, seconds=10, running=0),
        Expect(events=(RESTART,), restarts=("update",), stopped={0}, patched=()),
    ),
    Case(
        "rolling update: the drain ends at the deadline even if busy",
        restart_draining(spec_changed(1), reason=UPDATE_CAUSE, seconds=301, running=2),
        Expect(restarts=("update",), stopped={0}),
    ),
    Case(
        "rolling update, two replicas: one at a time",
        spec_changed(2),
        Expect(
            restarts=(),
            stopped=set(),
            patched=(pod_name(0, 0),),
            replicas={0: "Restarting", 1: "Ready"},
            more=lambda o, p: _message(p, 1, "update waits for the other replicas"),
        ),
    ),
    Case(
        "rolling update, two replicas: the other still waits while one drains",
        restart_draining(spec_changed(2), reason=UPDATE_CAUSE, seconds=10, running=0),
        Expect(
            restarts=("update",),
            stopped={0},
            replicas={0: "Restarting", 1: "Ready"},
            more=lambda o, p: _message(p, 1, "update waits for the other replicas"),
        ),
    ),
    Case(
        "rolling update: the replica not serving updates first, the other waits",
        spec_changed(2, second_starting=True),
        Expect(
            restarts=("update",),
            stopped={1},
            replicas={0: "Ready", 1: "Restarting"},
            more=lambda o, p: _message(p, 0, "update waits for the other replicas"),
        ),
    ),
    Case(
        "model copies differ: the replica stops, Degraded",
        models("a", "a", "b"),
        Expect(
            phase="Degraded",
            events=(RESTART, "ChecksumMismatch"),
            restarts=("model_mismatch",),
            stopped={0},
            conditions={"ModelVerified": ("False", "ChecksumMismatch")},
        ),
    ),
    Case(
        "the failed model verdict outlives its pods: held",
        model_verdict_outlives_pods,
        Expect(
            phase="Degraded",
            events=(),
            restarts=(),
            applied=(),
            conditions={"ModelVerified": ("False", "ChecksumMismatch")},
        ),
    ),
    Case(
        "model copies agree: ModelVerified",
        models("a", "a", "a"),
        Expect(conditions={"ModelVerified": ("True", "ModelFilesVerified")}, restarts=()),
    ),
    Case(
        "rank 0 runs another setting: ConfigApplied False, still serving",
        config_mismatch,
        Expect(
            phase="Ready",
            events=("ConfigMismatch",),
            restarts=(),
            applied=(),
            conditions={"ConfigApplied": ("False", "ConfigMismatch")},
        ),
    ),
    Case(
        "server_info unreadable: ConfigApplied Unknown",
        config_unreadable,
        Expect(events=(), conditions={"ConfigApplied": ("Unknown", "VerificationPending")}),
    ),
    Case(
        "capacity refusal: Failed, nothing applied",
        too_big,
        Expect(
            phase="Failed",
            events=("CapacityExceeded",),
            applied=(),
            pruned=(),
            conditions={
                "CapacityPlanned": ("False", "CapacityExceeded"),
                "Ready": ("False", "CapacityExceeded"),
            },
        ),
    ),
    Case("capacity refusal again: no write", refused_again, NO_WRITE),
    Case(
        "invalid spec: Failed, an Event, nothing applied",
        invalid,
        Expect(
            phase="Failed",
            events=("InvalidSpec",),
            applied=(),
            conditions={"Progressing": ("False", "InvalidSpec")},
        ),
    ),
    Case("the object is gone: nothing to do", gone_object, Expect(writes=0, retry=None)),
    Case(
        "benchmark requested on a Ready cluster: one Job",
        benchmark_requested,
        Expect(applied=(), more=lambda o, p: _benchmark_job(p)),
    ),
    Case(
        "all ranks ready: ReplicaReady",
        starting_then_ready,
        Expect(
            phase="Ready",
            events=("ReplicaReady",),
            replicas={0: "Ready"},
            conditions={"Ready": ("True", "AllReplicasReady")},
        ),
    ),
]


# --- the checks ---------------------------------------------------------------------------


def _name(obj: Mapping[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


def _replica_entry(p: Plan, index: int) -> JSON:
    assert p.status is not None
    return next(r for r in p.status["replicaStatuses"] if r["index"] == index)


def _one_secret(p: Plan, name: str) -> None:
    assert [s.name for s in p.secrets] == [name]
    assert "data" not in p.secrets[0].manifest  # the plan never holds a value


def _no_secret(p: Plan) -> None:
    assert p.secrets == ()


def _restart(p: Plan, index: int, cause: str) -> None:
    entry = _replica_entry(p, index)
    assert entry["lastRestart"] == {"time": "2026-11-30T12:00:00Z", "reason": cause}
    assert entry["generation"] == 2
    assert entry["restarts"] == 1
    assert next(e.message for e in p.events) == f"replica {index}: {cause}"


def _times(p: Plan, index: int, count: int) -> None:
    assert len(_replica_entry(p, index).get("restartTimes", [])) == count


def _message(p: Plan, index: int, text: str) -> None:
    assert _replica_entry(p, index)["message"] == text


def _exhausted(p: Plan, index: int) -> None:
    assert _replica_entry(p, index)["budgetExhausted"] is True


def _new_generation(obs: Observation) -> Observation:
    assert obs.obj is not None
    obj = {**obs.obj, "metadata": {**obs.obj["metadata"], "generation": 2}}
    return with_obj(obs, obj)


def _consumed(p: Plan, annotation: str) -> None:
    assert p.annotations == {"metadata": {"annotations": {annotation: None}}}


def _group(p: Plan, index: int, group: str) -> None:
    statefulsets = [o for o in p.apply if o["kind"] == "StatefulSet"]
    assert statefulsets
    for obj in statefulsets:
        assert obj["metadata"]["labels"]["sparkllm.io/node-group"] == group


def _waiting(p: Plan) -> None:
    assert p.waiting_for_nodes


def _drain_patch(p: Plan, *, reason: str | None = None) -> None:
    (patch,) = p.pod_patches
    started = {ANNOTATION_DRAIN_STARTED: "2026-11-30T12:00:00Z"}
    if reason is not None:
        started[ANNOTATION_DRAIN_REASON] = reason
    assert patch.patch == {"metadata": {"labels": {LABEL_SERVING: "false"}, "annotations": started}}


def _uids(p: Plan) -> None:
    assert all(r.uid == f"uid-{r.name}" for r in p.prune)


def _benchmark_job(p: Plan) -> None:
    (job,) = p.create_jobs
    assert job["kind"] == "Job"
    assert p.status is not None
    assert p.status["benchmark"]["phase"] == "Running"


def _stopped(p: Plan) -> set[int]:
    return {
        int(o["metadata"]["labels"]["sparkllm.io/replica"])
        for o in p.apply
        if o["kind"] == "StatefulSet" and o["spec"]["replicas"] == 0
    }


def check(obs: Observation, plan: Plan, expect: Expect) -> None:
    status = status_of(obs, plan) if obs.obj is not None else {}
    if expect.phase is not ANY:
        assert status.get("phase") == expect.phase
    phases = {r["index"]: r["phase"] for r in status.get("replicaStatuses") or []}
    for index, phase in expect.replicas.items():
        assert phases[index] == phase, index
    conditions = {c["type"]: (c["status"], c["reason"]) for c in status.get("conditions") or []}
    for kind, wanted in expect.conditions.items():
        assert conditions[kind] == wanted, kind
    actual = {
        "events": tuple(e.reason.value for e in plan.events),
        "applied": tuple(_name(o) for o in plan.apply),
        "pruned": tuple(f"{r.kind}/{r.name}" for r in plan.prune),
        "restarts": plan.gang_restarts,
        "patched": tuple(p.name for p in plan.pod_patches),
        "retry": plan.retry_after,
        "writes": plan.writes,
        "stopped": _stopped(plan),
    }
    for key, value in actual.items():
        wanted = getattr(expect, key)
        if wanted is not ANY:
            assert value == wanted, key
    if expect.more is not None:
        expect.more(obs, plan)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_decide(case: Case) -> None:
    obs = case.build()
    check(obs, decide(obs, gateway_image=GATEWAY_IMAGE), case.expect)


def test_decide_is_pure() -> None:
    """The same observation gives the same plan, and the observation is not changed."""
    for case in CASES[:6]:
        obs = case.build()
        before = repr(obs)
        assert decide(obs, gateway_image=GATEWAY_IMAGE) == decide(obs, gateway_image=GATEWAY_IMAGE)
        assert repr(obs) == before
