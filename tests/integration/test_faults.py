"""The fault matrix: a replica always restarts as a whole and ends Ready, nothing orphaned.

Faults are injected with the dev cluster's helpers (kwok stages driven by labels, pod
and node deletion); the operator and the engine harness run as real processes.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkllm_dev.devcluster import DevCluster, FaultInjector, kubelet, wait_until
from sparkllm_dev.testing import OperatorProcess, quick_resync
from tests.integration.test_model_verified import LAYERS, MODEL_PATH, SHARDS, write_model
from tests.integration.test_reconcile import NAME, apply, condition, icl, pods, sample, user_keys

pytestmark = pytest.mark.cluster
GROUP_A = ["spark-a0", "spark-a1", "spark-a2"]
GROUP_B = ["spark-b0", "spark-b1", "spark-b2"]
TP2_SAMPLE = Path(__file__).resolve().parents[2] / "manifests/samples/deepseek-v4-flash-tp2.yaml"


def replica_status(obj: dict[str, Any], index: int = 0) -> dict[str, Any]:
    for replica in (obj.get("status") or {}).get("replicaStatuses") or []:
        if replica["index"] == index:
            return dict(replica)
    return {}


def ready_at(  # type: ignore[no-untyped-def]
    cluster: DevCluster, namespace: str, generation: int, replicas: int = 1, ranks: int = 3
):
    """Predicate: Ready, every replica at ``generation`` with exactly its ranks' pods."""

    def check() -> dict[str, Any] | None:
        obj = icl(cluster, namespace)
        cond = condition(obj, "Ready")
        if not cond or cond["status"] != "True":
            return None
        statuses = obj["status"].get("replicaStatuses") or []
        if len(statuses) != replicas or any(r["generation"] != generation for r in statuses):
            return None
        current = pods(cluster, namespace)
        if len(current) != ranks * replicas:
            return None
        gens = {p["metadata"]["labels"]["sparkllm.io/restart-generation"] for p in current}
        return obj if gens == {str(generation)} else None

    return check


def start(cluster: DevCluster, namespace: str, doc: dict[str, Any] | None = None) -> None:
    user_keys(cluster, namespace)
    apply(cluster, namespace, doc or sample(GROUP_A))
    wait_until(ready_at(cluster, namespace, 1), timeout=90, what="Ready at generation 1")


def rank_pod(cluster: DevCluster, namespace: str, rank: int, replica: int = 0) -> str:
    return f"{NAME}-r{replica}-rank{rank}-0"


def gang_restart_events(cluster: DevCluster, namespace: str) -> list[str]:
    return event_messages(cluster, namespace, "GangRestart")


def event_messages(cluster: DevCluster, namespace: str, reason: str) -> list[str]:
    events = cluster.kubectl_json(
        "get", "events", "-n", namespace, "--field-selector", f"reason={reason}"
    )["items"]
    return [str(e["message"]) for e in events]


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_rank_container_exit_restarts_the_whole_replica(
    devcluster: DevCluster,
    namespace: str,
    shared_operator: OperatorProcess,
    faults: FaultInjector,
    rank: int,
) -> None:
    start(devcluster, namespace)
    before = {p["metadata"]["uid"] for p in pods(devcluster, namespace)}
    faults.fail_container(
        namespace=namespace,
        pod=rank_pod(devcluster, namespace, rank),
        exit_code=137,
        reason="OOMKilled",
    )
    obj = wait_until(ready_at(devcluster, namespace, 2), timeout=90, what="Ready at generation 2")
    after = {p["metadata"]["uid"] for p in pods(devcluster, namespace)}
    assert not before & after, "all ranks were replaced, not only the failed one"
    replica = replica_status(obj)
    assert replica["restarts"] == 1
    assert replica["lastRestart"]["reason"] == f"rank {rank} container exited (code 137, OOMKilled)"
    assert any(
        f"rank {rank} container exited" in m for m in gang_restart_events(devcluster, namespace)
    )


