"""``sparkllm stage-model`` from a Hugging Face endpoint, through ``huggingface_hub``'s own code.

The endpoint is the local HTTPS server (tests/unit/staging_fixtures.py) answering the
Hub API the library calls for a pinned commit: the tree listing
(``/api/models/<repo>/tree/<commit>``) and ``/<repo>/resolve/<commit>/<file>`` (HEAD for
metadata, GET with Range). So the library's snapshot_download, its cache layout
(``blobs/`` by hash, ``snapshots/<commit>/``) and its resume of an ``.incomplete`` blob
run for real.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from sparkllm.api.model_staging import ModelSourceSpec
from sparkllm.staging.errors import StageError
from sparkllm.staging.plan import StageReason
from sparkllm.staging.progress import Progress
from sparkllm.staging.stage import StageRequest, stage_model, staging_path
from tests.unit.staging_fixtures import Hub, https_server, sha256, toy_model
from tests.unit.test_gateway_tls import OPENSSL

pytestmark = pytest.mark.skipif(OPENSSL is None, reason="openssl CLI not installed")
REPO = "toy-org/toy-model"
COMMIT = "a" * 40
SHARD = "model-00002-of-00003.safetensors"


def source(url: str) -> ModelSourceSpec:
    return ModelSourceSpec.model_validate(
        {"huggingFace": {"repo": REPO, "revision": COMMIT, "endpoint": url}}
    )


def stage(target: Path, spec: ModelSourceSpec, ca: Path) -> Progress:
    progress = Progress(out=io.StringIO(), interval=0.0)
    request = StageRequest(target=target, source=spec, ca_file=ca, expected_shards=3)
    stage_model(request, progress)
    return progress


def test_the_hub_client_downloads_into_its_cache_and_the_copy_is_linked(tmp_path: Path) -> None:
    files = toy_model(tmp_path / "origin")
    target = tmp_path / "node" / "model"
    with https_server(files, certs=tmp_path / "certs", hub=Hub(REPO, COMMIT)) as (server, ca):
        progress = stage(target, source(server.url), ca)
    assert {p: (target / p).read_bytes() for p in files} == files
    cache = staging_path(target).parent / "hub-cache" / "models--toy-org--toy-model"
    assert (cache / "snapshots" / COMMIT / SHARD).is_symlink()
    assert (cache / "blobs" / sha256(files[SHARD])).is_file()
    # hard-linked from the library's blob, not copied
    assert (target / SHARD).stat().st_ino == (cache / "blobs" / sha256(files[SHARD])).stat().st_ino
    assert progress.records[-1]["event"] == "done"
    total = sum(map(len, files.values()))
    assert progress.records[-1]["bytesDone"] == total
    # bytes counted while the library downloads (its own progress hook), before Verifying
    during = [r for r in progress.records if r["event"] == "progress"]
    assert during
    assert {r["stage"] for r in during} == {"Downloading"}
    assert all(r["bytesTotal"] == total for r in during)
    assert max(r["bytesDone"] for r in during) == total


def test_a_dropped_connection_is_retried_by_the_library(tmp_path: Path) -> None:
    files = toy_model(tmp_path / "origin")
    target = tmp_path / "node" / "model"
    with https_server(files, certs=tmp_path / "certs", hub=Hub(REPO, COMMIT)) as (server, ca):
        server.faults.drop_after[SHARD] = 2048
        stage(target, source(server.url), ca)
        gets = [p for p in server.faults.gets if p == SHARD]
    assert gets == [SHARD, SHARD]
    assert (target / SHARD).read_bytes() == files[SHARD]
    blobs = staging_path(target).parent / "hub-cache" / "models--toy-org--toy-model" / "blobs"
    assert not list(blobs.glob("*.incomplete"))


def test_a_missing_file_is_not_found(tmp_path: Path) -> None:
    files = toy_model(tmp_path / "origin")
    with https_server(files, certs=tmp_path / "certs", hub=Hub(REPO, COMMIT)) as (server, ca):
        server.faults.status[SHARD] = 404
        with pytest.raises(StageError) as caught:
            stage(tmp_path / "node" / "model", source(server.url), ca)
    assert caught.value.reason is StageReason.NOT_FOUND


def test_a_refused_token_is_unauthorized(tmp_path: Path) -> None:
    files = toy_model(tmp_path / "origin")
    with https_server(files, certs=tmp_path / "certs", hub=Hub(REPO, COMMIT)) as (server, ca):
        server.faults.status["tree"] = 401
        with pytest.raises(StageError) as caught:
            stage(tmp_path / "node" / "model", source(server.url), ca)
        assert server.faults.gets == []
    assert caught.value.reason is StageReason.UNAUTHORIZED
