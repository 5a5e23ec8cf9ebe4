"""Model staging end to end (issue 31): the operator stages a toy model from a real
S3-compatible server (gofakes3) onto a three-node group, before any rank starts.

The staging Jobs' pods run for real (``BenchJobs``, the Jobs' pods harness: one
``sparkllm stage-model`` process per pod, on the simulated node's loopback address, its
host directory under this test's hosts root), so spark-a0 downloads from gofakes3 and
spark-a1 and spark-a2 copy node to node over 127.0.0.x, as ``plan_group`` orders them.
Seen from outside, as a user would: the progress in status and the Start column, the
ModelStaged condition, the Events, the rank StatefulSets held at 0 until the group is
staged, the files on every node; and a missing bucket reported as NotFound.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkllm_dev.devcluster import DevCluster, wait_until
from sparkllm_dev.devcluster.bench_jobs import BenchJobs
from sparkllm_dev.testing import SharedOperatorView, quick_resync
from tests.integration.test_reconcile import apply, condition, icl, sample, user_keys
from tests.unit.staging_fixtures import toy_model
from tests.unit.test_staging_s3 import BUCKET, PREFIX, SHARD, FaultProxy, s3_server, upload

pytestmark = [pytest.mark.cluster, pytest.mark.needs_binary]  # gofakes3 (make binaries)
__all__ = ["s3_server"]  # the fixture, imported for this module's tests
GROUP = ["spark-a0", "spark-a1", "spark-a2"]
MODEL_PATH = "/models/toy"
DEADLINE = 60  # seconds


def staged_cluster(port: int, *, bucket: str = BUCKET) -> dict[str, Any]:
    """The sample on group a, its model the toy one (4 layers, 3 shards) from gofakes3."""
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
    """gofakes3's port, and the staging pods' processes (``BenchJobs``) on the same hosts
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
        local = tmp_path / "hosts" / node / MODEL_PATH.lstrip("/")
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
def test_a_missing_bucket_is_not_found_in_status_and_nothing_starts(
    devcluster: DevCluster,
    namespace: str,
    shared_operator: SharedOperatorView,
    staging: Staging,
) -> None:
    secrets(devcluster, namespace)
    apply(devcluster, namespace, staged_cluster(staging.port, bucket="no-such-bucket"))

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
    """One shard's bytes flipped once between gofakes3 and spark-a0: its ETag catches it,
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
    for node in GROUP:
        local = tmp_path / "hosts" / node / MODEL_PATH.lstrip("/")
        assert (local / SHARD).read_bytes() == files[SHARD]
