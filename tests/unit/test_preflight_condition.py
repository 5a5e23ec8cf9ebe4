"""NetworkVerified from the ranks' verify-network termination messages, and in a pass.

The messages are what ``sparkllm verify-network`` writes (``to_json`` of its findings);
the node comes from the pod, so a finding always names the node the rank ran on. With
mode off there is no condition at all (the pods have no check).
"""

from __future__ import annotations

from typing import Any

from sparkllm.preflight import Check, Finding, Severity
from sparkllm.preflight.bandwidth import MIB, BandwidthResult
from sparkllm.preflight.findings import to_json
from sparkllm.reconcile.decide import decide
from sparkllm.reconcile.decide.actions import Plan
from sparkllm.reconcile.decide.network_proof import network_condition, network_status
from sparkllm.render.network_preflight import BANDWIDTH_CONTAINER, NETWORK_CONTAINER
from tests.unit.reconcile_fixtures import (
    GATEWAY_IMAGE,
    cluster,
    gateway_objects,
    matching,
    observation,
    rank_pods,
    replica_objects,
)
from tests.unit.reconcile_world import advance

JSON = dict[str, Any]
CMA = Finding("spark-b", Check.CMA, Severity.ERROR, "CmaTotal is 0 in /proc/meminfo")
CONF = Finding("x", Check.NCCL_CONF, Severity.WARNING, "/etc/nccl.conf sets A=1")


def pod(node: str, findings: list[Finding] | None, *, code: int = 0, last: bool = False) -> JSON:
    statuses: list[JSON] = []
    if findings is not None:
        term = {"exitCode": code, "message": to_json(findings)}
        state: JSON = {"running": {}} if last else {"terminated": term}
        status: JSON = {"name": NETWORK_CONTAINER, "state": state}
        if last:
            status["lastState"] = {"terminated": term}
        statuses.append(status)
    return {
        "metadata": {"name": f"pod-{node}"},
        "spec": {"nodeName": node},
        "status": {"initContainerStatuses": statuses},
    }


def test_every_rank_passed() -> None:
    cond = network_condition(
        [pod("a", []), pod("b", [CONF]), pod("c", [])], generation=4, expected=3
    )
    assert (cond["type"], cond["status"], cond["reason"]) == (
        "NetworkVerified", "True", "NetworkChecksPassed"
    )  # fmt: skip
    assert cond["message"] == "3 ranks passed the network checks; 1 warnings"
    assert cond["observedGeneration"] == 4


def test_a_failed_node_is_named_at_once() -> None:
    cond = network_condition([pod("spark-b", [CMA], code=1, last=True)], generation=1, expected=3)
    assert (cond["status"], cond["reason"]) == ("False", "NetworkCheckFailed")
    assert cond["message"] == "spark-b: CMA (error): CmaTotal is 0 in /proc/meminfo"


def test_the_pod_names_the_node() -> None:
    cond = network_condition([pod("spark-c", [CMA])], generation=1, expected=1)
    assert cond["message"].startswith("spark-c: CMA (error)")


def test_pending_until_every_rank_reported() -> None:
    cond = network_condition([pod("a", []), pod("b", None)], generation=1, expected=3)
    assert (cond["status"], cond["reason"]) == ("Unknown", "VerificationPending")
    assert cond["message"] == "1 of 3 ranks reported their network check"
    empty = network_condition([], generation=1)
    assert empty["status"] == "Unknown"


def test_an_unreadable_result_fails() -> None:
    broken = pod("a", [])
    broken["status"]["initContainerStatuses"][0]["state"]["terminated"]["message"] = "boom"
    cond = network_condition([broken], generation=1, expected=1)
    assert cond["status"] == "False"
    assert cond["message"].startswith(
        "a: Preflight (error): verify-network: unreadable result (exit code 0): boom"
    )