def test_cookbook_tp2_sample_runs_three_replicas_and_a_rank_fault_restarts_only_its_own(
    devcluster: DevCluster,
    namespace: str,
    shared_operator: OperatorProcess,
    faults: FaultInjector,
    tmp_path: Path,
) -> None:
    """SGLang's DGX Spark recipe (TP=2 across two Sparks) on the six Sparks: three replicas
    of two ranks each, SGLang's multi-node arguments per rank, rank 0's server_info agreeing
    (ConfigApplied); node rank 1 of replica 1 exits and only replica 1 restarts."""
    doc = yaml.safe_load(TP2_SAMPLE.read_text())
    doc["metadata"]["name"] = NAME  # this module's helpers name the object
    groups = doc["spec"]["placement"]["nodeGroups"]
    # A tiny real model on each of the six simulated nodes, so ModelVerified has files to
    # compare (the harness keeps the nodes' files under tmp_path / "hosts").
    model = write_model(tmp_path / "model")
    doc["spec"]["model"].update(path=MODEL_PATH, numLayers=LAYERS, expectedShards=SHARDS)
    for node in (node for group in groups for node in group):
        shutil.copytree(model, tmp_path / "hosts" / node / MODEL_PATH.lstrip("/"))
    user_keys(devcluster, namespace)
    apply(devcluster, namespace, doc)
    ready = ready_at(devcluster, namespace, 1, replicas=3, ranks=2)

    def ready_and_verified() -> dict[str, Any] | None:
        obj = ready()
        verified = condition(obj or {}, "ModelVerified")
        return obj if verified is not None and verified["status"] != "Unknown" else None

    obj = wait_until(ready_and_verified, timeout=120, what="three TP=2 replicas Ready")
    assert [replica_status(obj, i)["nodes"] for i in range(3)] == groups
    applied = condition(obj, "ConfigApplied")
    assert applied is not None
    assert applied["status"] == "True", applied
    before = {p["metadata"]["name"]: p for p in pods(devcluster, namespace)}
    for replica, group in enumerate(groups):
        for node_rank, node in enumerate(group):
            pod = before[rank_pod(devcluster, namespace, node_rank, replica)]
            assert pod["spec"]["nodeName"] == node
            args = pod["spec"]["containers"][0]["args"]
            names = ("--tp-size", "--pp-size", "--nnodes", "--node-rank", "--dist-init-addr")
            flags = [args[args.index(flag) + 1] for flag in names]
            rank0_ip = before[rank_pod(devcluster, namespace, 0, replica)]["status"]["hostIP"]
            assert flags == ["2", "1", "2", str(node_rank), f"{rank0_ip}:5000"]
    print("TP=2 replicas:", {i: replica_status(obj, i)["nodes"] for i in range(3)})
    print("ConfigApplied:", applied["reason"], "-", applied["message"])
    verified = condition(obj, "ModelVerified")
    assert verified is not None
    assert (verified["status"], verified["reason"]) == ("True", "ModelFilesVerified"), verified
    assert verified["message"].startswith("6 ranks agree"), verified
    print("ModelVerified:", verified["message"])
    faults.fail_container(
        namespace=namespace, pod=rank_pod(devcluster, namespace, 1, 1), exit_code=1, reason="Error"
    )

    def only_replica_1_restarted() -> dict[str, Any] | None:
        current = icl(devcluster, namespace)
        generations = [replica_status(current, i).get("generation") for i in range(3)]
        cond = condition(current, "Ready")
        if generations != [1, 2, 1] or not cond or cond["status"] != "True":
            return None
        now = pods(devcluster, namespace)
        return current if len(now) == 6 and all(p["status"].get("podIP") for p in now) else None

    obj = wait_until(only_replica_1_restarted, timeout=120, what="replica 1 at generation 2")
    after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods(devcluster, namespace)}
    for name, pod in before.items():
        same = after[name] == pod["metadata"]["uid"]
        assert same == ("-r1-" not in name), f"{name}: replaced={not same}"
    assert [replica_status(obj, i)["restarts"] for i in range(3)] == [0, 1, 0]
    reason = replica_status(obj, 1)["lastRestart"]["reason"]
    assert reason == "rank 1 container exited (code 1, Error)", reason
    print("after the fault:", [(i, replica_status(obj, i)["generation"]) for i in range(3)])


