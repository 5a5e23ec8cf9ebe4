"""Model staging end to end (issue 31): the operator stages a toy model from a real
S3-compatible server (versitygw) onto a three-node group, before any rank starts.

The staging Jobs' pods run for real (``BenchJobs``, the Jobs' pods harness: one
``sparkllm stage-model`` process per pod, on the simulated node's loopback address, its
host directory under this test's hosts root), so spark-a0 downloads from versitygw and
spark-a1 and spark-a2 copy node to node over 127.0.0.x, as ``plan_group`` orders them.
Seen from outside, as a user would: the progress in status and the Start column, the
ModelStaged condition, the Events, the rank StatefulSets held at 0 until the group is
staged, the files on every node; a missing credentials Secret named (the pod cannot
start), then a missing bucket reported as NotFound.
"""

from __future__ import annotations

import functools
import io
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from minio import Minio

from sparkllm.render.model_layout import copy_dir
from sparkllm_dev.devcluster import DevCluster, wait_until
from sparkllm_dev.devcluster.bench_jobs import BenchJobs
from sparkllm_dev.devcluster.gateway_pods import GatewayPods
from sparkllm_dev.testing import SharedOperatorView, quick_resync
from tests.integration.test_reconcile import apply, condition, icl, ready, sample, user_keys
from tests.unit.gateway_fixtures import train_tokenizer, write_model_dir
from tests.unit.staging_fixtures import toy_model
from tests.unit.test_staging_s3 import (
    ACCESS_KEY,
    BUCKET,
    PREFIX,
    SECRET_KEY,
    SHARD,
    FaultProxy,
    s3_server,
    upload,
)

pytestmark = [pytest.mark.cluster, pytest.mark.needs_binary]  # versitygw (make binaries)
__all__ = ["s3_server"]  # the fixture, imported for this module's tests
GROUP = ["spark-a0", "spark-a1", "spark-a2"]
MODEL_PATH = "/models/toy"
DEADLINE = 60  # seconds


def on_node(tmp_path: Path, node: str, path: str) -> Path:
    """Where the simulated node keeps ``path`` (the harness's hosts root)."""
    return tmp_path / "hosts" / node / path.lstrip("/")


def staged_cluster(port: int, *, bucket: str = BUCKET) -> dict[str, Any]:
    """The sample on group a, its model the toy one (4 layers, 3 shards) from versitygw."""
    doc = sample(GROUP)
    model = doc["spec"]["model"]
    model.update(path=MODEL_PATH, numLayers=4, expectedShards=3)
    del model["weightsGB"]
    model["source"] = {
        "s3": {
            "endpoint": f"http://127.0.0.1:{port}", "bucket": bucket, "prefix": PREFIX,
            "credentialsSecretRef": {"name": "s3-creds"},
        }
    }  # fmt: skip
    doc["spec"]["engine"]["layerPartition"] = [1, 1, 2]
    return doc


@dataclass(frozen=True)
class Staging:
    """versitygw's port, and the staging pods' processes (``BenchJobs``) on the same hosts
    root as the engine harness's."""

    port: int
    jobs: BenchJobs


@pytest.fixture
def staging(
    devcluster: DevCluster, namespace: str, tmp_path: Path, s3_server: int
) -> Iterator[Staging]:
    logs = tmp_path / "stage"
    jobs = BenchJobs(
        devcluster, resolve_service=lambda *_: None, namespace=namespace,
        hosts_root=tmp_path / "hosts", log_dir=logs, serve_logs=True,
    )  # fmt: skip
    with jobs:
        try:
            yield Staging(port=s3_server, jobs=jobs)
        finally:
            for log in sorted(logs.glob("*.log")):  # shown when the test fails
                tail = log.read_text(errors="replace")[-3000:]
                print(f"--- {log.name}\n{tail}", file=sys.stderr)


def secrets(devcluster: DevCluster, namespace: str) -> None:
    user_keys(devcluster, namespace)
    devcluster.kubectl(
        "create", "secret", "generic", "s3-creds", "-n", namespace,
        "--from-literal=accessKeyId=k", "--from-literal=secretAccessKey=s",
    )  # fmt: skip


