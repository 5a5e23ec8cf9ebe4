"""NetworkVerified end to end: every rank's verify-network init container checks ITS node,
then verify-bandwidth measures the collective across the replica's ranks.

The engine harness runs each rank's ``verify-network`` for real, on the /sys, /proc and
/etc fixture trees under ``<hosts root>/<node>/`` (``sparkllm_dev.devcluster.fabric``:
a DGX Spark as the kernel shows it, with the node's own address), and each rank's
``verify-bandwidth`` as the real module under Gloo over loopback with the torch venv
(``hack/setup-torch.sh``), importing it from the emptyDir verify-network filled. One
node misconfigured (``CmaTotal: 0``): the condition must be False and name that node and
that check. A threshold no loopback reaches: False naming rank 0's node and the measured
Gb/s. In warn mode the replica serves anyway; in gate mode no engine starts.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from sparkllm_dev.devcluster import DevCluster, wait_until
from sparkllm_dev.devcluster.fabric import Fault, SparkFabric, write_spark_tree
from sparkllm_dev.errors import WaitTimeoutError
from sparkllm_dev.gloo_bandwidth import TORCH_SETUP, torch_venv
from tests.integration.test_model_verified import DEADLINE, Stack, stack  # noqa: F401
from tests.integration.test_reconcile import apply, condition, icl, pods, sample, user_keys
from tests.unit.tooling import filled

pytestmark = pytest.mark.cluster
GROUP_B = ["spark-b0", "spark-b1", "spark-b2"]
BAD_NODE = "spark-b1"
LOW = 0.001  # Gb/s: any loopback passes
HIGH = 99_999  # Gb/s: no loopback (nor fabric) passes
MEASURED = re.compile(
    r"^spark-b0: Bandwidth \(error\): all_reduce bus bandwidth ([\d.]+) Gb/s at 128 MiB "
    r"across 3 ranks, below the threshold 99999 Gb/s"
)


@pytest.fixture(autouse=True)
def torch_venv_ready() -> None:
    """verify-bandwidth runs only with the torch venv (a missing one fails in CI)."""
    filled(torch_venv(), marker=".complete", how=TORCH_SETUP)


def _node_ip(cluster: DevCluster, node: str) -> str:
    obj = cluster.kubectl_json("get", "node", node)
    return str(next(a["address"] for a in obj["status"]["addresses"] if a["type"] == "InternalIP"))


def _fabric(cluster: DevCluster, nodes: Stack, *, broken: bool = True) -> None:
    """Each node of group b gets a healthy Spark tree, except BAD_NODE: no CMA area."""
    for index, node in enumerate(GROUP_B):
        faults = frozenset({Fault.CMA_ZERO}) if broken and node == BAD_NODE else frozenset()
        spec = SparkFabric(host_index=index + 1, faults=faults, address=_node_ip(cluster, node))
        write_spark_tree(nodes.hosts / node, spec)


def _network_failed(cluster: DevCluster, namespace: str) -> dict[str, Any] | None:
    cond = condition(icl(cluster, namespace), "NetworkVerified")
    return cond if cond is not None and cond["status"] == "False" else None


def _apply(
    devcluster: DevCluster, namespace: str, nodes: Stack, mode: str, *, threshold: float,
    broken: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """Apply the sample on group b with the preflight on; NetworkVerified once False."""
    user_keys(devcluster, namespace)
    _fabric(devcluster, nodes, broken=broken)
    doc = sample(GROUP_B)
    doc["spec"]["network"] = {"preflight": {"mode": mode, "minBusBandwidthGbps": threshold}}
    apply(devcluster, namespace, doc)
    cond = wait_until(
        lambda: _network_failed(devcluster, namespace), timeout=DEADLINE, what="NetworkVerified"
    )
    assert cond is not None
    assert cond["reason"] == "NetworkCheckFailed"
    return cond


def _start(devcluster: DevCluster, namespace: str, nodes: Stack, mode: str) -> dict[str, Any]:
    cond = _apply(devcluster, namespace, nodes, mode, threshold=LOW)
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
    obj = _wait_serving(devcluster, namespace)
    network = condition(obj, "NetworkVerified")
    assert network is not None
    assert network["status"] == "False"
    # status.network: the structured findings, errors first, and the measurement.
    findings = obj["status"]["network"]["findings"]
    first = findings[0]
    assert (first["node"], first["check"], first["severity"]) == (BAD_NODE, "CMA", "error")
    assert first["message"].startswith("CmaTotal is 0 in /proc/meminfo")
    [measured] = obj["status"]["network"]["bandwidth"]
    assert (measured["node"], measured["ranks"], measured["sizeMiB"]) == ("spark-b0", 3, 128)
    assert measured["busBandwidthGbps"] > LOW
    assert {"node": "spark-b0", "check": "Bandwidth", "severity": "info"}.items() <= next(
        f for f in findings if f["check"] == "Bandwidth"
    ).items()


def test_gate_mode_starts_no_engine(
    devcluster: DevCluster,
    namespace: str,
    stack: Stack,  # noqa: F811 (the fixture imported above)
) -> None:
    _start(devcluster, namespace, stack, "gate")
    _wait_stopped(devcluster, namespace)


def _wait_stopped(devcluster: DevCluster, namespace: str) -> None:
    """No engine runs: every rank StatefulSet at 0, no pod left; NetworkVerified stays False."""

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


def _wait_serving(devcluster: DevCluster, namespace: str) -> dict[str, Any]:
    """The InferenceCluster once Ready (warn mode serves whatever the preflight found)."""

    def serving() -> dict[str, Any] | None:
        obj = icl(devcluster, namespace)
        ready = condition(obj, "Ready")
        return obj if ready is not None and ready["status"] == "True" else None

    try:
        obj = wait_until(serving, timeout=DEADLINE, what="Ready in warn mode")
    except WaitTimeoutError as exc:  # say what the object and its pods show instead
        obj = icl(devcluster, namespace)
        status = obj.get("status") or {}
        conditions = [
            f"{c['type']}={c['status']} {c.get('reason', '')}: {str(c.get('message', ''))[:300]}"
            for c in status.get("conditions") or []
        ]
        ranks = [
            f"{p['metadata']['name']} {p.get('status', {}).get('phase')} on "
            f"{p['spec'].get('nodeName')}"
            for p in pods(devcluster, namespace)
        ]
        pytest.fail(
            f"{exc}; phase {status.get('phase')}, start {status.get('start')}; "
            f"{' | '.join(conditions)}; pods: {ranks}"
        )
    assert obj is not None
    return obj


def _measured(cond: dict[str, Any]) -> float:
    found = MEASURED.match(cond["message"])
    assert found is not None, cond["message"]
    return float(found[1])


@pytest.mark.parametrize("mode", ["warn", "gate"])
def test_below_the_bandwidth_threshold(
    devcluster: DevCluster,
    namespace: str,
    stack: Stack,  # noqa: F811 (the fixture imported above)
    mode: str,
) -> None:
    """Healthy nodes, a threshold loopback cannot reach: False naming the measured Gb/s;
    warn serves with it in status.network, gate starts no engine."""
    cond = _apply(devcluster, namespace, stack, mode, threshold=HIGH, broken=False)
    gbps = _measured(cond)
    assert gbps > 0
    if mode == "gate":
        _wait_stopped(devcluster, namespace)
        return
    obj = _wait_serving(devcluster, namespace)
    [measured] = obj["status"]["network"]["bandwidth"]
    assert measured["busBandwidthGbps"] == pytest.approx(gbps, abs=0.06)
    assert measured["thresholdGbps"] == HIGH