def test_rank_pod_deleted_restarts_the_whole_replica(
    devcluster: DevCluster, namespace: str, shared_operator: OperatorProcess, faults: FaultInjector
) -> None:
    start(devcluster, namespace)
    faults.delete_pod(namespace=namespace, pod=rank_pod(devcluster, namespace, 1))
    obj = wait_until(ready_at(devcluster, namespace, 2), timeout=90, what="Ready at generation 2")
    reason = replica_status(obj)["lastRestart"]["reason"]
    assert reason.startswith("rank 1 pod"), reason


def test_node_not_ready_degrades_then_restarts_when_back(
    devcluster: DevCluster, namespace: str, shared_operator: OperatorProcess, faults: FaultInjector
) -> None:
    start(devcluster, namespace)
    faults.node_not_ready("spark-a1")

    def degraded_and_stopped() -> dict[str, Any] | None:
        obj = icl(devcluster, namespace)
        sts = devcluster.kubectl_json("get", "sts", "-n", namespace)["items"]
        stopped = sts and all(s["spec"]["replicas"] == 0 for s in sts)
        return obj if obj["status"]["phase"] == "Degraded" and stopped else None

    obj = wait_until(degraded_and_stopped, timeout=60, what="Degraded, ranks stopped")
    assert "spark-a1 NotReady" in condition(obj, "Degraded")["message"]  # type: ignore[index]
    faults.node_ready("spark-a1")
    obj = wait_until(ready_at(devcluster, namespace, 2), timeout=90, what="Ready after node back")
    assert condition(obj, "Degraded")["status"] == "False"  # type: ignore[index]


def test_node_deleted_degrades_then_recovers(
    devcluster: DevCluster, namespace: str, shared_operator: OperatorProcess, faults: FaultInjector
) -> None:
    start(devcluster, namespace)
    faults.delete_node("spark-a2")
    obj = wait_until(
        lambda: (o := icl(devcluster, namespace))["status"]["phase"] == "Degraded" and o,
        timeout=60,
        what="Degraded",
    )
    assert "spark-a2 missing" in condition(obj, "Degraded")["message"]  # type: ignore[index]
    faults.restore_nodes()
    wait_until(ready_at(devcluster, namespace, 2), timeout=90, what="Ready after node restored")


@quick_resync  # the resuming annotation read within 5 s
def test_restart_budget_exhausted_then_resumed_by_annotation(
    devcluster: DevCluster, namespace: str, shared_operator: OperatorProcess, faults: FaultInjector
) -> None:
    doc = sample(GROUP_A)
    doc["spec"]["restartPolicy"] = {"maxRestartsPerHour": 2, "backoffSeconds": [1]}
    start(devcluster, namespace, doc)
    for generation in (2, 3):
        faults.fail_container(namespace=namespace, pod=rank_pod(devcluster, namespace, 2))
        wait_until(
            ready_at(devcluster, namespace, generation),
            timeout=90,
            what=f"Ready at generation {generation}",
        )
    faults.fail_container(namespace=namespace, pod=rank_pod(devcluster, namespace, 2))

    def exhausted() -> dict[str, Any] | None:
        obj = icl(devcluster, namespace)
        replica = replica_status(obj)
        return (
            obj if replica.get("budgetExhausted") and obj["status"]["phase"] == "Degraded" else None
        )

    obj = wait_until(exhausted, timeout=60, what="restart budget exhausted")
    assert "budget exhausted" in condition(obj, "Degraded")["message"]  # type: ignore[index]
    budget_events = devcluster.kubectl_json(
        "get", "events", "-n", namespace, "--field-selector", "reason=RestartBudgetExhausted"
    )["items"]
    assert budget_events
    devcluster.kubectl("annotate", "icl", NAME, "-n", namespace, "sparkllm.io/restart=now")
    obj = wait_until(ready_at(devcluster, namespace, 4), timeout=90, what="Ready after resume")
    assert "sparkllm.io/restart" not in (obj["metadata"].get("annotations") or {})