def rank_replicas(devcluster: DevCluster, namespace: str) -> list[int]:
    items = devcluster.kubectl_json("get", "statefulsets", "-n", namespace)["items"]
    return [int(s["spec"].get("replicas", 1)) for s in items]


def events(devcluster: DevCluster, namespace: str) -> list[tuple[str, str]]:
    items = devcluster.kubectl_json("get", "events", "-n", namespace)["items"]
    return [(e["reason"], e.get("message", "")) for e in items]


@quick_resync
def test_a_group_is_staged_once_downloaded_twice_copied_before_its_ranks(
    devcluster: DevCluster,
    namespace: str,
    shared_operator: SharedOperatorView,
    staging: Staging,
    tmp_path: Path,
) -> None:
    files = toy_model(tmp_path / "origin")
    upload(staging.port, files)
    size = sum(len(data) for data in files.values())
    secrets(devcluster, namespace)
    apply(devcluster, namespace, staged_cluster(staging.port))
    columns: list[str] = []
    held: list[list[int]] = []

    def staged() -> dict[str, Any] | None:
        obj = icl(devcluster, namespace)
        status = obj.get("status") or {}
        if status.get("start") and status["start"] not in columns:
            columns.append(status["start"])
        cond = condition(obj, "ModelStaged")
        if cond is None or cond["status"] != "True":
            held.append(rank_replicas(devcluster, namespace))
            return None
        return obj

    obj = wait_until(staged, timeout=DEADLINE, interval=0.2, what="ModelStaged True")
    print(f"\nStart column seen: {columns}")
    report = obj["status"]["modelStaging"]
    print(f"status.modelStaging: {report}")
    (group,) = report["groups"]
    by_node = {n["node"]: n for n in group["nodes"]}
    # One download, then a chain of copies over the group's own links.
    assert [n["node"] for n in group["nodes"]] == GROUP
    assert by_node["spark-a0"].get("sourceNode") is None
    assert by_node["spark-a1"]["sourceNode"] == "spark-a0"
    assert by_node["spark-a2"]["sourceNode"] == "spark-a1"
    for node in GROUP:  # a whole model's bytes on each transfer
        entry = by_node[node]
        assert (entry["stage"], entry["bytesDone"], entry["bytesTotal"]) == ("Ready", size, size)
        local = on_node(tmp_path, node, copy_dir(MODEL_PATH, report["digest"]))
        assert {p: (local / p).read_bytes() for p in files} == files
    assert report["summary"] == "3/3 nodes"
    assert any(c.startswith("Staging:") for c in columns), columns
    # The ranks were held at 0 while the group staged (a sample can race the pass that
    # starts them: it applies the StatefulSets just before it writes the status, so the
    # proof is the times: no rank pod exists before the last stage pod ended).
    assert [0, 0, 0] in held, held
    wait_until(
        lambda: rank_replicas(devcluster, namespace) == [1, 1, 1] or None,
        timeout=30, what="the rank StatefulSets started after staging",
    )  # fmt: skip
    ended = max(
        c["state"]["terminated"]["finishedAt"]
        for p in devcluster.kubectl_json(
            "get", "pods", "-n", namespace, "-l", "sparkllm.io/staging-role=stage"
        )["items"]
        for c in p["status"]["containerStatuses"]
    )
    ranks = wait_until(
        lambda: devcluster.kubectl_json(
            "get", "pods", "-n", namespace, "-l", "app.kubernetes.io/component=engine"
        )["items"] or None,
        timeout=30, what="the rank pods",
    )  # fmt: skip
    assert min(p["metadata"]["creationTimestamp"] for p in ranks) >= ended

    def both_events() -> list[tuple[str, str]] | None:
        seen = events(devcluster, namespace)
        return seen if {"StagingStarted", "Staged"} <= {r for r, _ in seen} else None

    seen = wait_until(both_events, timeout=30, what="the StagingStarted and Staged Events")
    reasons = [r for r, _ in seen]
    assert reasons.count("StagingStarted") == 1
    assert reasons.count("Staged") == 1
    # Every serve Job is gone once its successor is staged; the stage Jobs stay (the record).
    jobs = devcluster.kubectl_json("get", "jobs", "-n", namespace)["items"]
    roles = sorted(j["metadata"]["labels"]["sparkllm.io/staging-role"] for j in jobs)
    assert roles == ["stage", "stage", "stage"]
    # The servers' own count, printed when the operator deleted them: one model's bytes on
    # each link of the chain, a0 -> a1 and a1 -> a2, and nothing to anyone else.
    served = wait_until(
        lambda: served_bytes(tmp_path / "stage") if len(served_bytes(tmp_path / "stage")) == 2
        else None,
        timeout=30, what="both servers' 'served' records",
    )  # fmt: skip
    address = node_addresses(devcluster)
    print(f"bytes sent by each server: {served}")
    assert served == {
        address["spark-a0"]: {address["spark-a1"]: size},
        address["spark-a1"]: {address["spark-a2"]: size},
    }
    assert shared_operator.log().count("Traceback") == 0


