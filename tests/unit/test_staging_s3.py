"""``sparkllm stage-model`` from a real S3-compatible server: versitygw, built from the Go
module proxy by hack/build-binaries.sh (``make binaries``), on 127.0.0.1 over a posix
directory (a bucket is a directory), with one account (ACCESS_KEY, SECRET_KEY).

The toy model is uploaded with the MinIO client, then staged with the same client's
listing and ranged gets. Faults go through a small TCP proxy in front of the server,
armed on one object's GET: the response cut after N body bytes (the stage resumes with
``Range: bytes=N-``) or its body bytes flipped (the single-part ETag, an MD5, catches it:
HashMismatch, fetched again). versitygw checks every request's SigV4 signature, so a
wrong secret, an unknown key and no credentials are each shown as ``Unauthorized``; a
missing bucket as ``NotFound``; a multipart object (its ETag no MD5) by its size.
"""

from __future__ import annotations

import io
import json
import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from minio import Minio

from sparkllm.api.model_staging import ModelSourceSpec
from sparkllm.cli import main
from sparkllm.staging.errors import StageError
from sparkllm.staging.plan import StageReason
from sparkllm.staging.progress import Progress
from sparkllm.staging.stage import StageRequest, stage_model
from sparkllm_dev.s3_server import start_versitygw
from tests.unit.staging_fixtures import toy_model
from tests.unit.test_chart_render import require_binary

pytestmark = pytest.mark.needs_binary  # versitygw (make binaries)
ACCESS_KEY, SECRET_KEY = "k", "s"  # the server's one account
CREDENTIALS = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
BUCKET = "models"
PREFIX = "toy/v1/"
SHARD = "model-00002-of-00003.safetensors"


@pytest.fixture
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """versitygw on a free port of 127.0.0.1, bucket BUCKET empty; yields the port."""
    binary = require_binary("versitygw", how="run `make binaries` (hack/build-binaries.sh)")
    root = tmp_path_factory.mktemp("s3")
    with (root / "server.log").open("wb") as log:
        process, port = start_versitygw(
            binary, data=root / "data", buckets=(BUCKET,), access_key=ACCESS_KEY,
            secret_key=SECRET_KEY, log=log,
        )  # fmt: skip
    try:
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)


class FaultProxy:
    """TCP proxy to the S3 server; corrupts or cuts the response to one object's first GET.

    ``path``: the request path to arm on instead of the object's (another HTTP server);
    ``before``: called once that request arrives, before it is forwarded (mode ``pass``
    forwards the response as it is)."""

    def __init__(
        self,
        upstream: int,
        *,
        key: str = "",
        mode: str,
        after: int = 0,
        path: str | None = None,
        before: Callable[[], None] | None = None,
    ) -> None:
        self.upstream, self.mode, self.after, self.before = upstream, mode, after, before
        self.needle = f"GET {path or f'/{BUCKET}/{key}'}".encode()
        self.armed = True
        self.requests: list[bytes] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            state = {"fault": False}
            threading.Thread(target=self._up, args=(client, server, state), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, state), daemon=True).start()

    def _up(self, client: socket.socket, server: socket.socket, state: dict[str, bool]) -> None:
        while data := _recv(client):
            self.requests.append(data)
            if self.armed and self.needle in data:
                self.armed, state["fault"] = False, True
                if self.before is not None:
                    self.before()
            server.sendall(data)
        server.close()

    def _down(self, server: socket.socket, client: socket.socket, state: dict[str, bool]) -> None:
        body_seen, in_body = 0, False
        while data := _recv(server):
            if state["fault"]:
                if not in_body and b"\r\n\r\n" in data:
                    head, _, data_body = data.partition(b"\r\n\r\n")
                    client.sendall(head + b"\r\n\r\n")
                    data, in_body = data_body, True
                if in_body and self.mode == "cut":
                    keep = max(self.after - body_seen, 0)
                    client.sendall(data[:keep])
                    body_seen += len(data)
                    if body_seen >= self.after:
                        client.shutdown(socket.SHUT_RDWR)
                        client.close()
                        server.close()
                        return
                    continue
                if in_body and self.mode == "flip" and data:  # not a head alone
                    data = bytes(b ^ 0xFF for b in data[:8]) + data[8:]
                    state["fault"] = False
            client.sendall(data)
        client.close()

    def close(self) -> None:
        self.listener.close()


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def upload(port: int, files: dict[str, bytes], *, part_size: int = 0) -> None:
    """Each file an object under PREFIX (``part_size``: multipart, in parts of that size)."""
    client = Minio(f"127.0.0.1:{port}", access_key=ACCESS_KEY, secret_key=SECRET_KEY, secure=False)
    for path, data in files.items():
        client.put_object(BUCKET, PREFIX + path, io.BytesIO(data), len(data), part_size=part_size)


def source(port: int, *, bucket: str = BUCKET) -> ModelSourceSpec:
    return ModelSourceSpec.model_validate(
        {"s3": {"endpoint": f"http://127.0.0.1:{port}", "bucket": bucket, "prefix": PREFIX}}
    )


def stage(
    tmp_path: Path,
    spec: ModelSourceSpec,
    *,
    env: dict[str, str] = CREDENTIALS,
    expected_shards: int | None = 3,
) -> tuple[Progress, Path]:
    progress = Progress(out=io.StringIO(), interval=0.0)
    target = tmp_path / "node" / "model"
    request = StageRequest(target=target, source=spec, expected_shards=expected_shards, environ=env)
    stage_model(request, progress)
    return progress, target


