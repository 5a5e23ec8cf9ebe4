"""``sparkllm stage-model`` against a real HTTPS server on 127.0.0.1, with faults.

The server (tests/unit/staging_fixtures.py) is Python's http.server over TLS with a
self-signed certificate; the toy model is a valid 3-shard safetensors directory, so the
final check is verify-model's own. Faults: a connection dropped mid-file (resumed with a
Range request), a shard corrupted once (HashMismatch, fetched again, staged) and always
(failed, nothing at the target), a full disk (the free-space function injected: no tmpfs
without root), 404/401. Then the fan-out: the staged copy served by ``--serve``'s server
and copied by a second "node" over the same code path, bytes counted on the link.
"""

from __future__ import annotations

import io
import json
import shutil
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from sparkllm.api.model_staging import ModelSourceSpec
from sparkllm.cli import main
from sparkllm.staging.errors import StageError
from sparkllm.staging.plan import StageReason
from sparkllm.staging.progress import Progress
from sparkllm.staging.serve import MANIFEST_FILE, PeerServer
from sparkllm.staging.stage import StageRequest, stage_model, staging_path
from tests.unit.staging_fixtures import FileServer, https_server, sha256, toy_model
from tests.unit.test_gateway_tls import OPENSSL

pytestmark = pytest.mark.skipif(OPENSSL is None, reason="openssl CLI not installed")
SHARD = "model-00002-of-00003.safetensors"


def https_source(server: FileServer, files: dict[str, bytes]) -> ModelSourceSpec:
    urls = [{"url": f"{server.url}/{p}", "sha256": sha256(d)} for p, d in sorted(files.items())]
    return ModelSourceSpec.model_validate({"https": {"urls": urls}})


def stage(
    target: Path, ca: Path, *, source: ModelSourceSpec | None = None, **kw: Any
) -> tuple[Progress, dict[str, Any]]:
    progress = Progress(out=io.StringIO(), interval=0.0)
    request = StageRequest(
        target=target, source=source, ca_file=ca, expected_shards=3, expected_layers=4, **kw
    )
    return progress, stage_model(request, progress)


def test_a_dropped_connection_resumes_with_a_range_request(tmp_path: Path) -> None:
    files = toy_model(tmp_path / "origin")
    with https_server(files, certs=tmp_path / "certs") as (server, ca):
        server.faults.drop_after[SHARD] = 1000
        target = tmp_path / "node" / "model"
        progress, fetched = stage(target, ca, source=https_source(server, files))
    assert server.faults.ranges == [(SHARD, "bytes=1000-")]
    assert [r["reason"] for r in progress.records if r["event"] == "retry"] == ["ConnectionLost"]
    assert fetched[SHARD].sha256 == sha256(files[SHARD])
    assert (target / SHARD).read_bytes() == files[SHARD]
    assert not staging_path(target).exists()
    total = sum(map(len, files.values()))
    assert progress.records[-1]["event"] == "done"
    assert progress.records[-1]["bytesDone"] == total
    # the total is known before the download (HEAD requests): progress has an ETA
    during = [r for r in progress.records if r["event"] == "progress"]
    assert {r["bytesTotal"] for r in during} == {total}
    assert all(r["etaSeconds"] is not None for r in during)


def test_a_shard_corrupted_once_is_fetched_again(tmp_path: Path) -> None:
    files = toy_model(tmp_path / "origin")
    with https_server(files, certs=tmp_path / "certs") as (server, ca):
        server.faults.corrupt[SHARD] = 1
        target = tmp_path / "node" / "model"
        progress, _ = stage(target, ca, source=https_source(server, files))
    retries = [r for r in progress.records if r["event"] == "retry"]
    assert [(r["reason"], r["file"]) for r in retries] == [("HashMismatch", SHARD)]
    assert (target / SHARD).read_bytes() == files[SHARD]


def test_a_shard_corrupted_every_time_fails_and_nothing_reaches_the_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = toy_model(tmp_path / "origin")
    with https_server(files, certs=tmp_path / "certs") as (server, ca):
        server.faults.corrupt[SHARD] = 2
        target = tmp_path / "node" / "model"
        source = https_source(server, files).model_dump_json(by_alias=True, exclude_none=True)
        progress_file = tmp_path / "progress.json"
        code = main(
            ["stage-model", "--target", str(target), "--source", source, "--ca-file", str(ca),
             "--progress-file", str(progress_file), "--expected-shards", "3"]
        )  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert len(err) == 1
    assert err[0].startswith(f"stage-model: failed: HashMismatch: {SHARD}: sha256 ")
    assert err[0].endswith("(after a re-fetch)")
    last = json.loads(progress_file.read_text())
    assert (last["event"], last["reason"], last["stage"]) == ("failed", "HashMismatch", "Failed")
    assert not target.exists()


def test_a_full_disk_is_reported_before_any_download(tmp_path: Path) -> None:
    files = toy_model(tmp_path / "origin")
    total = sum(map(len, files.values()))
    with https_server(files, certs=tmp_path / "certs") as (server, ca):
        target = tmp_path / "node" / "model"
        with pytest.raises(StageError) as caught:
            stage(target, ca, source=https_source(server, files), free_bytes=lambda _: total - 1)
        assert server.faults.ranges == []
    assert caught.value.reason is StageReason.DISK_FULL
    assert f"{total} more bytes needed" in str(caught.value)
    assert f"{total - 1} free" in str(caught.value)