def served_bytes(logs: Path) -> dict[str, dict[str, int]]:
    """Each serve pod's ``served`` record (its --listen address -> bytes sent per peer)."""
    out: dict[str, dict[str, int]] = {}
    for log in logs.glob("*-serve-*.log"):
        text = log.read_text(errors="replace")
        listen = re.search(r"--listen (\S+):\d+", text)
        for line in text.splitlines():
            if listen and line.startswith("{") and '"served"' in line:
                out[listen.group(1)] = dict(json.loads(line)["bytesSent"])
    return out


def node_addresses(devcluster: DevCluster) -> dict[str, str]:
    nodes = devcluster.kubectl_json("get", "nodes")["items"]
    return {
        n["metadata"]["name"]: next(
            a["address"] for a in n["status"]["addresses"] if a["type"] == "InternalIP"
        )
        for n in nodes
    }


@quick_resync
def test_a_missing_secret_then_a_missing_bucket_each_said_and_nothing_starts(
    devcluster: DevCluster,
    namespace: str,
    shared_operator: SharedOperatorView,
    staging: Staging,
) -> None:
    # First without its credentials Secret: the download pod cannot start, and ModelStaged
    # says so (no silent Staging:0/3); once the Secret exists the stage runs.
    user_keys(devcluster, namespace)
    apply(devcluster, namespace, staged_cluster(staging.port, bucket="no-such-bucket"))

    def blocked() -> str | None:
        cond = condition(icl(devcluster, namespace), "ModelStaged")
        message = str((cond or {}).get("message", ""))
        return message if "the staging pod cannot start" in message else None

    message = wait_until(blocked, timeout=DEADLINE, interval=0.2, what="the pod blocked named")
    print(f"\nModelStaged (no Secret): {message}")
    assert "node spark-a0: the staging pod cannot start: CreateContainerConfigError:" in message
    assert "'s3-creds'" in message
    devcluster.kubectl(
        "create", "secret", "generic", "s3-creds", "-n", namespace,
        "--from-literal=accessKeyId=k", "--from-literal=secretAccessKey=s",
    )  # fmt: skip

    def failed() -> dict[str, Any] | None:
        obj = icl(devcluster, namespace)
        cond = condition(obj, "ModelStaged")
        return obj if cond is not None and cond["reason"] == "NotFound" else None

    obj = wait_until(failed, timeout=DEADLINE, interval=0.2, what="ModelStaged NotFound")
    cond = condition(obj, "ModelStaged")
    assert cond is not None
    print(f"\nModelStaged: {cond['message']}")
    assert cond["status"] == "False"
    assert "no-such-bucket" in cond["message"]
    assert obj["status"]["start"] == "StagingFailed:NotFound:spark-a0"
    assert obj["status"]["replicaStatuses"][0]["phase"] == "Degraded"
    assert set(rank_replicas(devcluster, namespace)) <= {0}
    warnings = wait_until(
        lambda: [m for r, m in events(devcluster, namespace) if r == "NotFound"] or None,
        timeout=30, what="the NotFound Event",
    )  # fmt: skip
    assert len(warnings) == 1
    assert "spark-a0" in warnings[0]


