"""The pure parts of model staging: the group plan, the per-node state machine, progress
records (rate and ETA from an injected clock), and a full disk met while writing."""

from __future__ import annotations

import errno
import io
import json
from pathlib import Path

import pytest

from sparkllm.errors import SpecError
from sparkllm.staging.errors import from_http_status, from_os_error
from sparkllm.staging.plan import (
    Copy,
    NodeStage,
    StageReason,
    StageState,
    advance,
    group_ready,
    plan_group,
)
from sparkllm.staging.progress import Progress, read_record

NODES = ["spark-0", "spark-1", "spark-2"]
ADDRESSES = {"spark-0": "10.0.0.10", "spark-1": "10.0.0.11", "spark-2": "10.0.0.12"}


def test_a_chain_downloads_once_and_copies_over_each_link_once() -> None:
    plan = plan_group(nodes=NODES, addresses=ADDRESSES)
    assert plan.downloader == "spark-0"
    assert plan.transfers == (
        Copy(target="spark-0", source=None, source_address=None, wave=0),
        Copy(target="spark-1", source="spark-0", source_address="10.0.0.10", wave=1),
        Copy(target="spark-2", source="spark-1", source_address="10.0.0.11", wave=2),
    )
    assert len(plan.copies()) == 2
    assert plan.waves() == 3


def test_the_staging_node_starts_the_ring_and_the_ring_wraps() -> None:
    plan = plan_group(nodes=NODES, addresses=ADDRESSES, staging_node="spark-1")
    assert [(t.target, t.source) for t in plan.transfers] == [
        ("spark-1", None),
        ("spark-2", "spark-1"),
        ("spark-0", "spark-2"),
    ]


def test_a_staging_node_outside_the_group_leaves_rank_0_downloading() -> None:
    assert plan_group(nodes=NODES, addresses=ADDRESSES, staging_node="other").downloader == (
        "spark-0"
    )


def test_a_tree_serves_two_from_each_finished_node() -> None:
    nodes = [f"n{i}" for i in range(7)]
    plan = plan_group(nodes=nodes, addresses={n: f"a-{n}" for n in nodes}, fan_out="Tree")
    sources = {t.target: t.source for t in plan.transfers}
    assert sources == {
        "n0": None, "n1": "n0", "n2": "n0", "n3": "n1", "n4": "n1", "n5": "n2", "n6": "n2",
    }  # fmt: skip
    assert plan.waves() == 3
    assert plan.transfer_of("n6").wave == 2


def test_a_serving_node_without_an_address_is_named() -> None:
    with pytest.raises(SpecError, match="no address for node\\(s\\) that serve a copy: spark-1"):
        plan_group(nodes=NODES, addresses={"spark-0": "10.0.0.10"})
    # the last node of a chain serves nobody: it needs no address
    plan_group(nodes=NODES, addresses={"spark-0": "a", "spark-1": "b"})


def test_duplicate_nodes_are_refused() -> None:
    with pytest.raises(SpecError, match="distinct nodes"):
        plan_group(nodes=["a", "a"], addresses={"a": "x"})


def test_the_state_machine_walks_to_ready_and_replays_are_no_ops() -> None:
    stage = NodeStage(node="spark-1")
    stage = advance(stage, "start", copying=True)
    assert stage.state is StageState.COPYING
    assert advance(stage, "start") == stage  # a replayed start changes nothing
    stage = advance(stage, "verify")
    assert stage.state is StageState.VERIFYING
    assert advance(stage, "verify") == stage
    stage = advance(stage, "ready")
    assert stage.state is StageState.READY
    assert advance(stage, "fail", reason=StageReason.DISK_FULL) == stage


def test_a_failure_carries_its_reason_and_a_start_retries() -> None:
    failed = advance(
        advance(NodeStage(node="n"), "start"), "fail", reason=StageReason.HASH_MISMATCH, message="x"
    )
    assert (failed.state, failed.reason, failed.message) == (
        StageState.FAILED,
        StageReason.HASH_MISMATCH,
        "x",
    )
    assert advance(failed, "start") == NodeStage(node="n", state=StageState.DOWNLOADING)
    with pytest.raises(ValueError, match="needs a reason"):
        advance(NodeStage(node="n"), "fail")


def test_a_group_is_ready_only_when_every_node_is() -> None:
    ready = NodeStage(node="a", state=StageState.READY)
    assert group_ready([ready, NodeStage(node="b", state=StageState.READY)])
    assert not group_ready([ready, NodeStage(node="b", state=StageState.VERIFYING)])
    assert not group_ready([])


def test_progress_records_rate_and_eta_from_the_clock(tmp_path: Path) -> None:
    now = [100.0]
    out = io.StringIO()
    progress = Progress(
        out=out, file=tmp_path / "p.json", interval=1.0, clock=lambda: now[0], wall=lambda: 5.0
    )
    progress.set_stage(StageState.DOWNLOADING, total=1000)
    now[0] = 102.0
    progress.add(400, file="a")  # 2 s in: 200 B/s, 600 B left: 3 s
    now[0] = 102.5
    progress.add(100, file="a")  # within the interval: counted, not reported
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["event"] for line in lines] == ["stage", "progress"]
    assert lines[1] == {
        "event": "progress",
        "stage": "Downloading",
        "file": "a",
        "bytesDone": 400,
        "bytesTotal": 1000,
        "rateBytesPerSecond": 200.0,
        "etaSeconds": 3.0,
        "time": 5.0,
    }
    assert json.loads((tmp_path / "p.json").read_text()) == lines[1]
    assert progress.bytes_done == 500
    progress.failed(StageReason.DISK_FULL, "m")
    last = json.loads((tmp_path / "p.json").read_text())
    assert (last["event"], last["stage"], last["reason"]) == ("failed", "Failed", "DiskFull")


@pytest.mark.parametrize(
    ("number", "reason"),
    [(errno.ENOSPC, StageReason.DISK_FULL), (errno.EDQUOT, StageReason.DISK_FULL)],
)
def test_a_full_disk_while_writing_is_disk_full(number: int, reason: StageReason) -> None:
    error = from_os_error(OSError(number, "No space left on device"), what="writing a")
    assert error.reason is reason
    assert str(error) == "DiskFull: writing a: no space left on the device"


@pytest.mark.parametrize(
    ("status", "reason"),
    [(401, "Unauthorized"), (403, "Unauthorized"), (404, "NotFound"), (500, "InvalidSource")],
)
def test_http_statuses_map_to_reasons(status: int, reason: str) -> None:
    assert str(from_http_status(status, what="f").reason) == reason


def test_a_record_reads_back_into_the_nodes_stage() -> None:
    out = io.StringIO()
    progress = Progress(out=out, interval=0.0, clock=lambda: 1.0, wall=lambda: 2.0)
    progress.set_stage(StageState.COPYING, total=10)
    progress.failed(StageReason.HASH_MISMATCH, "a.safetensors: sha256 x, expected y")
    first, last = (read_record(line) for line in out.getvalue().splitlines())
    assert first is not None
    assert first.node_stage("n") == NodeStage(node="n", state=StageState.COPYING)
    assert last is not None
    assert (last.bytes_total, last.eta_seconds) == (10, None)
    assert last.node_stage("n") == NodeStage(
        node="n",
        state=StageState.FAILED,
        reason=StageReason.HASH_MISMATCH,
        message="a.safetensors: sha256 x, expected y",
    )
    assert read_record("[verify-model] note: x") is None
    assert read_record('{"event": "progress", "stage": "Sleeping"}') is None
