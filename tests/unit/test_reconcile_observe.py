"""What a replica looks like, read from hand-built pod and node objects: pure.

The failure text is what an operator on call reads in status and Events ("rank 1
container exited (code 137, OOMKilled)"), so each pod shape maps to exact words. The
rank facts (running, ready, generation, terminating) feed the gang-restart decision, and
duplicates (an old pod still terminating next to its replacement) must resolve to the
live one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from sparkllm.reconcile.decide.replica_state import (
    RankState,
    ReplicaState,
    describe_pod_failure,
    observe_replica,
    rank_state,
)
from sparkllm.render.placement import NodeFacts

JSON = dict[str, Any]
NODES = ("spark-a0", "spark-a1", "spark-a2")
DELETED_AT = "2026-01-01T00:00:00Z"


def running_state() -> JSON:
    return {"running": {"startedAt": "2026-01-01T00:00:00Z"}}


def terminated(code: int, reason: str | None = None, message: str | None = None) -> JSON:
    term: JSON = {"exitCode": code}
    if reason is not None:
        term["reason"] = reason
    if message is not None:
        term["message"] = message
    return {"terminated": term}


def container(
    state: JSON | None = None,
    *,
    name: str = "engine",
    restarts: int = 0,
    last: JSON | None = None,
) -> JSON:
    status: JSON = {"name": name, "restartCount": restarts, "state": state or running_state()}
    if last is not None:
        status["lastState"] = last
    return status


def pod(
    *,
    rank: int = 0,
    generation: str | None = "1",
    uid: str = "uid-0",
    name: str | None = None,
    phase: str = "Running",
    containers: list[JSON] | None = None,
    init: list[JSON] | None = None,
    ready: bool = True,
    deleting: bool = False,
    host_ip: str | None = "10.0.0.10",
    reason: str | None = None,
) -> JSON:
    labels = {"sparkllm.io/rank": str(rank)}
    if generation is not None:
        labels["sparkllm.io/restart-generation"] = generation
    metadata: JSON = {"name": name or f"llm-r0-rank{rank}-0", "uid": uid, "labels": labels}
    if deleting:
        metadata["deletionTimestamp"] = DELETED_AT
    status: JSON = {
        "phase": phase,
        "containerStatuses": [container()] if containers is None else containers,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    if init is not None:
        status["initContainerStatuses"] = init
    if host_ip is not None:
        status["hostIP"] = host_ip
    if reason is not None:
        status["reason"] = reason
    return {"metadata": metadata, "status": status}


# --- describe_pod_failure --------------------------------------------------------------

VERIFY_DONE = container(terminated(0, "Completed"), name="verify-model")
CREATING: JSON = {"waiting": {"reason": "ContainerCreating"}}


@pytest.mark.parametrize(
    ("pod_obj", "rank", "failure"),
    [
        pytest.param(pod(), 0, None, id="running"),
        pytest.param(pod(init=[VERIFY_DONE]), 0, None, id="running-after-verify"),
        pytest.param({"metadata": {"name": "p"}}, 0, None, id="no-status"),
        pytest.param(pod(phase="Pending", containers=[]), 1, None, id="pending-no-containers"),
        pytest.param(
            pod(phase="Pending", containers=[container(CREATING)]),
            1, None, id="container-creating",
        ),
        pytest.param(
            pod(phase="Pending", containers=[container({"waiting": {"reason": "PodInitializing"}})],
                init=[container(running_state(), name="verify-model")]),
            2, None, id="verifying",
        ),
        pytest.param(
            pod(containers=[container(terminated(137, "OOMKilled"))]),
            1, "rank 1 container exited (code 137, OOMKilled)", id="terminated-oom",
        ),
        pytest.param(
            pod(containers=[container(terminated(1))]),
            2, "rank 2 container exited (code 1, Error)", id="terminated-no-reason",
        ),
        pytest.param(
            pod(containers=[container(terminated(0, "Completed"))]),
            0, "rank 0 container exited (code 0, Completed)", id="terminated-cleanly-still-dropped",
        ),
        pytest.param(
            pod(containers=[container(restarts=2, last=terminated(139, "Error"))]),
            2, "rank 2 container exited (code 139, Error)", id="restarted-with-last-state",
        ),
        pytest.param(
            pod(containers=[container({"waiting": {"reason": "CrashLoopBackOff"}}, restarts=3,
                                      last=terminated(134, "Error"))]),
            1, "rank 1 container exited (code 134, Error)", id="crash-loop",
        ),
        pytest.param(
            pod(containers=[container(restarts=1)]),
            0, "rank 0 container exited (restarted)", id="restarted-without-last-state",
        ),
        pytest.param(
            pod(containers=[container(restarts=1, last={})]),
            0, "rank 0 container exited (restarted)", id="restarted-empty-last-state",
        ),
        pytest.param(
            pod(phase="Pending", containers=[],
                init=[container(terminated(3, "Error"), name="verify-model")]),
            0, "rank 0 init container verify-model failed (code 3, Error)", id="init-failed",
        ),
        pytest.param(
            pod(phase="Pending", containers=[],
                init=[container(terminated(2), name="verify-model")]),
            1, "rank 1 init container verify-model failed (code 2, Error)",
            id="init-failed-no-reason",
        ),
        pytest.param(
            pod(phase="Failed", containers=[], reason="Evicted"),
            1, "rank 1 pod failed (Evicted)", id="pod-failed-evicted",
        ),
        pytest.param(
            pod(phase="Failed", containers=[]),
            2, "rank 2 pod failed (Failed)", id="pod-failed-no-reason",
        ),
        pytest.param(
            pod(phase="Succeeded", containers=[]),
            0, "rank 0 pod succeeded (Succeeded)", id="pod-succeeded",
        ),
        pytest.param(
            pod(phase="Failed", reason="Evicted",
                containers=[container(terminated(137, "OOMKilled"))]),
            1, "rank 1 container exited (code 137, OOMKilled)", id="container-detail-beats-phase",
        ),
        pytest.param(
            pod(containers=[container(), container(terminated(1, "Error"), name="sidecar")]),
            0, "rank 0 container exited (code 1, Error)", id="any-container",
        ),
    ],
)  # fmt: skip
def test_describe_pod_failure(pod_obj: JSON, rank: int, failure: str | None) -> None:
    assert describe_pod_failure(pod_obj, rank) == failure


def test_init_container_crash_loop_is_a_failure() -> None:
    crash_looping = pod(
        phase="Pending",
        containers=[container({"waiting": {"reason": "PodInitializing"}})],
        init=[
            container(
                {"waiting": {"reason": "CrashLoopBackOff"}},
                name="verify-model",
                restarts=2,
                last=terminated(1, "Error"),
            )
        ],
        ready=False,
    )
    assert describe_pod_failure(crash_looping, 0) == (
        "rank 0 init container verify-model failed (code 1, Error)"
    )


# --- rank_state ---------------------------------------------------------------------------


def test_rank_state_without_a_pod() -> None:
    assert rank_state(rank=2, node="spark-a2", pod=None) == RankState(
        rank=2, node="spark-a2", pod=None, uid=None, generation=None, phase=None,
        running=False, ready=False, terminating=False, failure=None, node_ip=None,
    )  # fmt: skip


def test_rank_state_of_a_running_ready_pod() -> None:
    state = rank_state(rank=1, node="spark-a1", pod=pod(rank=1, generation="3", uid="u1"))
    assert state == RankState(
        rank=1, node="spark-a1", pod="llm-r0-rank1-0", uid="u1", generation=3, phase="Running",
        running=True, ready=True, terminating=False, failure=None, node_ip="10.0.0.10",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("pod_obj", "expected"),
    [
        pytest.param(pod(ready=False), {"running": True, "ready": False}, id="running-not-ready"),
        pytest.param(
            pod(containers=[container(restarts=1, last=terminated(137, "OOMKilled"))]),
            {"running": False, "ready": True,
             "failure": "rank 0 container exited (code 137, OOMKilled)"},
            id="restarted-is-not-running",
        ),
        pytest.param(
            pod(phase="Pending", containers=[container(CREATING)],
                ready=False),
            {"running": False, "phase": "Pending"}, id="pending",
        ),
        pytest.param(pod(containers=[]), {"running": False}, id="running-phase-without-statuses"),
        pytest.param(
            pod(containers=[container(), container({"waiting": {"reason": "x"}}, name="b")]),
            {"running": False}, id="one-container-not-running",
        ),
        pytest.param(pod(deleting=True), {"terminating": True, "running": True}, id="terminating"),
        pytest.param(pod(generation=None), {"generation": None}, id="no-generation-label"),
        pytest.param(pod(generation="next"), {"generation": None}, id="non-numeric-generation"),
        pytest.param(pod(generation="12"), {"generation": 12}, id="numeric-generation"),
        pytest.param(pod(host_ip=None), {"node_ip": None}, id="no-host-ip"),
        pytest.param(
            pod(phase="Failed", containers=[], reason="Evicted", ready=False),
            {"running": False, "phase": "Failed", "failure": "rank 0 pod failed (Evicted)"},
            id="failed",
        ),
    ],
)  # fmt: skip
def test_rank_state_fields(pod_obj: JSON, expected: Mapping[str, Any]) -> None:
    state = rank_state(rank=0, node="spark-a0", pod=pod_obj)
    assert {field: getattr(state, field) for field in expected} == dict(expected)


def test_rank_state_without_conditions_is_not_ready() -> None:
    bare = pod()
    del bare["status"]["conditions"]
    assert rank_state(rank=0, node="n", pod=bare).ready is False


# --- observe_replica ----------------------------------------------------------------------


def facts(name: str, *, ready: bool = True) -> NodeFacts:
    return NodeFacts(name=name, internal_ip="10.0.0.1", ready=ready)


ALL_READY = {n: facts(n) for n in NODES}


def replica(pods: list[JSON], node_facts: Mapping[str, NodeFacts] = ALL_READY) -> ReplicaState:
    return observe_replica(index=0, nodes=NODES, pods=pods, node_facts=node_facts)


def test_observe_replica_puts_pods_at_their_rank_on_the_group_nodes() -> None:
    pods = [pod(rank=2, uid="u2"), pod(rank=0, uid="u0")]
    state = replica(pods)
    assert [(r.rank, r.node, r.uid) for r in state.ranks] == [
        (0, "spark-a0", "u0"),
        (1, "spark-a1", None),
        (2, "spark-a2", "u2"),
    ]
    assert state.index == 0
    assert state.pods_present == 2
    assert state.nodes_not_ready == ()
    assert state.nodes_missing == ()


def test_observe_replica_ignores_pods_without_a_usable_rank_label() -> None:
    stray = pod(rank=0, uid="stray")
    stray["metadata"]["labels"]["sparkllm.io/rank"] = "zero"
    unlabelled = pod(rank=1, uid="unlabelled")
    unlabelled["metadata"]["labels"] = None
    beyond = pod(rank=7, uid="beyond")
    state = replica([stray, unlabelled, beyond])
    assert [r.pod for r in state.ranks] == [None, None, None]
    assert state.pods_present == 0


@pytest.mark.parametrize(
    ("node_facts", "not_ready", "missing"),
    [
        pytest.param(ALL_READY, (), (), id="all-ready"),
        pytest.param({**ALL_READY, "spark-a1": facts("spark-a1", ready=False)}, ("spark-a1",), (),
                     id="one-not-ready"),
        pytest.param({k: v for k, v in ALL_READY.items() if k != "spark-a2"}, (), ("spark-a2",),
                     id="one-missing"),
        pytest.param({"spark-a0": facts("spark-a0", ready=False),
                      "other": facts("other", ready=False)},
                     ("spark-a0",), ("spark-a1", "spark-a2"), id="mixed-and-unrelated-ignored"),
        pytest.param({}, (), NODES, id="no-nodes-known"),
    ],
)  # fmt: skip
def test_observe_replica_node_health(
    node_facts: Mapping[str, NodeFacts], not_ready: tuple[str, ...], missing: tuple[str, ...]
) -> None:
    state = replica([pod(rank=k, uid=f"u{k}") for k in range(3)], node_facts)
    assert state.nodes_not_ready == not_ready
    assert state.nodes_missing == missing


@pytest.mark.parametrize(
    ("order", "chosen"),
    [
        pytest.param(["old-deleting", "new"], "new", id="terminating-first"),
        pytest.param(["new", "old-deleting"], "new", id="terminating-second"),
        pytest.param(["a-deleting", "b-deleting"], "b-deleting", id="both-terminating-last-wins"),
        pytest.param(["a", "b"], "a", id="both-live-first-wins"),
    ],
)
def test_duplicate_pods_of_one_rank_prefer_the_live_one(order: list[str], chosen: str) -> None:
    pods = [
        pod(rank=1, uid=uid, name=uid, deleting=uid.endswith("deleting"), generation="2")
        for uid in order
    ]
    state = replica([pod(rank=0, uid="u0", generation="2"), *pods])
    rank1 = state.ranks[1]
    assert rank1.uid == chosen
    assert rank1.terminating is chosen.endswith("deleting")


# --- ReplicaState helpers -----------------------------------------------------------------


def test_ready_ranks_serving_and_failures() -> None:
    state = replica(
        [
            pod(rank=0, uid="u0", generation="2", ready=False),
            pod(rank=1, uid="u1", generation="2", ready=False),  # ranks > 0: running suffices
            pod(rank=2, uid="u2", generation="1"),  # an old generation does not count
        ]
    )
    assert state.ready_ranks(2) == 1
    assert state.ready_ranks(1) == 1
    assert not state.serving(2)
    assert state.failures() == ()

    ready = replica([pod(rank=k, uid=f"u{k}", generation="2") for k in range(3)])
    assert ready.ready_ranks(2) == 3
    assert ready.serving(2)
    assert not ready.serving(3)

    broken = replica(
        [
            pod(rank=0, uid="u0", generation="2"),
            pod(rank=1, uid="u1", containers=[container(terminated(137, "OOMKilled"))]),
            pod(rank=2, uid="u2", phase="Failed", containers=[], reason="Evicted"),
        ]
    )
    assert broken.failures() == (
        "rank 1 container exited (code 137, OOMKilled)",
        "rank 2 pod failed (Evicted)",
    )
    assert broken.ready_ranks(1) == 0