@quick_resync
def test_a_shard_corrupted_in_transit_is_fetched_again_and_the_group_still_stages(
    devcluster: DevCluster,
    namespace: str,
    shared_operator: SharedOperatorView,
    staging: Staging,
    tmp_path: Path,
) -> None:
    """One shard's bytes flipped once between versitygw and spark-a0: its ETag catches it,
    the download fetches it again (a ``retry`` record, HashMismatch), and every node ends
    with the good bytes."""
    files = toy_model(tmp_path / "origin")
    upload(staging.port, files)
    proxy = FaultProxy(staging.port, key=PREFIX + SHARD, mode="flip")
    try:
        secrets(devcluster, namespace)
        apply(devcluster, namespace, staged_cluster(proxy.port))

        def staged() -> dict[str, Any] | None:
            obj = icl(devcluster, namespace)
            cond = condition(obj, "ModelStaged")
            return obj if cond is not None and cond["status"] == "True" else None

        wait_until(staged, timeout=DEADLINE, interval=0.2, what="ModelStaged True")
    finally:
        proxy.close()
    download_log = next((tmp_path / "stage").glob("*-stage-r0-n0-*.log")).read_text()
    retries = [
        json.loads(line) for line in download_log.splitlines()
        if line.startswith("{") and '"retry"' in line
    ]  # fmt: skip
    print(f"\nretry records: {retries}")
    assert [r["reason"] for r in retries] == ["HashMismatch"]
    assert SHARD in retries[0]["file"]
    digest = icl(devcluster, namespace)["status"]["modelStaging"]["digest"]
    for node in GROUP:
        local = on_node(tmp_path, node, copy_dir(MODEL_PATH, digest))
        assert (local / SHARD).read_bytes() == files[SHARD]


REVISIONS = ("toy/v1/", "toy/v2/", "toy/v3/")  # the same toy model under three prefixes
ROLL_DEADLINE = 150  # seconds: a stage, a drained restart of the replica, the clean Jobs


def servable(files: dict[str, bytes], front: Path) -> dict[str, bytes]:
    """The toy model with a real tokenizer and chat template (the gateway fixtures'), which
    the engine simulator and the gateway load (the toy ones only have the shape
    verify-model checks), so the replica and the gateway become Ready and can roll; the
    same two files are written to ``front``, the gateway pods' model directory."""
    write_model_dir(front, train_tokenizer())
    names = ("tokenizer.json", "tokenizer_config.json")
    return {**files, **{name: (front / name).read_bytes() for name in names}}


def upload_under(port: int, prefix: str, files: dict[str, bytes]) -> None:
    client = Minio(f"127.0.0.1:{port}", access_key=ACCESS_KEY, secret_key=SECRET_KEY, secure=False)
    for path, data in files.items():
        client.put_object(BUCKET, prefix + path, io.BytesIO(data), len(data))


def copies_on(tmp_path: Path, node: str) -> set[str]:
    """The finished copies' directories (digests) beside the model path on ``node``."""
    parent = on_node(tmp_path, node, copy_dir(MODEL_PATH, "x")).parent
    return {p.name for p in parent.iterdir() if not p.name.startswith(".")}


def revision(doc: dict[str, Any], prefix: str) -> dict[str, Any]:
    doc["spec"]["model"]["source"]["s3"]["prefix"] = prefix
    return doc


def rolled_and_cleaned(
    devcluster: DevCluster, namespace: str, *, old: str | None, phases: list[str]
) -> dict[str, Any] | None:
    """Ready on a new digest's copy (not ``old``), the copies before it cleaned (bytesFreed);
    each look while the new copy stages records the replica's phase in ``phases``."""
    seen = icl(devcluster, namespace)
    if (condition(seen, "ModelStaged") or {}).get("reason") == "Staging":
        phases.append(seen["status"]["replicaStatuses"][0]["phase"])
    obj = ready(devcluster, namespace)
    report = (obj or {}).get("status", {}).get("modelStaging") or {}
    group = (report.get("groups") or [{}])[0]
    if obj is None or report.get("digest") in (None, old):
        return None
    if group.get("runningDigest") != report["digest"] or group.get("bytesFreed") is None:
        return None
    return obj