@pytest.mark.parametrize(("status", "reason"), [(404, "NotFound"), (401, "Unauthorized")])
def test_http_errors_carry_their_reason(tmp_path: Path, status: int, reason: str) -> None:
    files = toy_model(tmp_path / "origin")
    with https_server(files, certs=tmp_path / "certs") as (server, ca):
        server.faults.status[SHARD] = status
        with pytest.raises(StageError) as caught:
            stage(tmp_path / "node" / "model", ca, source=https_source(server, files))
    assert str(caught.value.reason) == reason
    assert f"HTTP {status}" in str(caught.value)


def test_a_finished_copy_fans_out_to_a_peer_over_the_same_code_path(tmp_path: Path) -> None:
    files = toy_model(tmp_path / "origin")
    first = tmp_path / "node-a" / "model"
    with https_server(files, certs=tmp_path / "certs") as (server, ca):
        stage(first, ca, source=https_source(server, files))
    manifest = json.loads((first / MANIFEST_FILE).read_text())
    assert {f["path"]: f["sha256"] for f in manifest["files"]} == {
        p: sha256(d) for p, d in files.items()
    }
    peer = PeerServer(first, ("127.0.0.1", 0))
    thread = threading.Thread(target=peer.serve_forever, daemon=True)
    thread.start()
    try:
        second = tmp_path / "node-b" / "model"
        # a partial file left by an earlier, killed copy is resumed, not fetched again
        partial = staging_path(second) / SHARD
        partial.parent.mkdir(parents=True)
        partial.write_bytes(files[SHARD][:500])
        progress, fetched = stage(second, ca, peer=f"http://127.0.0.1:{peer.server_port}")
    finally:
        peer.shutdown()
        peer.server_close()
        thread.join()
    assert {p: (second / p).read_bytes() for p in files} == files
    assert sum(peer.bytes_sent.values()) == sum(map(len, files.values())) - 500
    assert {r["stage"] for r in progress.records} >= {"Copying", "Verifying", "Ready"}
    assert set(fetched) == set(files)


def test_a_rerun_on_a_staged_target_does_nothing(tmp_path: Path) -> None:
    files = toy_model(tmp_path / "origin")
    target = tmp_path / "node" / "model"
    with https_server(files, certs=tmp_path / "certs") as (server, ca):
        stage(target, ca, source=https_source(server, files))
        server.faults.ranges.clear()
        progress, fetched = stage(target, ca, source=https_source(server, files))
    assert fetched == {}
    assert progress.records[-1]["event"] == "done"
    shutil.rmtree(target)


def test_a_staged_copy_of_another_source_is_refused_not_taken(tmp_path: Path) -> None:
    """A new source at the same path (a new revision, other URLs) must not be answered
    with the old files: the stage names the mismatch and fetches nothing."""
    files = toy_model(tmp_path / "origin")
    target = tmp_path / "node" / "model"
    with https_server(files, certs=tmp_path / "certs") as (server, ca):
        stage(target, ca, source=https_source(server, files))
        before = {p.name: p.stat().st_mtime_ns for p in target.iterdir()}
        urls = [{"url": f"{server.url}/{p}"} for p in sorted(files)]  # another spec
        other = ModelSourceSpec.model_validate({"https": {"urls": urls}})
        with pytest.raises(StageError) as refused:
            stage(target, ca, source=other)
    assert refused.value.reason is StageReason.INVALID_SOURCE
    assert "holds a copy of another source" in str(refused.value)
    assert "give the new source a new model.path" in str(refused.value)
    assert {p.name: p.stat().st_mtime_ns for p in target.iterdir()} == before


def test_a_stray_file_of_an_earlier_run_is_not_moved_into_place(tmp_path: Path) -> None:
    files = toy_model(tmp_path / "origin")
    target = tmp_path / "node" / "model"
    staging_path(target).mkdir(parents=True)
    (staging_path(target) / "old-shard.safetensors").write_bytes(b"from another revision")
    target.mkdir()  # an empty directory made in advance is replaced
    with https_server(files, certs=tmp_path / "certs") as (server, ca):
        stage(target, ca, source=https_source(server, files))
    assert sorted(p.name for p in target.iterdir()) == sorted([*files, MANIFEST_FILE])


def test_a_source_that_never_sends_the_body_is_connection_lost(tmp_path: Path) -> None:
    files = toy_model(tmp_path / "origin")
    with https_server(files, certs=tmp_path / "certs") as (server, ca):
        server.faults.drop_always.add(SHARD)
        with pytest.raises(StageError) as caught:
            stage(tmp_path / "node" / "model", ca, source=https_source(server, files))
        attempts = server.faults.gets.count(SHARD)
    assert caught.value.reason is StageReason.CONNECTION_LOST
    assert "5 attempts without progress at byte 0" in str(caught.value)
    assert attempts == 5


def test_a_peer_that_serves_nothing_is_peer_unavailable(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    progress = Progress(out=io.StringIO(), interval=0.0)
    request = StageRequest(target=tmp_path / "model", peer=f"http://127.0.0.1:{port}")
    with pytest.raises(StageError) as caught:
        stage_model(request, progress)
    assert caught.value.reason is StageReason.PEER_UNAVAILABLE
    assert not (tmp_path / "model").exists()
