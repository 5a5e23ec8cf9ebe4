"""The operator against the real control plane: objects, placement, status, updates, GC."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkllm.api import validate_inference_cluster
from sparkllm.sglang_contract.command import ENGINE_LAUNCHER_CODE, engine_args
from sparkllm_dev.devcluster import DevCluster, wait_until
from sparkllm_dev.testing import OperatorProcess

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "manifests" / "samples" / "deepseek-v4-flash.yaml"
NAME = "deepseek-v4-flash"
OPERATOR_AGENTS = ("sparkllm-operator", "kopf/")


def sample(nodes: list[str] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    if nodes is not None:
        doc["spec"]["placement"] = {"nodeGroups": [nodes]}
    return doc


def apply(cluster: DevCluster, namespace: str, doc: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(doc))


def user_keys(cluster: DevCluster, namespace: str) -> None:
    cluster.kubectl(
        "create", "secret", "generic", "llm-user-keys", "-n", namespace, "--from-literal=alice=k1"
    )


def icl(cluster: DevCluster, namespace: str) -> dict[str, Any]:
    obj: dict[str, Any] = cluster.kubectl_json("get", "icl", NAME, "-n", namespace)
    return obj


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == kind:
            return dict(cond)
    return None


def ready(cluster: DevCluster, namespace: str) -> dict[str, Any] | None:
    obj = icl(cluster, namespace)
    cond = condition(obj, "Ready")
    if (
        cond
        and cond["status"] == "True"
        and obj["status"].get("observedGeneration") == obj["metadata"]["generation"]
    ):
        return obj
    return None


def pods(cluster: DevCluster, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.kubectl_json(
        "get",
        "pods",
        "-n",
        namespace,
        "-l",
        f"sparkllm.io/cluster={NAME},app.kubernetes.io/component=engine",
    )["items"]
    return items


def test_sample_becomes_ready_on_its_nodes_and_is_garbage_collected(
    devcluster: DevCluster, namespace: str, shared_operator: OperatorProcess
) -> None:
    user_keys(devcluster, namespace)
    nodes = ["spark-a0", "spark-a1", "spark-a2"]
    apply(devcluster, namespace, sample(nodes))
    obj = wait_until(
        lambda: ready(devcluster, namespace), timeout=90, what="InferenceCluster Ready"
    )

    assert obj["status"]["phase"] == "Ready"
    assert obj["status"]["readyReplicas"] == 1
    assert obj["status"]["selector"] == f"sparkllm.io/cluster={NAME}"
    replica = obj["status"]["replicaStatuses"][0]
    assert replica["nodes"] == nodes
    assert replica["readyRanks"] == 3
    assert replica["endpoint"] == f"http://{devcluster.node_ip(nodes[0])}:30000"

    statefulsets = devcluster.kubectl_json("get", "sts", "-n", namespace)["items"]
    assert sorted(s["metadata"]["name"] for s in statefulsets) == [
        f"{NAME}-r0-rank0",
        f"{NAME}-r0-rank1",
        f"{NAME}-r0-rank2",
    ]
    ic = validate_inference_cluster(
        {**sample(nodes), "metadata": {"name": NAME, "namespace": namespace}}
    )
    by_rank = {
        int(p["metadata"]["labels"]["sparkllm.io/rank"]): p for p in pods(devcluster, namespace)
    }
    assert sorted(by_rank) == [0, 1, 2]
    for rank, pod in by_rank.items():
        spec = pod["spec"]
        assert spec["nodeName"] == nodes[rank]  # placed by the scheduler via required affinity
        assert (
            "nodeName"
            not in next(s for s in statefulsets if s["metadata"]["name"].endswith(f"rank{rank}"))[
                "spec"
            ]["template"]["spec"]
        )
        assert spec["hostNetwork"] is True
        assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
        container = spec["containers"][0]
        # every rank runs SGLang through the launcher that keeps the key out of its log
        assert container["command"] == ["python3", "-c", ENGINE_LAUNCHER_CODE]
        assert container["args"] == engine_args(
            ic.spec, rank=rank, rank0_ip=devcluster.node_ip(nodes[0])
        )
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["SGLANG_PP_LAYER_PARTITION"] == "14,14,15"
        assert env["NCCL_SOCKET_IFNAME"] == "enP7s7"
        assert env["NCCL_IB_HCA"] == "rocep1s0f0,rocep1s0f1,roceP2p1s0f0,roceP2p1s0f1"
        assert env["NCCL_IB_GID_INDEX"] == "3"
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert "IPC_LOCK" in container["securityContext"]["capabilities"]["add"]
        assert ("readinessProbe" in container) == (rank == 0)
        assert pod["status"]["hostIP"] == devcluster.node_ip(nodes[rank])
    # The engine key is a secretKeyRef, never a literal in the pod spec.
    key_env = next(
        e
        for e in by_rank[0]["spec"]["containers"][0]["env"]
        if e["name"] == "SPARKLLM_ENGINE_API_KEY"
    )
    assert key_env["valueFrom"]["secretKeyRef"] == {"name": f"{NAME}-engine-key", "key": "token"}
    svc = devcluster.kubectl_json("get", "svc", f"{NAME}-r0", "-n", namespace)
    assert svc["spec"]["selector"] == {
        "sparkllm.io/cluster": NAME,
        "sparkllm.io/replica": "0",
        "sparkllm.io/rank": "0",
    }

    devcluster.kubectl("delete", "icl", NAME, "-n", namespace)

    def all_gone() -> bool:
        leftovers = devcluster.kubectl_json(
            "get",
            "sts,svc,secret,pods,deploy,sa,role,rolebinding",
            "-n",
            namespace,
            "-l",
            f"sparkllm.io/cluster={NAME}",
        )["items"]
        return not leftovers

    wait_until(all_gone, timeout=60, what="owned objects garbage-collected")


def test_spec_change_restarts_the_single_replica_with_new_args(
    devcluster: DevCluster, namespace: str, shared_operator: OperatorProcess
) -> None:
    user_keys(devcluster, namespace)
    apply(devcluster, namespace, sample(["spark-a0", "spark-a1", "spark-a2"]))
    wait_until(lambda: ready(devcluster, namespace), timeout=90, what="Ready")
    first_uids = {p["metadata"]["uid"] for p in pods(devcluster, namespace)}

    devcluster.kubectl(
        "patch",
        "icl",
        NAME,
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec":{"engine":{"memFractionStatic":0.5}}}',
    )

    def rolled() -> dict[str, Any] | None:
        obj = ready(devcluster, namespace)
        if obj is None or obj["status"]["replicaStatuses"][0]["generation"] != 2:
            return None
        current = pods(devcluster, namespace)
        if len(current) != 3 or any(
            p["metadata"]["labels"]["sparkllm.io/restart-generation"] != "2" for p in current
        ):
            return None
        return obj

    obj = wait_until(rolled, timeout=90, what="replica restarted as generation 2")
    current = pods(devcluster, namespace)
    assert not first_uids & {p["metadata"]["uid"] for p in current}, "every rank restarted"
    for pod in current:
        args = pod["spec"]["containers"][0]["args"]
        assert args[args.index("--mem-fraction-static") + 1] == "0.5"
    assert obj["status"]["replicaStatuses"][0]["restarts"] == 1
    assert "spec changed" in obj["status"]["replicaStatuses"][0]["lastRestart"]["reason"]


IDLE_PASSES = 12  # full reconcile passes watched with no write (the resync makes them)


@pytest.mark.operator_args("--resync-seconds", "1")
def test_idle_operator_makes_no_writes(
    devcluster: DevCluster, namespace: str, operator: OperatorProcess
) -> None:
    """A Ready object's passes read and write nothing: IDLE_PASSES of them, counted in the
    operator's log (a pass each second by the resync), not a fixed stretch of time."""
    user_keys(devcluster, namespace)
    apply(devcluster, namespace, sample(["spark-a0", "spark-a1", "spark-a2"]))
    wait_until(lambda: ready(devcluster, namespace), timeout=90, what="Ready")

    def passes() -> int:
        return operator.log().count(f"reconciled {namespace}/{NAME} ")

    def after(count: int) -> Callable[[], int | None]:
        def done() -> int | None:
            now = passes()
            return now if now >= count else None

        return done

    # Let the last status write and the events of start-up land (two passes after Ready),
    # then watch the idle passes.
    wait_until(after(passes() + 2), timeout=60, what="two passes after Ready")
    start = datetime.now(UTC)
    passes_before = passes()
    seen = wait_until(after(passes_before + IDLE_PASSES), timeout=120, what="the idle passes")
    took = (datetime.now(UTC) - start).total_seconds()
    writes = [
        e
        for e in devcluster.audit_writes(namespace=namespace)
        if e["userAgent"].startswith(OPERATOR_AGENTS)
        and datetime.fromisoformat(e["requestReceivedTimestamp"].replace("Z", "+00:00")) >= start
    ]
    print(f"idle: {seen - passes_before} reconcile passes in {took:.0f} s, {len(writes)} writes")
    assert writes == [], [(e["verb"], e["requestURI"]) for e in writes]


def test_missing_node_is_a_condition_not_a_crash(
    devcluster: DevCluster, namespace: str, shared_operator: OperatorProcess
) -> None:
    user_keys(devcluster, namespace)
    doc = copy.deepcopy(sample(["spark-a0", "spark-zz", "spark-a2"]))
    apply(devcluster, namespace, doc)

    def degraded() -> dict[str, Any] | None:
        obj = icl(devcluster, namespace)
        cond = condition(obj, "Degraded")
        return obj if cond and cond["status"] == "True" else None

    obj = wait_until(degraded, timeout=60, what="Degraded condition")
    assert "spark-zz missing" in condition(obj, "Degraded")["message"]  # type: ignore[index]
    assert obj["status"]["phase"] == "Degraded"
    assert condition(obj, "Ready")["status"] == "False"  # type: ignore[index]
    assert "Traceback" not in shared_operator.log()
    assert devcluster.kubectl_json("get", "sts", "-n", namespace)["items"] == [] or all(
        s["spec"]["replicas"] == 0
        for s in devcluster.kubectl_json("get", "sts", "-n", namespace)["items"]
    )
