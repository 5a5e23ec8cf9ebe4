"""A group of three "nodes" staged as the plan says, with the real command in processes.

The nodes are three loopback addresses (127.0.0.10-12, as the dev cluster's simulated
nodes are) and three target directories. ``plan_group`` says who downloads and who copies
from whom; each step is ``sparkllm stage-model`` run as its own process (``--source`` on
the downloader, ``--peer`` on the others), each finished node serving its copy with
``stage-model --serve`` on its address. Each server's closing line gives the bytes sent to
each peer: one download from the origin, then exactly one model's worth on each link.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sparkllm.api.model_staging import ModelSourceSpec
from sparkllm.staging.plan import plan_group
from tests.unit.staging_fixtures import https_server, sha256, toy_model
from tests.unit.test_gateway_tls import OPENSSL

pytestmark = pytest.mark.skipif(OPENSSL is None, reason="openssl CLI not installed")
NODES = ["spark-a0", "spark-a1", "spark-a2"]
ADDRESSES = {node: f"127.0.0.{10 + i}" for i, node in enumerate(NODES)}
SPARKLLM = [sys.executable, "-m", "sparkllm.cli"]


def serve(target: Path, address: str) -> tuple[subprocess.Popen[str], str]:
    """``stage-model --serve`` on ``address``; returns once it says it is serving."""
    process = subprocess.Popen(
        [*SPARKLLM, "stage-model", "--serve", "--target", str(target), "--listen", f"{address}:0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    first = json.loads(process.stdout.readline())  # blocks until the server is listening
    assert first["event"] == "serving"
    return process, f"http://{first['address']}"


def stop(process: subprocess.Popen[str]) -> dict[str, int]:
    process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=30)
    last = json.loads(out.strip().splitlines()[-1])
    assert last["event"] == "served"
    sent: dict[str, int] = last["bytesSent"]
    return sent


def test_one_download_and_a_copy_over_each_link_of_the_chain(tmp_path: Path) -> None:
    files = toy_model(tmp_path / "origin")
    model_bytes = sum(map(len, files.values()))
    plan = plan_group(nodes=NODES, addresses=ADDRESSES)
    targets = {node: tmp_path / node / "model" for node in NODES}
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    servers: dict[str, subprocess.Popen[str]] = {}
    urls: dict[str, str] = {}
    with https_server(files, certs=tmp_path / "certs") as (origin, ca):
        urls_spec = [{"url": f"{origin.url}/{p}", "sha256": sha256(d)} for p, d in files.items()]
        source = ModelSourceSpec.model_validate({"https": {"urls": urls_spec}})
        try:
            for transfer in plan.transfers:
                where = (
                    ["--source", source.model_dump_json(by_alias=True, exclude_none=True)]
                    if transfer.source is None
                    else [
                        "--peer",
                        urls[transfer.source],
                        "--local-address",
                        ADDRESSES[transfer.target],
                    ]
                )
                done = subprocess.run(
                    [*SPARKLLM, "stage-model", "--target", str(targets[transfer.target]),
                     "--ca-file", str(ca), "--expected-shards", "3", *where],
                    capture_output=True, text=True, env=env, timeout=120, check=False,
                )  # fmt: skip
                assert done.returncode == 0, done.stderr
                records = [json.loads(line) for line in done.stdout.splitlines()]
                assert records[-1]["event"] == "done"
                servers[transfer.target], urls[transfer.target] = serve(
                    targets[transfer.target], ADDRESSES[transfer.target]
                )
        finally:
            sent = {node: stop(process) for node, process in servers.items()}
        origin_gets = len(origin.faults.gets)
    assert origin_gets == len(files)  # one download, from the downloader only
    for node in NODES:
        assert {p: (targets[node] / p).read_bytes() for p in files} == files
    # spark-a0 -> spark-a1 -> spark-a2: one model's worth on each link, nothing else
    assert sent == {
        "spark-a0": {ADDRESSES["spark-a1"]: model_bytes},
        "spark-a1": {ADDRESSES["spark-a2"]: model_bytes},
        "spark-a2": {},
    }
