"""The memory preflight end to end: each rank's ``verify-memory`` init container reads ITS
node's /proc/meminfo and /proc/pressure/memory, right before the engine.

The engine harness runs the real ``sparkllm verify-memory`` on the fixture tree under
``<hosts root>/<node>/proc`` (``sparkllm_dev.devcluster.memory_host``): two Sparks at rest
and one, spark-b1, where something else holds the memory (40.96 GB available, its rank
needs the plan's 54.79 GB of weights + 18.17 GB of KV pool + 4 GB). One journey, both
modes: warn serves with MemoryVerified False naming that node and a Warning Event; the
same object switched to gate restarts its ranks, and no engine stays up: the replica is
stopped with MemoryVerified False and the finding in status.memory.
"""

from __future__ import annotations

from typing import Any

import pytest

from sparkllm_dev.devcluster import DevCluster, wait_until
from sparkllm_dev.devcluster.memory_host import SparkMemory, write_memory
from tests.integration.test_model_verified import DEADLINE, Stack, stack  # noqa: F401
from tests.integration.test_reconcile import NAME, apply, condition, icl, pods, sample, user_keys

pytestmark = pytest.mark.cluster
GROUP_B = ["spark-b0", "spark-b1", "spark-b2"]
SHORT_NODE = "spark-b1"
EXPECTED = (
    "spark-b1: MemAvailable (error): MemAvailable 40.96 GB is below the 76.96 GB rank 1 needs "
    "(plan: 54.79 GB weights + 18.17 GB KV pool + 4 GB runtime); something else holds the "
    "node's memory: loading the weights would push it into unified-memory pressure"
)


def _memory(devcluster: DevCluster, namespace: str, *, generation: int) -> dict[str, Any] | None:
    """The object once MemoryVerified is False for ``generation``."""
    obj = icl(devcluster, namespace)
    found = condition(obj, "MemoryVerified")
    if found and found["status"] == "False" and found.get("observedGeneration") == generation:
        return obj
    return None


def _lines(devcluster: DevCluster, namespace: str, mode: str) -> None:
    """What the closing note shows: the conditions, status.memory, the phases."""
    obj = icl(devcluster, namespace)
    for kind in ("Ready", "MemoryVerified"):
        found = condition(obj, kind) or {}
        said = f"{found.get('status')} {found.get('reason')}: {found.get('message')}"
        print(f"[{mode}] {kind}={said}")
    print(f"[{mode}] status.memory = {obj['status'].get('memory')}")
    print(f"[{mode}] phase={obj['status'].get('phase')}")
    for replica in obj["status"].get("replicaStatuses") or []:
        print(f"[{mode}] replica {replica['index']}: {replica['phase']}: {replica.get('message')}")


def test_a_node_without_the_memory_its_rank_needs(
    devcluster: DevCluster,
    namespace: str,
    stack: Stack,  # noqa: F811 (the fixture imported above)
) -> None:
    user_keys(devcluster, namespace)
    for node in GROUP_B:
        short = SparkMemory(available_kb=40_000_000) if node == SHORT_NODE else None
        write_memory(stack.hosts / node, short)
    doc = sample(GROUP_B)
    doc["spec"]["memoryPreflight"] = {"mode": "warn"}
    apply(devcluster, namespace, doc)

    # warn: the engines start; MemoryVerified says which node lacks what.
    def serving() -> dict[str, Any] | None:
        obj = _memory(devcluster, namespace, generation=1)
        ready = condition(obj, "Ready") if obj else None
        return obj if ready and ready["status"] == "True" else None

    obj = wait_until(serving, timeout=DEADLINE, what="Ready with MemoryVerified False (warn)")
    assert obj is not None
    memory = condition(obj, "MemoryVerified")
    assert memory is not None
    assert (memory["reason"], memory["message"]) == ("MemoryCheckFailed", EXPECTED)
    [finding] = obj["status"]["memory"]["findings"]
    assert (finding["node"], finding["check"], finding["severity"]) == (
        SHORT_NODE, "MemAvailable", "error"
    )  # fmt: skip
    warnings = devcluster.kubectl_json(
        "get", "events", "-n", namespace, "--field-selector",
        "reason=MemoryCheckFailed,type=Warning",
    )["items"]  # fmt: skip
    assert [e["message"] for e in warnings] == [EXPECTED]
    _lines(devcluster, namespace, "warn")

    # gate: the same object, the ranks restart with --gate; spark-b1's check fails its init
    # container, the replica is stopped and stays so, the finding kept in status.
    devcluster.kubectl(
        "patch", "icl", NAME, "-n", namespace, "--type", "merge",
        "-p", '{"spec": {"memoryPreflight": {"mode": "gate"}}}',
    )  # fmt: skip

    def stopped() -> dict[str, Any] | None:
        obj = _memory(devcluster, namespace, generation=2)
        if obj is None or pods(devcluster, namespace):
            return None
        sets = devcluster.kubectl_json(
            "get", "statefulsets", "-n", namespace, "-l", "app.kubernetes.io/component=engine"
        )["items"]
        return obj if sets and all(s["spec"]["replicas"] == 0 for s in sets) else None

    obj = wait_until(stopped, timeout=DEADLINE, what="the gated replica stopped")
    assert obj is not None
    memory = condition(obj, "MemoryVerified")
    assert memory is not None
    assert memory["message"] == EXPECTED
    ready = condition(obj, "Ready")
    assert ready is not None
    assert ready["status"] == "False"
    assert [f["node"] for f in obj["status"]["memory"]["findings"]] == [SHORT_NODE]
    _lines(devcluster, namespace, "gate")