def test_a_prefix_is_staged_and_verified(tmp_path: Path, s3_server: int) -> None:
    files = toy_model(tmp_path / "origin")
    upload(s3_server, files)
    progress, target = stage(tmp_path, source(s3_server))
    assert {p: (target / p).read_bytes() for p in files} == files
    assert progress.records[-1]["event"] == "done"
    assert progress.records[-1]["bytesDone"] == progress.records[-1]["bytesTotal"]


def test_a_cut_connection_resumes_with_a_ranged_get(tmp_path: Path, s3_server: int) -> None:
    files = toy_model(tmp_path / "origin")
    upload(s3_server, files)
    proxy = FaultProxy(s3_server, key=PREFIX + SHARD, mode="cut", after=4096)
    try:
        progress, target = stage(tmp_path, source(proxy.port))
    finally:
        proxy.close()
    retries = [r for r in progress.records if r["event"] == "retry"]
    assert [r["reason"] for r in retries] == ["ConnectionLost"]
    assert "resuming at byte 4096" in retries[0]["message"]
    assert any(b"bytes=4096-" in r.lower() for r in proxy.requests)
    assert (target / SHARD).read_bytes() == files[SHARD]


def test_bytes_flipped_in_transit_fail_the_etag_and_are_fetched_again(
    tmp_path: Path, s3_server: int
) -> None:
    files = toy_model(tmp_path / "origin")
    upload(s3_server, files)
    proxy = FaultProxy(s3_server, key=PREFIX + SHARD, mode="flip")
    try:
        progress, target = stage(tmp_path, source(proxy.port))
    finally:
        proxy.close()
    retries = [r for r in progress.records if r["event"] == "retry"]
    assert [(r["reason"], r["file"]) for r in retries] == [("HashMismatch", SHARD)]
    assert "differs from the ETag" in retries[0]["message"]
    assert (target / SHARD).read_bytes() == files[SHARD]


def test_a_missing_bucket_is_not_found(tmp_path: Path, s3_server: int) -> None:
    with pytest.raises(StageError) as caught:
        stage(tmp_path, source(s3_server, bucket="absent"))
    assert caught.value.reason is StageReason.NOT_FOUND
    assert "NoSuchBucket" in str(caught.value)


def test_a_wrong_secret_is_unauthorized_and_the_right_one_stages(
    tmp_path: Path,
    s3_server: int,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    upload(s3_server, toy_model(tmp_path / "origin"))
    target = tmp_path / "node" / "model"
    progress_file = tmp_path / "progress.json"
    spec = source(s3_server).model_dump_json(by_alias=True, exclude_none=True)
    argv = ["stage-model", "--target", str(target), "--source", spec,
            "--progress-file", str(progress_file), "--expected-shards", "3"]  # fmt: skip
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-" + SECRET_KEY)

    code = main(argv)

    err = capsys.readouterr().err.strip().splitlines()
    assert (code, err) == (
        1,
        [f"stage-model: failed: Unauthorized: s3 bucket {BUCKET} prefix '{PREFIX}': "
         "SignatureDoesNotMatch"],
    )  # fmt: skip
    last = json.loads(progress_file.read_text())
    assert (last["event"], last["stage"], last["reason"]) == ("failed", "Failed", "Unauthorized")
    assert last["message"].endswith("SignatureDoesNotMatch")
    assert not target.exists()

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    assert main(argv) == 0
    assert json.loads(progress_file.read_text())["event"] == "done"
    assert (target / SHARD).is_file()


@pytest.mark.parametrize(
    ("env", "code"),
    [
        (
            {"AWS_ACCESS_KEY_ID": "nobody", "AWS_SECRET_ACCESS_KEY": SECRET_KEY},
            "XAdminUserNotFound",
        ),
        ({}, "AccessDenied"),  # no credentials: unsigned requests
    ],
)
def test_an_unknown_key_or_none_is_unauthorized(
    tmp_path: Path, s3_server: int, env: dict[str, str], code: str
) -> None:
    upload(s3_server, toy_model(tmp_path / "origin"))
    with pytest.raises(StageError) as caught:
        stage(tmp_path, source(s3_server), env=env)
    assert caught.value.reason is StageReason.UNAUTHORIZED
    assert str(caught.value) == f"Unauthorized: s3 bucket {BUCKET} prefix '{PREFIX}': {code}"


def test_a_multipart_object_is_checked_by_its_size(tmp_path: Path, s3_server: int) -> None:
    part = 5 * 1024 * 1024  # S3's smallest part
    files = {"weights.bin": os.urandom(part + 4096)}
    upload(s3_server, files, part_size=part)
    client = Minio(
        f"127.0.0.1:{s3_server}", access_key=ACCESS_KEY, secret_key=SECRET_KEY, secure=False
    )
    etag = client.stat_object(BUCKET, PREFIX + "weights.bin").etag
    assert etag is not None
    assert etag.strip('"').endswith("-2")  # two parts: the ETag is no MD5
    proxy = FaultProxy(s3_server, key=PREFIX + "weights.bin", mode="cut", after=part)
    try:
        progress, target = stage(tmp_path, source(proxy.port), expected_shards=None)
    finally:
        proxy.close()
    assert (target / "weights.bin").read_bytes() == files["weights.bin"]
    retries = [r for r in progress.records if r["event"] == "retry"]
    assert [r["message"] for r in retries] == [
        f"s3://{BUCKET}/{PREFIX}weights.bin: ProtocolError; resuming at byte {part}"
    ]