def test_operator_killed_mid_restart_converges(
    devcluster: DevCluster, namespace: str, operator: OperatorProcess, faults: FaultInjector
) -> None:
    doc = sample(GROUP_A)
    doc["spec"]["restartPolicy"] = {"backoffSeconds": [10]}
    start(devcluster, namespace, doc)
    # Two failures: the second restart waits 10 s of backoff with the ranks stopped.
    faults.fail_container(namespace=namespace, pod=rank_pod(devcluster, namespace, 0))
    wait_until(ready_at(devcluster, namespace, 2), timeout=90, what="Ready at generation 2")
    faults.fail_container(namespace=namespace, pod=rank_pod(devcluster, namespace, 0))
    wait_until(
        lambda: all(
            s["spec"]["replicas"] == 0
            for s in devcluster.kubectl_json("get", "sts", "-n", namespace)["items"]
        ),
        timeout=60,
        what="ranks stopped (restart in progress)",
    )
    operator.stop(kill=True)
    operator.start()
    obj = wait_until(ready_at(devcluster, namespace, 3), timeout=120, what="Ready at generation 3")
    assert replica_status(obj)["restarts"] == 2


def test_scale_by_whole_replicas_with_insufficient_groups(
    devcluster: DevCluster, namespace: str, shared_operator: OperatorProcess
) -> None:
    label = f"test.sparkllm.io/{namespace[-5:]}"
    devcluster.kubectl("label", "nodes", *GROUP_A, f"{label}=a")
    try:
        doc = sample()
        doc["spec"]["placement"] = {"nodeGroupLabel": label}
        start(devcluster, namespace, doc)
        devcluster.kubectl("scale", "icl", NAME, "-n", namespace, "--replicas=2")

        def insufficient() -> dict[str, Any] | None:
            obj = icl(devcluster, namespace)
            cond = condition(obj, "Progressing")
            ok = cond and cond["reason"] == "InsufficientNodeGroups" and cond["status"] == "False"
            return obj if ok and obj["status"]["observedGeneration"] == 2 else None

        wait_until(insufficient, timeout=60, what="InsufficientNodeGroups")
        names = [
            s["metadata"]["name"]
            for s in devcluster.kubectl_json("get", "sts", "-n", namespace)["items"]
        ]
        assert not any("-r1-" in n for n in names), "nothing of replica 1 was made"
        devcluster.kubectl("label", "nodes", *GROUP_B, f"{label}=b")
        obj = wait_until(
            ready_at(devcluster, namespace, 1, replicas=2), timeout=90, what="two replicas Ready"
        )
        assert replica_status(obj, 1)["nodes"] == GROUP_B
        devcluster.kubectl("scale", "icl", NAME, "-n", namespace, "--replicas=1")
        # Replica 1 leaves the router's pool (serving=false) before it is removed.
        wait_until(
            lambda: (
                devcluster.kubectl_json("get", "pod", f"{NAME}-r1-rank0-0", "-n", namespace)[
                    "metadata"
                ]["labels"].get("sparkllm.io/serving")
                == "false"
            ),
            timeout=30,
            what="replica 1's rank 0 out of routing",
        )
        assert (
            devcluster.kubectl(
                "get", "sts", f"{NAME}-r1-rank0", "-n", namespace, check=False
            ).returncode
            == 0
        ), "still there while draining"
        wait_until(ready_at(devcluster, namespace, 1, replicas=1), timeout=90, what="back to one")
        drained = devcluster.kubectl_json(
            "get", "events", "-n", namespace, "--field-selector", "reason=ScalingDown"
        )["items"]
        assert any("replica 1: out of routing" in e["message"] for e in drained)
        names = [
            s["metadata"]["name"]
            for s in devcluster.kubectl_json("get", "sts,svc", "-n", namespace)["items"]
        ]
        assert not any("-r1" in n for n in names), names
    finally:
        devcluster.kubectl("label", "nodes", *GROUP_A, *GROUP_B, f"{label}-", check=False)