def _conditions(mode: str) -> dict[str, JSON]:
    obj = cluster(network={"preflight": {"mode": mode}})
    replica = replica_objects(obj, 0)
    pods = rank_pods(replica)
    pods[1]["status"]["initContainerStatuses"] = [
        {
            "name": NETWORK_CONTAINER,
            "state": {"terminated": {"exitCode": 0, "message": to_json([CMA])}},
        }
    ]
    obs = observation(
        obj, objects=[*gateway_objects(obj), *replica], pods=pods, server_info=matching(0)
    )
    status = decide(obs, gateway_image=GATEWAY_IMAGE).status
    assert status is not None
    return {c["type"]: c for c in status["conditions"]}


def test_a_pass_reports_network_verified_unless_off() -> None:
    assert "NetworkVerified" not in _conditions("off")
    warn = _conditions("warn")["NetworkVerified"]
    assert (warn["status"], warn["reason"]) == ("False", "NetworkCheckFailed")
    assert warn["message"] == "a1: CMA (error): CmaTotal is 0 in /proc/meminfo"
    assert _conditions("warn")["Ready"]["status"] == "True"  # warn: serving goes on


def _sts_replicas(plan_apply: Any) -> list[int]:
    return [o["spec"]["replicas"] for o in plan_apply if o["kind"] == "StatefulSet"]


def _network(plan: Plan) -> JSON:
    assert plan.status is not None
    found: JSON = {c["type"]: c for c in plan.status["conditions"]}["NetworkVerified"]
    return found


def test_gate_stops_the_replica_until_a_restart_is_requested() -> None:
    obj = cluster(network={"preflight": {"mode": "gate"}})
    replica = replica_objects(obj, 0)
    pods = rank_pods(replica, ready=False)
    term = {"exitCode": 1, "reason": "Error", "message": to_json([CMA])}
    pods[1]["status"]["initContainerStatuses"] = [
        {"name": NETWORK_CONTAINER, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
         "lastState": {"terminated": term}}
    ]  # fmt: skip
    obs = observation(obj, objects=[*gateway_objects(obj), *replica], pods=pods)
    plan = decide(obs, gateway_image=GATEWAY_IMAGE)
    assert _sts_replicas(plan.apply) == [0, 0, 0]  # no engine starts anywhere
    assert (_network(plan)["status"], _network(plan)["message"]) == (
        "False", "a1: CMA (error): CmaTotal is 0 in /proc/meminfo"
    )  # fmt: skip
    # The pods are gone with the stop; the verdict stays and so does the stop.
    obs = advance(obs, plan, seconds=60)
    assert obs.observed.pods == []
    for _ in range(3):
        plan = decide(obs, gateway_image=GATEWAY_IMAGE)
        assert not [r for r in _sts_replicas(plan.apply) if r]
        obs = advance(obs, plan, seconds=600)
    assert obs.obj is not None
    assert [c["status"] for c in obs.obj["status"]["conditions"]
            if c["type"] == "NetworkVerified"] == ["False"]  # fmt: skip
    network = obs.obj["status"]["network"]  # the findings outlive the pods too
    assert network["findings"] == [
        {"node": "a1", "check": "CMA", "severity": "error",
         "message": "CmaTotal is 0 in /proc/meminfo"}
    ]  # fmt: skip
    # sparkllm.io/restart=now runs the checks again: the ranks start.
    obs.obj["metadata"]["annotations"]["sparkllm.io/restart"] = "now"
    started: list[int] = []
    for _ in range(3):
        plan = decide(obs, gateway_image=GATEWAY_IMAGE)
        started += _sts_replicas(plan.apply)
        obs = advance(obs, plan, seconds=600, pods=False)
    assert started[-3:] == [1, 1, 1]


def _result(rank: int, gbps: float | None, *, threshold: float = 150) -> str:
    findings: tuple[Finding, ...] = ()
    if rank == 0 and gbps is not None:
        severity = Severity.ERROR if gbps < threshold else Severity.INFO
        text = f"all_reduce bus bandwidth {gbps:.1f} Gb/s at 128 MiB across 3 ranks"
        if gbps < threshold:
            text += f", below the threshold {threshold:g} Gb/s"
        findings = (Finding("x", Check.BANDWIDTH, severity, text),)
    return BandwidthResult(
        rank=rank, op="all_reduce", ranks=3, nbytes=128 * MIB, busbw_gbps=gbps,
        threshold_gbps=threshold, findings=findings,
    ).to_json()  # fmt: skip


