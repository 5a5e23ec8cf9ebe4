"""NetworkVerified end to end: every rank's verify-network init container checks ITS node.

The engine harness runs each rank's ``verify-network`` for real, on the /sys, /proc and
/etc fixture trees under ``<hosts root>/<node>/`` (``sparkllm_dev.devcluster.fabric``:
a DGX Spark as the kernel shows it, with the node's own address). One node of the group
is misconfigured (``CmaTotal: 0``): the condition must be False and name that node and
that check. In warn mode the replica serves anyway; in gate mode no engine starts.
"""

from __future__ import annotations

from typing import Any

import pytest

from sparkllm_dev.devcluster import DevCluster, wait_until
from sparkllm_dev.devcluster.fabric import Fault, SparkFabric, write_spark_tree
from tests.integration.test_model_verified import DEADLINE, Stack, stack  # noqa: F401
from tests.integration.test_reconcile import apply, condition, icl, pods, sample, user_keys

pytestmark = pytest.mark.cluster
GROUP_B = ["spark-b0", "spark-b1", "spark-b2"]
BAD_NODE = "spark-b1"


def _node_ip(cluster: DevCluster, node: str) -> str:
    obj = cluster.kubectl_json("get", "node", node)
    return str(next(a["address"] for a in obj["status"]["addresses"] if a["type"] == "InternalIP"))


def _fabric(cluster: DevCluster, nodes: Stack) -> None:
    """Each node of group b gets a healthy Spark tree, except BAD_NODE: no CMA area."""
    for index, node in enumerate(GROUP_B):
        faults = frozenset({Fault.CMA_ZERO}) if node == BAD_NODE else frozenset()
        spec = SparkFabric(host_index=index + 1, faults=faults, address=_node_ip(cluster, node))
        write_spark_tree(nodes.hosts / node, spec)


def _network_failed(cluster: DevCluster, namespace: str) -> dict[str, Any] | None:
    cond = condition(icl(cluster, namespace), "NetworkVerified")
    return cond if cond is not None and cond["status"] == "False" else None


def _start(devcluster: DevCluster, namespace: str, nodes: Stack, mode: str) -> dict[str, Any]:
    user_keys(devcluster, namespace)
    _fabric(devcluster, nodes)
    doc = sample(GROUP_B)
    doc["spec"]["network"] = {"preflight": {"mode": mode}}
    apply(devcluster, namespace, doc)
    cond = wait_until(
        lambda: _network_failed(devcluster, namespace), timeout=DEADLINE, what="NetworkVerified"
    )
    assert cond is not None
    assert cond["reason"] == "NetworkCheckFailed"
    assert cond["message"].startswith(f"{BAD_NODE}: CMA (error): CmaTotal is 0")
    assert "spark-b0" not in cond["message"]
    assert "spark-b2" not in cond["message"]
    return cond


def test_warn_mode_serves_with_network_verified_false(
    devcluster: DevCluster,
    namespace: str,
    stack: Stack,  # noqa: F811 (the fixture imported above)
) -> None:
    _start(devcluster, namespace, stack, "warn")

    def serving() -> dict[str, Any] | None:
        obj = icl(devcluster, namespace)
        ready = condition(obj, "Ready")
        return obj if ready is not None and ready["status"] == "True" else None

    obj = wait_until(serving, timeout=DEADLINE, what="Ready in warn mode")
    assert obj is not None
    network = condition(obj, "NetworkVerified")
    assert network is not None
    assert network["status"] == "False"


def test_gate_mode_starts_no_engine(
    devcluster: DevCluster,
    namespace: str,
    stack: Stack,  # noqa: F811 (the fixture imported above)
) -> None:
    _start(devcluster, namespace, stack, "gate")

    def stopped() -> bool:
        sts = devcluster.kubectl_json(
            "get", "statefulsets", "-n", namespace, "-l", "app.kubernetes.io/component=engine"
        )["items"]
        return (
            bool(sts)
            and all(s["spec"]["replicas"] == 0 for s in sts)
            and not pods(devcluster, namespace)
        )

    wait_until(stopped, timeout=DEADLINE, what="the gated replica stopped")
    obj = icl(devcluster, namespace)
    statuses = {k: (condition(obj, k) or {}).get("status") for k in ("Ready", "NetworkVerified")}
    assert statuses == {"Ready": "False", "NetworkVerified": "False"}