def test_rolling_update_keeps_one_replica_serving(
    devcluster: DevCluster, namespace: str, shared_operator: OperatorProcess
) -> None:
    doc = sample()
    doc["spec"]["replicas"] = 2
    doc["spec"]["placement"] = {"nodeGroups": [GROUP_A, GROUP_B]}
    user_keys(devcluster, namespace)
    apply(devcluster, namespace, doc)
    wait_until(
        ready_at(devcluster, namespace, 1, replicas=2), timeout=90, what="two replicas Ready"
    )
    devcluster.kubectl(
        "patch",
        "icl",
        NAME,
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec":{"engine":{"maxRunningRequests":4}}}',
    )
    lowest = 2

    def rolled() -> dict[str, Any] | None:
        nonlocal lowest
        obj = icl(devcluster, namespace)
        serving = sum(
            1 for r in obj["status"].get("replicaStatuses") or [] if r["phase"] == "Ready"
        )
        lowest = min(lowest, serving)
        return ready_at(devcluster, namespace, 2, replicas=2)()

    wait_until(rolled, timeout=180, interval=0.05, what="both replicas rolled to generation 2")
    print(f"fewest replicas serving during the roll: {lowest}")
    assert lowest >= 1
    for pod in pods(devcluster, namespace):
        args = pod["spec"]["containers"][0]["args"]
        assert args[args.index("--max-running-requests") + 1] == "4"


def _verdict(cluster: DevCluster, namespace: str, kind: str, reason: str) -> dict[str, Any] | None:
    cond = condition(icl(cluster, namespace), kind)
    return cond if cond is not None and cond["reason"] == reason else None


def _await_verdict(
    cluster: DevCluster, namespace: str, kind: str, reason: str, *, label: str
) -> dict[str, Any]:
    """Wait for condition ``kind`` with ``reason`` (False); print it as the status says."""
    found: dict[str, Any] = wait_until(
        lambda: _verdict(cluster, namespace, kind, reason), timeout=120,
        what=f"{kind}=False {reason}",
    )  # fmt: skip
    print(f"[{label}] {kind}:", found["status"], found["reason"], "-", found["message"])
    assert found["status"] == "False"
    return found


def _digest_split(cluster: DevCluster, namespace: str) -> list[str] | None:
    """The DigestSplit messages seen: the live condition's and its Warning Events'."""
    live = _verdict(cluster, namespace, "ImagesConsistent", "DigestSplit")
    seen = event_messages(cluster, namespace, "DigestSplit")
    if live is not None:
        assert live["status"] == "False"
        seen.append(str(live["message"]))
    return seen or None


def _stopped(cluster: DevCluster, namespace: str) -> bool | None:
    sts = cluster.kubectl_json("get", "sts", "-n", namespace, "-l",
                               f"sparkllm.io/cluster={NAME}")["items"]  # fmt: skip
    return (sts and all(s["spec"]["replicas"] == 0 for s in sts)) or None


def _consistent_and_ready(cluster: DevCluster, namespace: str) -> dict[str, Any] | None:
    obj = icl(cluster, namespace)
    images, ready = condition(obj, "ImagesConsistent"), condition(obj, "Ready")
    if not images or images["status"] != "True" or not ready or ready["status"] != "True":
        return None
    return obj


