"""The harness is real: controller-manager, scheduler and kwok act on what we create."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from sparkllm_dev.devcluster import (
    ContainerFault,
    DevCluster,
    FaultInjector,
    wait_until,
)

pytestmark = pytest.mark.cluster


def _statefulset(name: str, node: str) -> dict[str, Any]:
    """A one-pod StatefulSet pinned by REQUIRED node affinity (not nodeName) to ``node``."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "serviceName": name,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "hostNetwork": True,
                    "dnsPolicy": "ClusterFirstWithHostNet",
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchFields": [
                                            {
                                                "key": "metadata.name",
                                                "operator": "In",
                                                "values": [node],
                                            }
                                        ]
                                    }
                                ]
                            }
                        }
                    },
                    "containers": [
                        {
                            "name": "engine",
                            "image": "registry.invalid/sim:1",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                },
            },
        },
    }


def _pod(cluster: DevCluster, namespace: str, name: str) -> dict[str, Any]:
    pod: dict[str, Any] = cluster.kubectl_json("get", "pod", name, "-n", namespace)
    return pod


def _condition(obj: dict[str, Any], kind: str) -> str | None:
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond["type"] == kind:
            return str(cond["status"])
    return None


def test_six_spark_nodes_registered(devcluster: DevCluster) -> None:
    nodes = {n["metadata"]["name"]: n for n in devcluster.kubectl_json("get", "nodes")["items"]}
    expected = devcluster.nodes()
    assert sorted(nodes) == sorted(n.name for n in expected)
    for sim in expected:
        node = nodes[sim.name]
        labels = node["metadata"]["labels"]
        assert labels["sparkllm.io/node-group"] == sim.group
        assert labels["sparkllm.io/rank"] == str(sim.rank)
        assert labels["kubernetes.io/arch"] == "arm64"
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-GB10"
        assert node["status"]["capacity"]["nvidia.com/gpu"] == "1"
        assert node["status"]["capacity"]["memory"] == "128Gi"
        internal = [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"]
        assert internal == [sim.ip]
        assert _condition(node, "Ready") == "True"


def test_statefulset_pod_scheduled_by_affinity_and_made_ready(
    devcluster: DevCluster, namespace: str, faults: FaultInjector
) -> None:
    devcluster.kubectl(
        "apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(_statefulset("rank", "spark-a1"))
    )
    # The controller-manager creates the pod, the scheduler binds it, kwok runs it.
    pod = wait_until(
        lambda: (
            (p := _pod(devcluster, namespace, "rank-0")) and _condition(p, "Ready") == "True" and p
        ),
        timeout=60,
        what="pod rank-0 Ready",
    )
    assert pod["spec"]["nodeName"] == "spark-a1"
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["hostIP"] == devcluster.node_ip("spark-a1")
    assert pod["status"]["podIP"] == devcluster.node_ip(
        "spark-a1"
    )  # hostNetwork: the pod has its node's IP
    owner = pod["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("StatefulSet", "rank")
    events = devcluster.kubectl_json(
        "get", "events", "-n", namespace, "--field-selector", "involvedObject.name=rank-0"
    )["items"]
    scheduled = [e for e in events if e["reason"] == "Scheduled"]
    assert scheduled, "the scheduler (not nodeName) placed the pod"
    assert "spark-a1" in scheduled[0]["message"]

    faults.fail_container(namespace=namespace, pod="rank-0", exit_code=137, reason="OOMKilled")
    pod = wait_until(
        lambda: (
            (p := _pod(devcluster, namespace, "rank-0"))
            and p["status"]["containerStatuses"][0].get("restartCount") == 1
            and p
        ),
        timeout=30,
        what="container restart visible in pod status",
    )
    status = pod["status"]["containerStatuses"][0]
    assert status["lastState"]["terminated"]["exitCode"] == 137
    assert status["lastState"]["terminated"]["reason"] == "OOMKilled"
    assert status["ready"] is False
    assert _condition(pod, "Ready") == "False"


def test_container_failed_mode_fails_the_pod(
    devcluster: DevCluster, namespace: str, faults: FaultInjector
) -> None:
    devcluster.kubectl(
        "apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(_statefulset("r", "spark-b2"))
    )
    wait_until(
        lambda: _condition(_pod(devcluster, namespace, "r-0"), "Ready") == "True",
        timeout=60,
        what="pod r-0 Ready",
    )
    uid = _pod(devcluster, namespace, "r-0")["metadata"]["uid"]
    faults.fail_container(
        namespace=namespace, pod="r-0", exit_code=1, reason="Error", mode=ContainerFault.FAILED
    )

    def failed_or_replaced() -> bool:
        pod = _pod(devcluster, namespace, "r-0")
        if pod["metadata"]["uid"] != uid:
            return True  # the StatefulSet controller already replaced the failed pod
        terminated = pod["status"]["containerStatuses"][0]["state"].get("terminated", {})
        return pod["status"]["phase"] == "Failed" and terminated.get("exitCode") == 1

    wait_until(failed_or_replaced, timeout=30, what="pod failed (or replaced by the controller)")


def test_node_not_ready_and_back(devcluster: DevCluster, faults: FaultInjector) -> None:
    def ready(node: str) -> str | None:
        return _condition(devcluster.kubectl_json("get", "node", node), "Ready")

    faults.node_not_ready("spark-b1")
    wait_until(lambda: ready("spark-b1") == "False", timeout=30, what="spark-b1 NotReady")
    node = devcluster.kubectl_json("get", "node", "spark-b1")
    cond = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert cond["reason"] == "KubeletNotReady"
    assert ready("spark-b0") == "True"  # the fault is scoped to one node
    faults.node_ready("spark-b1")
    wait_until(lambda: ready("spark-b1") == "True", timeout=30, what="spark-b1 Ready again")


def test_node_deleted_and_restored(devcluster: DevCluster, faults: FaultInjector) -> None:
    faults.delete_node("spark-b0")
    wait_until(
        lambda: devcluster.kubectl("get", "node", "spark-b0", check=False).returncode != 0,
        timeout=30,
        what="spark-b0 gone",
    )
    faults.restore_nodes()
    wait_until(lambda: devcluster.nodes_ready() == 6, timeout=60, what="six nodes Ready")
