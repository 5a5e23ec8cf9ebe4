"""The memory preflight (spec.memoryPreflight): the check over /proc texts, the command
over a node's fixture tree, the init container it renders, and MemoryVerified with its
gate (the replica stopped until a restart) and warn (serving, said in the condition).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkllm.cli import main as cli_main
from sparkllm.preflight import Check, Finding, Severity
from sparkllm.preflight.findings import from_json, to_json
from sparkllm.preflight.memory import MemoryNeed, check_memory_available, parse_pressure
from sparkllm.reconcile.decide import decide
from sparkllm.reconcile.decide.memory_proof import memory_condition
from sparkllm.render.memory_preflight import MEMORY_CONTAINER, PROC_MOUNT
from sparkllm.render.network_preflight import NETWORK_CONTAINER
from sparkllm.render.ranks import VERIFY_CONTAINER
from sparkllm.sglang_contract.launch_check import LAUNCH_CHECK_CONTAINER
from sparkllm_dev.devcluster.memory_host import SparkMemory, write_memory
from tests.unit.reconcile_fixtures import (
    GATEWAY_IMAGE,
    cluster,
    gateway_objects,
    matching,
    observation,
    rank_pods,
    replica_objects,
    status_of,
)
from tests.unit.reconcile_world import advance
from tests.unit.test_render_ranks import pod_spec, sample, statefulsets

JSON = dict[str, Any]
NEED = MemoryNeed(rank=1, weights_gb=54.79, kv_pool_gb=18.17)  # the sample's rank 1
PSI_QUIET = "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"  # noqa: E501


def meminfo(available_kb: int, *, swap_total: int = 0, swap_free: int = 0) -> str:
    return (
        f"MemTotal:       125000000 kB\nMemAvailable:   {available_kb} kB\n"
        f"SwapTotal:      {swap_total} kB\nSwapFree:       {swap_free} kB\n"
    )


def test_a_spark_at_rest_has_room_for_its_rank() -> None:
    assert NEED.total_gb == pytest.approx(76.96)
    assert check_memory_available(meminfo(117_000_000), PSI_QUIET, node="n", need=NEED) == []


def test_too_little_mem_available_is_an_error_naming_the_plan() -> None:
    [found] = check_memory_available(meminfo(40_000_000), PSI_QUIET, node="spark-b1", need=NEED)
    assert (found.node, found.check, found.severity) == ("spark-b1", Check.MEM_AVAILABLE, "error")
    assert found.message.startswith(
        "MemAvailable 40.96 GB is below the 76.96 GB rank 1 needs (plan: 54.79 GB weights + "
        "18.17 GB KV pool + 4 GB runtime)"
    )


def test_swap_in_use_warns_and_configured_swap_alone_does_not() -> None:
    used = meminfo(117_000_000, swap_total=8_000_000, swap_free=6_000_000)
    [found] = check_memory_available(used, PSI_QUIET, node="n", need=NEED)
    assert (found.check, found.severity) == (Check.SWAP, Severity.WARNING)
    assert found.message.startswith("2.05 GB of swap in use")
    idle = meminfo(117_000_000, swap_total=8_000_000, swap_free=8_000_000)
    assert check_memory_available(idle, PSI_QUIET, node="n", need=NEED) == []


@pytest.mark.parametrize(
    ("some", "full", "expected"),
    [
        (0.5, 0.0, []),
        (12.0, 0.5, [(Severity.WARNING, "memory pressure some avg10=12.00 %")]),
        (40.0, 3.1, [(Severity.ERROR, "memory pressure full avg10=3.10 %")]),
    ],
)
def test_memory_pressure(some: float, full: float, expected: list[tuple[Severity, str]]) -> None:
    psi = f"some avg10={some} avg60=1 avg300=1 total=9\nfull avg10={full} avg60=0 avg300=0 total=1"
    assert parse_pressure(psi).full_avg10 == full
    found = check_memory_available(meminfo(117_000_000), psi, node="n", need=NEED)
    assert [(f.severity, f.message.split(" (")[0]) for f in found] == expected
    assert all(f.check is Check.MEMORY_PRESSURE for f in found)


def test_unreadable_files_and_no_plan() -> None:
    found = check_memory_available(None, None, node="n", need=NEED)
    assert [(f.check, f.severity) for f in found] == [
        (Check.MEM_AVAILABLE, Severity.ERROR),  # a gate cannot pass what it cannot read
        (Check.MEMORY_PRESSURE, Severity.INFO),  # a kernel without PSI
    ]
    [info] = check_memory_available(meminfo(117_000_000), PSI_QUIET, node="n", need=None)
    assert info.severity is Severity.INFO
    assert info.message == (
        "MemAvailable 119.81 GB; no capacity plan to compare it with "
        "(spec.model.weightsGB is not set)"
    )


@pytest.mark.parametrize(("gate", "code"), [(False, 0), (True, 1)])
def test_the_command_reads_a_node_tree(tmp_path: Path, gate: bool, code: int) -> None:
    root = write_memory(tmp_path / "spark-b1", SparkMemory(available_kb=40_000_000))
    log = tmp_path / "termination-log"
    argv = [
        "verify-memory", "--rank", "1", "--weights-gb", "54.79", "--kv-pool-gb", "18.17",
        "--proc-dir", str(root / "proc"), "--node", "spark-b1", "--termination-log", str(log),
    ]  # fmt: skip
    assert cli_main([*argv, *(["--gate"] if gate else [])]) == code
    [found] = from_json(log.read_text())
    assert (found.node, found.check, found.severity) == ("spark-b1", Check.MEM_AVAILABLE, "error")
    write_memory(root)  # a Spark at rest
    assert cli_main([*argv, "--gate"]) == 0
    assert from_json(log.read_text()) == []


def _pods(mode: str, **network: Any) -> list[JSON]:
    ic = sample(memoryPreflight={"mode": mode}, **network)
    return [pod_spec(sts) for sts in statefulsets(ic)]


def test_render_off_adds_nothing_and_on_checks_last() -> None:
    for pod in _pods("off"):
        assert MEMORY_CONTAINER not in [c["name"] for c in pod["initContainers"]]
    for rank, pod in enumerate(_pods("gate")):
        names = [c["name"] for c in pod["initContainers"]]
        assert names == [VERIFY_CONTAINER, LAUNCH_CHECK_CONTAINER, MEMORY_CONTAINER]
        check = pod["initContainers"][-1]
        args = check["args"]
        assert args[:3] == ["verify-memory", "--rank", str(rank)]
        assert args[args.index("--proc-dir") + 1] == PROC_MOUNT
        assert "--gate" in args
        weights = float(args[args.index("--weights-gb") + 1])
        assert weights == (58.7 if rank == 2 else 54.79)  # the plan's layerPartition 14/14/15
        assert check["volumeMounts"] == [
            {"name": "host-proc", "mountPath": PROC_MOUNT, "readOnly": True}
        ]
        assert check["securityContext"]["runAsNonRoot"] is True
        assert {"name": "host-proc", "hostPath": {"path": "/proc", "type": "Directory"}} in pod[
            "volumes"
        ]
    warn = _pods("warn")[0]["initContainers"][-1]["args"]
    assert "--gate" not in warn


def test_render_shares_the_network_preflights_proc_volume() -> None:
    for pod in _pods("warn", network={"preflight": {"mode": "warn"}}):
        assert [v["name"] for v in pod["volumes"]].count("host-proc") == 1
        names = [c["name"] for c in pod["initContainers"]]
        assert names[0] == NETWORK_CONTAINER
        assert names[-1] == MEMORY_CONTAINER


SHORT = Finding("a1", Check.MEM_AVAILABLE, Severity.ERROR, "MemAvailable 40.96 GB is below")
SWAPPING = Finding("a2", Check.SWAP, Severity.WARNING, "2.05 GB of swap in use")


def pod(node: str, findings: list[Finding] | None, *, code: int = 0) -> JSON:
    statuses = []
    if findings is not None:
        term = {"exitCode": code, "message": to_json(findings)}
        statuses.append({"name": MEMORY_CONTAINER, "state": {"terminated": term}})
    return {
        "metadata": {"name": f"pod-{node}"},
        "spec": {"nodeName": node},
        "status": {"initContainerStatuses": statuses},
    }


def test_the_condition_names_the_node_waits_for_all_and_passes() -> None:
    failed = memory_condition([pod("a1", [SHORT], code=1), pod("a2", None)], generation=2)
    assert (failed["type"], failed["status"], failed["reason"]) == (
        "MemoryVerified", "False", "MemoryCheckFailed"
    )  # fmt: skip
    assert failed["message"] == "a1: MemAvailable (error): MemAvailable 40.96 GB is below"
    pending = memory_condition([pod("a1", []), pod("a2", None)], generation=2, expected=3)
    assert (pending["status"], pending["message"]) == (
        "Unknown", "1 of 3 ranks reported their memory check"
    )  # fmt: skip
    passed = memory_condition([pod("a1", []), pod("a2", [SWAPPING])], generation=2, expected=2)
    assert (passed["status"], passed["message"]) == (
        "True",
        "2 ranks had the memory their plan needs free; a2: Swap (warning): 2.05 GB of swap in use",
    )


def _pass(mode: str, *, exit_code: int) -> tuple[Any, Any]:
    obj = cluster(memoryPreflight={"mode": mode})
    replica = replica_objects(obj, 0)
    pods = rank_pods(replica, ready=mode == "warn")
    term = {"exitCode": exit_code, "message": to_json([SHORT])}
    status: JSON = {"name": MEMORY_CONTAINER, "state": {"terminated": term}}
    if exit_code:
        status = {"name": MEMORY_CONTAINER, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                  "lastState": {"terminated": {**term, "reason": "Error"}}}  # fmt: skip
    pods[1]["status"]["initContainerStatuses"] = [status]
    obs = observation(
        obj, objects=[*gateway_objects(obj), *replica], pods=pods, server_info=matching(0)
    )
    return obs, decide(obs, gateway_image=GATEWAY_IMAGE)


def _conditions(plan: Any) -> dict[str, JSON]:
    return {c["type"]: c for c in plan.status["conditions"]}


def test_warn_serves_and_says_so() -> None:
    _, plan = _pass("warn", exit_code=0)
    conditions = _conditions(plan)
    assert (conditions["MemoryVerified"]["status"], conditions["Ready"]["status"]) == (
        "False", "True"
    )  # fmt: skip
    assert plan.status["memory"]["findings"][0]["check"] == "MemAvailable"
    assert any(e.reason == "MemoryCheckFailed" and e.warning for e in plan.events)


def test_warn_keeps_its_verdict_through_a_pass_that_sees_no_result() -> None:
    """A pass that sees the rank pods without their memory results (a pod being replaced,
    a status not written yet) keeps the warn verdict: no flip to Unknown and back, so the
    Warning Event is posted once (three identical Events were seen in CI)."""
    obs, plan = _pass("warn", exit_code=0)
    first = _conditions(plan)["MemoryVerified"]
    assert first["status"] == "False"
    obs = advance(obs, plan, seconds=5)
    for pod in obs.observed.pods:
        pod["status"].pop("initContainerStatuses", None)
    again = decide(obs, gateway_image=GATEWAY_IMAGE)
    kept = next(c for c in status_of(obs, again)["conditions"] if c["type"] == "MemoryVerified")
    assert (kept["status"], kept["message"]) == ("False", first["message"])
    assert not [e for e in again.events if e.reason == "MemoryCheckFailed"]


def test_gate_stops_the_replica_until_a_restart_is_requested() -> None:
    obs, plan = _pass("gate", exit_code=1)
    statefulsets_ = [o["spec"]["replicas"] for o in plan.apply if o["kind"] == "StatefulSet"]
    assert statefulsets_ == [0, 0, 0]
    assert _conditions(plan)["MemoryVerified"]["message"].startswith("a1: MemAvailable (error)")
    obs = advance(obs, plan, seconds=60)
    assert obs.observed.pods == []
    plan = decide(obs, gateway_image=GATEWAY_IMAGE)
    assert not [o for o in plan.apply if o["kind"] == "StatefulSet" and o["spec"]["replicas"]]
    obs = advance(obs, plan, seconds=600)
    assert obs.obj is not None
    kept = obs.obj["status"]
    assert [c["status"] for c in kept["conditions"] if c["type"] == "MemoryVerified"] == ["False"]
    assert kept["memory"]["findings"][0]["node"] == "a1"  # outlives the pods
    ready = next(c for c in kept["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False"
    obs.obj["metadata"]["annotations"]["sparkllm.io/restart"] = "now"
    started: list[int] = []
    for _ in range(3):
        plan = decide(obs, gateway_image=GATEWAY_IMAGE)
        started += [o["spec"]["replicas"] for o in plan.apply if o["kind"] == "StatefulSet"]
        obs = advance(obs, plan, seconds=600, pods=False)
    assert started[-3:] == [1, 1, 1]