@quick_resync  # the passes after the refusal come every 5 s
def test_the_images_own_sglang_refuses_before_start_and_a_digest_split_is_pinned(
    devcluster: DevCluster, namespace: str, shared_operator: OperatorProcess, faults: FaultInjector
) -> None:
    """The engine that runs is the contract (launch check, one digest per replica).

    1. Every node of group a holds an older build of the engine image (SGLang 0.5.22, which
       lacks --disable-radix-cache, another digest): each rank's launch-check init
       container refuses the flag with that image's parser before any engine starts;
       LaunchChecked=False names the flag and the version, the replica is stopped and
       stays stopped (no restart loop).
    2. The spec drops the flag; a0 and a2 get the current build back, a1 keeps the old one:
       the ranks pull two digests (ImagesConsistent=False, DigestSplit), the replica is
       restarted with every rank pinned to the majority's digest and ends Ready on one.
    """
    old = "sha256:" + "0123456789abcdef" * 4
    assert shared_operator.engines is not None
    hosts = shared_operator.engines.hosts_root  # the test's simulated node files
    for node in GROUP_A:
        faults.skew_image(
            node, version="0.5.22", digest=old, without=["--disable-radix-cache"], hosts_root=hosts
        )
    doc = sample(GROUP_A)
    doc["spec"]["engine"]["extraArgs"] = ["--disable-radix-cache"]
    user_keys(devcluster, namespace)
    apply(devcluster, namespace, doc)
    refused = _await_verdict(
        devcluster, namespace, "LaunchChecked", "LaunchRefused", label="launch"
    )
    words = "refuses --disable-radix-cache: unrecognized arguments: --disable-radix-cache"
    assert words in refused["message"]
    assert "SGLang 0.5.22 in nvcr.io/nvidia/sglang:26.07-py3" in refused["message"]
    wait_until(lambda: _stopped(devcluster, namespace), timeout=60, what="the replica stopped")
    wait_until(lambda: not pods(devcluster, namespace) or None, timeout=60, what="no rank pods")
    ready = condition(icl(devcluster, namespace), "Ready")
    assert ready is not None
    assert ready["status"] == "False"
    # Later passes: still stopped, the same verdict (not re-made), no pod came back.
    seen = shared_operator.log().count(f"reconciled {namespace}/{NAME}")
    wait_until(
        lambda: shared_operator.log().count(f"reconciled {namespace}/{NAME}") >= seen + 2 or None,
        timeout=30, what="two more passes",
    )  # fmt: skip
    assert condition(icl(devcluster, namespace), "LaunchChecked") == refused
    assert not pods(devcluster, namespace)

    faults.restore_image("spark-a0", hosts_root=hosts)
    faults.restore_image("spark-a2", hosts_root=hosts)
    faults.skew_image("spark-a1", version="0.5.22", digest=old, hosts_root=hosts)
    doc["spec"]["engine"]["extraArgs"] = []
    apply(devcluster, namespace, doc)
    # The split lasts only until the pinned restart replaces the ranks (a pass or two): the
    # condition, or else the Warning Event it raised when it turned False (which stays).
    split = wait_until(
        lambda: _digest_split(devcluster, namespace), timeout=120,
        what="ImagesConsistent=False DigestSplit (the condition or its Warning Event)",
    )  # fmt: skip
    print("[digest] before: ImagesConsistent False DigestSplit -", " | ".join(split))
    image = doc["spec"]["engine"]["image"]
    pinned = f"{image}@{kubelet.image_id(image).rsplit('@', 1)[1]}"
    assert any(
        f"restarting every rank on {pinned}" in m and f"rank 1 on spark-a1 {old[:19]}" in m
        for m in split
    ), split
    obj = wait_until(
        lambda: _consistent_and_ready(devcluster, namespace), timeout=150,
        what="Ready on one digest",
    )  # fmt: skip
    images = condition(obj, "ImagesConsistent")
    assert images is not None
    print("[digest] after:", images["status"], images["reason"], "-", images["message"])
    print("[digest] after: status.engines =", obj["status"]["engines"])
    [engines] = obj["status"]["engines"]
    assert engines["pinnedImage"] == pinned
    assert {r["imageID"] for r in engines["ranks"]} == {pinned}
    assert {r["sglangVersion"] for r in engines["ranks"]} == {"0.5.23"}
    assert {p["spec"]["containers"][0]["image"] for p in pods(devcluster, namespace)} == {pinned}
