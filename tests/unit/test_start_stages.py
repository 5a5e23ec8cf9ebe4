"""A start you can watch: each rank's stage in status, the Start column, an Event per stage.

Through ``decide`` (pure), from observations built by hand: rank pods at each point of a
start (placed or not, init containers, the engine running) and the engine log lines the
observe step read for them, as the pinned wheel writes them (the markers' examples,
checked against the wheel in test_start_log_markers.py).
"""

from __future__ import annotations

import copy
import re
from dataclasses import replace
from datetime import timedelta
from typing import Any

from sparkllm.api import Reason
from sparkllm.api.crd import build_crd
from sparkllm.reconcile.decide.cluster import decide
from sparkllm.reconcile.decide.observation import Observation
from sparkllm.reconcile.decide.start_stages import POLL_SECONDS, pod_stage
from sparkllm.sglang_contract.start_log import FIRED_UP, MARKERS, StartStage
from tests.unit.reconcile_fixtures import (
    GATEWAY_IMAGE,
    NOW,
    cluster,
    gateway_objects,
    observation,
    rank_pods,
    replica_objects,
    with_status,
)

JSON = dict[str, Any]
EXAMPLE = {m.pattern.pattern: m.example for m in MARKERS}
BEGIN, SHARDS, END, POOL, JIT, GRAPH, BATCHES, CAPTURED, FIRED = EXAMPLE.values()


def _starting(*, ready: bool = False) -> tuple[Observation, list[JSON]]:
    obj = cluster()
    replica = replica_objects(obj, 0)
    pods = rank_pods(replica, ready=ready)
    for pod in pods:
        pod["metadata"]["creationTimestamp"] = NOW.isoformat()
    objects = [*gateway_objects(obj), *replica]
    return observation(obj, objects=objects, pods=pods, now=NOW + timedelta(seconds=95)), pods


def _logs(pods: list[JSON], *lines_per_rank: list[str]) -> dict[str, str]:
    return {
        p["metadata"]["uid"]: "\n".join(lines)
        for p, lines in zip(pods, lines_per_rank, strict=False)
    }


def _pass(obs: Observation) -> tuple[JSON, Any]:
    plan = decide(obs, gateway_image=GATEWAY_IMAGE)
    assert plan.status is not None
    return plan.status, plan


def test_each_rank_stage_is_in_status_and_the_column_shows_the_slowest() -> None:
    obs, pods = _starting()
    shards = SHARDS.replace("12/46", "12/46")
    obs = replace(obs, start_logs=_logs(pods, [BEGIN, shards], [BEGIN, SHARDS, END, POOL, JIT]))
    status, plan = _pass(obs)
    start = status["replicaStatuses"][0]["start"]
    assert [(r["rank"], r["stage"], r.get("shards")) for r in start["ranks"]] == [
        (0, "LoadingWeights", "12/46"),
        (1, "KernelCapture", None),
        (2, "EngineStarting", None),  # running, no stage line read yet
    ]
    assert start["elapsedSeconds"] == 95
    assert start["graceSeconds"] == obs.ic.spec.restart_policy.startup_grace_seconds  # type: ignore[union-attr]
    assert "estimateSeconds" not in start  # no start completed yet
    grace = start["graceSeconds"]
    assert status["start"] == f"EngineStarting:95s/{grace}s"
    assert plan.retry_after is not None
    assert plan.retry_after <= POLL_SECONDS  # log lines trigger no watch event: look again
    (event,) = [e for e in plan.events if e.reason is Reason.START_STAGE]
    assert not event.warning
    assert "rank 0 LoadingWeights (12/46 shards), rank 1 KernelCapture, rank 2 EngineStarting" in (
        event.message
    )
    assert f"95 s since the start of startupGraceSeconds {grace} s" in event.message


def test_an_event_per_stage_not_per_shard_and_since_kept() -> None:
    obs, pods = _starting()
    first = replace(obs, start_logs=_logs(pods, [BEGIN], [BEGIN], [BEGIN]))
    status, _ = _pass(first)
    assert status["start"].startswith("LoadingWeights:95s/")
    later = with_status(first, status)
    later = replace(
        later,
        now=first.now + timedelta(seconds=30),
        start_logs=_logs(pods, [BEGIN, SHARDS], [BEGIN, SHARDS], [BEGIN, END]),
    )
    status2, plan = _pass(later)
    ranks = status2["replicaStatuses"][0]["start"]["ranks"]
    first_ranks = status["replicaStatuses"][0]["start"]["ranks"]
    assert [r["since"] for r in ranks[:2]] == [r["since"] for r in first_ranks[:2]]
    assert ranks[2]["stage"] == "AllocatingKVCache"
    assert ranks[2]["since"] != ranks[0]["since"]
    (event,) = [e for e in plan.events if e.reason is Reason.START_STAGE]
    assert "rank 2 AllocatingKVCache" in event.message
    assert "rank 0" not in event.message  # a shard count moving is not a new stage
    assert status2["start"] == "LoadingWeights:12/46:125s/" + status2["start"].split("/", 2)[2]