def check_rolled(
    obj: dict[str, Any], digests: list[str], *, restarts: int, phases: list[str], tmp_path: Path
) -> None:
    """After a new revision: served on the old copy while staging, one roll naming both
    copies, and on every node the copy in use and the one before it, nothing older."""
    report, replica = obj["status"]["modelStaging"], obj["status"]["replicaStatuses"][0]
    on_nodes = {node: copies_on(tmp_path, node) for node in GROUP}
    print(
        f"revision {len(digests)}: digest {digests[-1]}; phases while staging "
        f"{sorted(set(phases))} ({len(phases)} looks); restart {replica.get('lastRestart')}; "
        f"copies per node {on_nodes}; bytesFreed {report['groups'][0]['bytesFreed']}"
    )
    assert set(phases) <= {"Ready"}, phases
    assert replica.get("restarts", 0) == restarts + 1
    reason = f"model staged: {digests[-2]} -> {digests[-1]} (rolling update)"
    assert replica["lastRestart"]["reason"] == reason
    assert all(c == set(digests[-2:]) for c in on_nodes.values()), on_nodes


@quick_resync
def test_a_new_revision_is_staged_beside_rolled_once_and_the_copy_before_is_kept(
    devcluster: DevCluster,
    namespace: str,
    shared_operator: SharedOperatorView,
    staging: Staging,
    tmp_path: Path,
) -> None:
    """Revision A staged and Ready; B staged beside it while the replica serves on A, the
    replica rolled once onto B ('model staged: A -> B'), the clean Jobs keep A as the copy
    before; revision C then removes A (its bytes freed on each node)."""
    files = servable(toy_model(tmp_path / "origin"), tmp_path / "front")
    size = sum(len(data) for data in files.values())
    for prefix in REVISIONS:
        upload_under(staging.port, prefix, files)
    secrets(devcluster, namespace)
    doc = revision(staged_cluster(staging.port), REVISIONS[0])
    for parser in ("toolCallParser", "reasoningParser"):  # V4's prompt needs V4's tokenizer
        doc["spec"]["engine"].pop(parser, None)
    gateways = GatewayPods(
        devcluster, tokenizer_dir=tmp_path / "front", namespace=namespace,
        log_dir=tmp_path / "gateways",
    )  # fmt: skip
    with gateways:  # the gateway's pods run (and roll): the cleaning rule waits for them
        apply(devcluster, namespace, doc)
        look = functools.partial(rolled_and_cleaned, devcluster, namespace, old=None, phases=[])
        obj = wait_until(look, timeout=ROLL_DEADLINE, interval=0.5, what="revision A served")
        digests = [obj["status"]["modelStaging"]["digest"]]
        restarts = obj["status"]["replicaStatuses"][0].get("restarts", 0)
        print(f"\nrevision 1: digest {digests[0]}, copies {copies_on(tmp_path, GROUP[0])}")
        freed: list[int] = []
        for prefix in REVISIONS[1:]:
            apply(devcluster, namespace, revision(doc, prefix))
            phases: list[str] = []
            look = functools.partial(
                rolled_and_cleaned, devcluster, namespace, old=digests[-1], phases=phases
            )
            obj = wait_until(look, timeout=ROLL_DEADLINE, interval=0.2, what=prefix)
            digests.append(obj["status"]["modelStaging"]["digest"])
            check_rolled(obj, digests, restarts=restarts, phases=phases, tmp_path=tmp_path)
            restarts += 1
            freed.append(obj["status"]["modelStaging"]["groups"][0]["bytesFreed"])
    current = on_node(tmp_path, GROUP[2], copy_dir(MODEL_PATH, digests[-1]))
    assert {p: (current / p).read_bytes() for p in files} == files
    # B kept A as the copy before (nothing freed); C removed A on each of the three nodes.
    assert freed[0] == 0
    assert freed[1] >= 3 * size, (freed, size)
    cleaned = [m for r, m in events(devcluster, namespace) if r == "StagingCleaned"]
    print(f"model bytes {size}; bytesFreed per revision {freed}; StagingCleaned: {cleaned}")
    assert len(cleaned) == 3  # one per digest's clean of the one group
    assert shared_operator.log().count("Traceback") == 0
