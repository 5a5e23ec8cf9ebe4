"""The SIMULATOR as a real process: uvicorn on loopback, exit codes, SIGTERM, logs."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest

from sparkllm_dev.testing import source_pythonpath

KEY = "process-key"
DEADLINE_SECONDS = 30.0


def free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def sglang_command(model: Path, *extra: str, rank: int = 0) -> list[str]:
    return [
        "python3", "-m", "sglang.launch_server", "--model-path", str(model),
        "--served-model-name", "dsv4", "--nnodes", "3", "--node-rank", str(rank),
        "--dist-init-addr", "127.0.0.1:5000", "--pp-size", "3", "--tp-size", "1",
        "--context-length", "12288", "--max-running-requests", "8", "--host", "0.0.0.0",
        "--port", "30000", "--enable-metrics", "--api-key", KEY, *extra,
    ]  # fmt: skip


def launch(
    sim: Sequence[str], command: Sequence[str], *, partition: str = "14,14,15"
) -> subprocess.Popen[str]:
    source_root = source_pythonpath()
    env = {**os.environ, "PYTHONPATH": source_root, "SGLANG_PP_LAYER_PARTITION": partition}
    return subprocess.Popen(
        [sys.executable, "-m", "sparkllm_dev.sim", *sim, "--", *command],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_healthy(url: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stdout.read() if process.stdout else ""
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    pytest.fail(f"{url}/health did not turn 200 within {DEADLINE_SECONDS} s")


def finish(process: subprocess.Popen[str]) -> tuple[int, str]:
    try:
        output, _ = process.communicate(timeout=DEADLINE_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        pytest.fail(f"simulator did not exit in time:\n{output}")
    return process.returncode, output


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 43}))
    return tmp_path


@pytest.fixture
def rank0(model_dir: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = free_port("127.0.0.1")
    process = launch(
        ["--sim-host", "127.0.0.1", "--sim-port", str(port)], sglang_command(model_dir)
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, process)
        yield url, process
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def test_rank0_serves_streams_and_stops_on_sigterm(
    rank0: tuple[str, subprocess.Popen[str]],
) -> None:
    url, process = rank0
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True}
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers) as reply:
        assert reply.status_code == 200
        assert reply.headers["x-sparkllm-simulator"] == "true"
        lines = [line for line in reply.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    assert len(lines) == 1 + 4 + 1 + 1
    info = httpx.get(f"{url}/get_server_info", headers=headers).json()
    assert (info["simulator"], info["pp_size"], info["host"]) == (True, 3, "0.0.0.0")
    process.send_signal(signal.SIGTERM)
    code, output = finish(process)
    assert code == 0
    assert "SGLang 0.5.23 SIMULATOR" in output
    assert "node_rank=0 nnodes=3 pp_size=3 tp_size=1 layers=[0, 14]" in output
    assert KEY not in output
    assert "SIMULATOR stopped" in output


def test_worker_rank_on_another_loopback_address(model_dir: Path) -> None:
    host = "127.0.0.2"
    port = free_port(host)
    process = launch(
        ["--sim-host", host, "--sim-port", str(port)], sglang_command(model_dir, rank=2)
    )
    try:
        wait_healthy(f"http://{host}:{port}", process)
        assert httpx.get(f"http://{host}:{port}/ping").status_code == 200
        assert httpx.get(f"http://{host}:{port}/v1/models").status_code == 404
    finally:
        process.send_signal(signal.SIGTERM)
        code, output = finish(process)
    assert code == 0
    assert "role=worker dummy health server" in output


@pytest.mark.parametrize(
    ("extra", "partition", "code", "message"),
    [
        (
            ["--bogus-flag"],
            "14,14,15",
            2,
            "sglang serve: error: unrecognized arguments: --bogus-flag",
        ),
        (["--cuda-graph-max-bs", "4"], "14,14,15", 2, "ambiguous option: --cuda-graph-max-bs"),
        ([], "21,22", 1, "ValueError: len(partitions)=2 does not match pp_size=3."),
        ([], "14,14,14", 1, "ValueError: sum(partitions)=42 does not match num_hidden_layers=43."),
    ],
)
def test_startup_failures_exit_like_sglang(
    model_dir: Path, extra: list[str], partition: str, code: int, message: str
) -> None:
    process = launch(["--sim-port", "1"], sglang_command(model_dir, *extra), partition=partition)
    returncode, output = finish(process)
    assert returncode == code
    assert message in output


def test_fail_after_simulates_a_crash(model_dir: Path) -> None:
    port = free_port("127.0.0.1")
    sim = ["--sim-host", "127.0.0.1", "--sim-port", str(port), "--sim-fail-after", "1"]
    process = launch(sim, sglang_command(model_dir))
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
        body = {"prompt": "x", "max_tokens": 2}
        reply = httpx.post(
            f"{url}/v1/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}
        )
        assert reply.status_code == 200
    finally:
        code, output = finish(process)
    assert code == 1
    assert "simulated engine crash after 1 requests" in output