def measured(node: str, rank: int, message: str | None, *, code: int = 0) -> JSON:
    """A rank pod whose verify-network passed and whose verify-bandwidth ran (or runs)."""
    found = pod(node, [])
    found["metadata"]["labels"] = {"sparkllm.io/replica": "0"}
    found["spec"]["initContainers"] = [{"name": NETWORK_CONTAINER}, {"name": BANDWIDTH_CONTAINER}]
    state: JSON = {"running": {}}
    if message is not None:
        state = {"terminated": {"exitCode": code, "message": message}}
    found["status"]["initContainerStatuses"].append({"name": BANDWIDTH_CONTAINER, "state": state})
    return found


def test_the_collective_is_waited_for_then_reported() -> None:
    running = [measured("a", 0, None), measured("b", 1, None), measured("c", 2, None)]
    cond = network_condition(running, generation=2, expected=3)
    assert (cond["status"], cond["message"]) == (
        "Unknown", "0 of 3 ranks reported their network check"
    )  # fmt: skip
    done = [measured("a", 0, _result(0, 183.4)), measured("b", 1, _result(1, 183.4)),
            measured("c", 2, _result(2, 183.4))]  # fmt: skip
    cond = network_condition(done, generation=2, expected=3)
    assert (cond["status"], cond["reason"]) == ("True", "NetworkChecksPassed")
    assert cond["message"] == (
        "3 ranks passed the network checks; all network checks passed; "
        "replica 0: all_reduce bus bandwidth 183.4 Gb/s (threshold 150)"
    )
    status = network_status(done)
    assert status["bandwidth"] == [
        {"replica": 0, "node": "a", "op": "all_reduce", "ranks": 3, "sizeMiB": 128,
         "busBandwidthGbps": 183.4, "thresholdGbps": 150.0}
    ]  # fmt: skip
    assert status["findings"] == [
        {"node": "a", "check": "Bandwidth", "severity": "info",
         "message": "all_reduce bus bandwidth 183.4 Gb/s at 128 MiB across 3 ranks"}
    ]  # fmt: skip


def test_below_the_threshold_names_the_measurement() -> None:
    pods = [measured("a", 0, _result(0, 24.0, threshold=150), code=1), measured("b", 1, None)]
    cond = network_condition(pods, generation=1, expected=3)
    assert (cond["status"], cond["reason"]) == ("False", "NetworkCheckFailed")
    assert cond["message"] == (
        "a: Bandwidth (error): all_reduce bus bandwidth 24.0 Gb/s at 128 MiB across 3 ranks, "
        "below the threshold 150 Gb/s"
    )


def test_a_collective_that_left_no_result_is_an_error() -> None:
    # e.g. an engine image without python3 (FallbackToLogsOnError gives its log instead).
    cond = network_condition(
        [measured("a", 0, "python3: not found", code=127)], generation=1, expected=1
    )
    assert cond["status"] == "False"
    assert cond["message"] == (
        "a: Preflight (error): verify-bandwidth: unreadable result (exit code 127): "
        "python3: not found"
    )


def test_a_collective_that_ended_silently_is_an_error() -> None:
    # e.g. the dev cluster without the torch venv: kwok marks it Completed, no message.
    cond = network_condition([measured("a", 0, "")], generation=1, expected=1)
    assert (cond["status"], cond["message"]) == (
        "False", "a: Preflight (error): verify-bandwidth: ended without a result (exit code 0)"
    )  # fmt: skip


def test_status_findings_are_ordered_and_bounded() -> None:
    many = [Finding("x", Check.NCCL_CONF, Severity.WARNING, f"w{i}") for i in range(40)]
    status = network_status([pod("a", [*many, CMA])])
    assert len(status["findings"]) == 32
    assert status["omittedFindings"] == 9
    assert status["findings"][0]["check"] == "CMA"  # errors first
    assert {f["node"] for f in status["findings"]} == {"a"}  # the pod's node
