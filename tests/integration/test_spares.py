"""Spare groups and quarantine on the dev cluster (issue 28 items 1-2), one journey.

A replica serving on group A; A's node made NotReady with group B free -> serving on B
(status, Events, the time); B's node fails -> back on A; A's node fails again -> past
maxNodeFailures (1) it is quarantined, and with B down too the replica waits; A's node
Ready again is still not used (settleSeconds is an hour); the lift annotation frees it
and the replica serves on A again. Faults come from the dev cluster's helpers (kwok's
node-not-ready stage), as in test_faults.py; the operator and engines run for real.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from sparkllm_dev.devcluster import DevCluster, FaultInjector, wait_until
from sparkllm_dev.testing import OperatorProcess
from tests.integration.test_faults import GROUP_A, GROUP_B, replica_status
from tests.integration.test_reconcile import NAME, apply, condition, icl, pods, sample, user_keys

pytestmark = pytest.mark.cluster


def serving_on(cluster: DevCluster, namespace: str, group: list[str]):  # type: ignore[no-untyped-def]
    """Predicate: Ready, the replica's status and every rank pod on ``group``'s nodes."""

    def check() -> dict[str, Any] | None:
        obj = icl(cluster, namespace)
        ready = condition(obj, "Ready")
        if not ready or ready["status"] != "True" or replica_status(obj).get("nodes") != group:
            return None
        current = pods(cluster, namespace)
        on = sorted(p["spec"].get("nodeName") or "" for p in current)
        gen = str(replica_status(obj)["generation"])
        gens = {p["metadata"]["labels"]["sparkllm.io/restart-generation"] for p in current}
        return obj if on == sorted(group) and gens == {gen} else None

    return check


def node_ready(cluster: DevCluster, node: str) -> bool:
    conditions = cluster.kubectl_json("get", "node", node)["status"].get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def events(cluster: DevCluster, namespace: str, reason: str) -> list[str]:
    items = cluster.kubectl_json(
        "get", "events", "-n", namespace, "--field-selector", f"reason={reason}"
    )["items"]
    return [str(e["message"]) for e in items]


def test_failover_to_a_spare_group_then_a_flapping_node_is_quarantined_until_lifted(
    devcluster: DevCluster, namespace: str, shared_operator: OperatorProcess, faults: FaultInjector
) -> None:
    doc = sample()
    doc["spec"]["placement"] = {"nodeGroups": [GROUP_A, GROUP_B]}
    doc["spec"].setdefault("restartPolicy", {})["quarantine"] = {
        "maxNodeFailures": 1,
        "settleSeconds": 3600,
    }
    user_keys(devcluster, namespace)
    apply(devcluster, namespace, doc)
    wait_until(serving_on(devcluster, namespace, GROUP_A), timeout=120, what="serving on A")
    fail_over_and_back(devcluster, namespace, faults)
    quarantine_until_lifted(devcluster, namespace, faults)


def fail_over_and_back(cluster: DevCluster, namespace: str, faults: FaultInjector) -> None:
    """A's node fails with B free: serving on B; then B's node fails: back on A."""
    started = time.monotonic()
    faults.node_not_ready("spark-a1")
    obj = wait_until(serving_on(cluster, namespace, GROUP_B), timeout=120, what="on B")
    took = time.monotonic() - started
    moved = replica_status(obj)
    assert moved["nodeGroup"] == "group-1"
    assert moved["lastFailover"]["from"] == "group-0"
    assert moved["lastFailover"]["to"] == "group-1"
    assert moved["lastFailover"]["reason"] == "node spark-a1 NotReady"
    (failover,) = events(cluster, namespace, "NodeFailover")
    assert "moved from node group 'group-0' (spark-a0, spark-a1, spark-a2)" in failover
    assert [f["node"] for f in obj["status"]["nodeFailures"]] == ["spark-a1"]
    assert not obj["status"].get("quarantine")
    print(f"[failover] spark-a1 NotReady -> serving on group-1 {GROUP_B} in {took:.1f} s")
    print(f"[failover] status lastFailover: {moved['lastFailover']}")
    print(f"[failover] Event NodeFailover: {failover}")
    # One failure of spark-a1 is allowed (maxNodeFailures 1): A is a spare again.
    faults.node_ready("spark-a1")
    wait_until(lambda: node_ready(cluster, "spark-a1"), timeout=60, what="spark-a1 Ready")
    faults.node_not_ready("spark-b0")
    obj = wait_until(serving_on(cluster, namespace, GROUP_A), timeout=120, what="back on A")
    print(f"[failover] spark-b0 NotReady -> back on group-0: {replica_status(obj)['lastFailover']}")


def quarantine_until_lifted(cluster: DevCluster, namespace: str, faults: FaultInjector) -> None:
    """spark-a1 fails a replica again: quarantined; Ready, still not used; lifted: used."""
    faults.node_not_ready("spark-a1")  # 2 failures > maxNodeFailures 1; B is down too

    def quarantined() -> dict[str, Any] | None:
        current = icl(cluster, namespace)
        listed = [q["node"] for q in current["status"].get("quarantine") or []]
        return current if listed == ["spark-a1"] else None

    obj = wait_until(quarantined, timeout=60, what="spark-a1 quarantined")
    (entry,) = obj["status"]["quarantine"]
    assert entry["reason"].startswith("failed a replica 2 times within 3600 s"), entry
    # The Event may follow the status write that listed the node: wait for it.
    (event,) = wait_until(
        lambda: events(cluster, namespace, "NodeQuarantined"),
        timeout=30,
        what="the NodeQuarantined Event",
    )
    print(f"[quarantine] status: {entry}")
    print(f"[quarantine] Event NodeQuarantined: {event}")
    faults.node_ready("spark-a1")

    def held() -> dict[str, Any] | None:
        current = icl(cluster, namespace)
        message = replica_status(current).get("message") or ""
        return current if "spark-a1 quarantined" in message else None

    obj = wait_until(held, timeout=60, what="spark-a1 Ready but quarantined")
    assert node_ready(cluster, "spark-a1")
    assert replica_status(obj)["phase"] == "Degraded"
    sts = cluster.kubectl_json("get", "sts", "-n", namespace)["items"]
    assert all(s["spec"]["replicas"] == 0 for s in sts)
    print(f"[quarantine] spark-a1 Ready, not used: {replica_status(obj)['message']}")
    lifted_at = time.monotonic()
    cluster.kubectl(
        "annotate", "icl", NAME, "-n", namespace, "sparkllm.io/lift-quarantine=spark-a1"
    )
    obj = wait_until(serving_on(cluster, namespace, GROUP_A), timeout=120, what="lifted")
    assert obj["status"]["quarantine"] == []
    assert "sparkllm.io/lift-quarantine" not in (obj["metadata"].get("annotations") or {})
    (lift,) = events(cluster, namespace, "QuarantineLifted")
    print(f"[quarantine] lifted -> serving on group-0 in {time.monotonic() - lifted_at:.1f} s")
    print(f"[quarantine] Event QuarantineLifted: {lift}")