def test_ready_records_how_long_the_start_took_and_the_next_start_estimates_it() -> None:
    obs, pods = _starting()
    obs = replace(obs, start_logs=_logs(pods, [CAPTURED], [CAPTURED], [CAPTURED]))
    status, _ = _pass(obs)
    assert status["replicaStatuses"][0]["start"]["ranks"][0]["stage"] == "WarmingUp"
    assert [r["stage"] for r in status["replicaStatuses"][0]["start"]["ranks"][1:]] == [
        "Ready", "Ready",  # ranks > 0 serve nothing: captured is their end
    ]  # fmt: skip
    ready_pods = copy.deepcopy(pods)
    for pod in ready_pods:
        pod["status"]["conditions"] = [
            {"type": "Ready", "status": "True",
             "lastTransitionTime": (NOW + timedelta(seconds=300)).isoformat()}
        ]  # fmt: skip
    served = replace(
        with_status(obs, status),
        now=NOW + timedelta(seconds=310),
        observed=replace(obs.observed, pods=ready_pods),
        start_logs={},
    )
    status2, _ = _pass(served)
    replica = status2["replicaStatuses"][0]
    assert "start" not in replica
    assert replica["lastStartSeconds"] == 300  # first pod created -> rank 0 Ready
    assert status2["start"] == "Ready:300s"
    # the next start (a restart: new pods) is estimated from it
    again = replace(
        with_status(served, status2),
        now=NOW + timedelta(seconds=1000),
        observed=replace(obs.observed, pods=pods),
        start_logs=_logs(pods, [BEGIN], [BEGIN], [BEGIN]),
    )
    status3, _ = _pass(again)
    assert status3["replicaStatuses"][0]["start"]["estimateSeconds"] == 300
    assert status3["replicaStatuses"][0]["lastStartSeconds"] == 300
    assert status3["start"].endswith("~300s")


def test_before_the_engine_the_stage_is_the_pods() -> None:
    _, pods = _starting()
    pod = copy.deepcopy(pods[0])
    assert pod_stage({**pod, "spec": {}}, None, rank=0).stage == "Pending"
    pod["spec"]["initContainers"] = [{"name": "verify-model"}]
    pod["status"]["containerStatuses"] = []
    assert pod_stage(pod, None, rank=0).stage == "PullingImage"  # nothing reported yet
    cases = [
        ({"waiting": {"reason": "ErrImagePull"}}, "verify-bandwidth", "PullingImage"),
        ({"running": {}}, "verify-bandwidth", "Preflight"),
        ({"running": {}}, "verify-model", "ModelCheck"),
        ({"running": {}}, "launch-check", "LaunchCheck"),
    ]
    for state, name, stage in cases:
        pod["status"]["initContainerStatuses"] = [
            {"name": "verify-host", "state": {"terminated": {"exitCode": 0}}},
            {"name": name, "state": state},
        ]
        assert pod_stage(pod, FIRED, rank=0).stage == stage, (name, state)
    pod["status"]["initContainerStatuses"] = []
    pod["spec"]["initContainers"] = []
    pod["status"]["containerStatuses"] = [
        {"name": "engine", "state": {"waiting": {"reason": "ContainerCreating"}}}
    ]
    assert pod_stage(pod, FIRED, rank=0).stage == "PullingImage"
    pod["status"]["containerStatuses"] = [{"name": "engine", "state": {"running": {}}}]
    assert pod_stage(pod, f"[x] {FIRED_UP}", rank=0).stage == "Ready"


def test_the_start_column_is_one_word_in_kubectl_get() -> None:
    columns = build_crd()["spec"]["versions"][0]["additionalPrinterColumns"]
    (column,) = [c for c in columns if c["name"] == "Start"]
    assert column["jsonPath"] == ".status.start"
    assert not column.get("priority")  # kubectl get icl shows it, not only -o wide
    words = [e.replace("12/46", "12/46") for e in ("LoadingWeights:12/46:95s/1200s~300s",)]
    stages = "|".join(s.value for s in StartStage)
    pattern = rf"(?:{stages})(?::\d+/\d+)?:\d+s/\d+s(?:~\d+s)?|Ready:\d+s"
    assert all(re.fullmatch(pattern, w) for w in words)
    obs, pods = _starting()
    obs = replace(obs, start_logs=_logs(pods, [BEGIN, SHARDS], [GRAPH], [BATCHES]))
    status, _ = _pass(obs)
    assert re.fullmatch(pattern, status["start"]), status["start"]
    assert status["start"] == "LoadingWeights:12/46:95s/" + status["start"].split("/", 2)[2]
