"""``sparkllm bench`` end to end against the SGLang SIMULATOR on loopback (no cluster).

A tiny matrix: the numbers must be positive and consistent with each other and with the
simulator's own counts; latency values themselves are not judged. The needle check runs
and reports honestly that the simulator's deterministic answers do not contain the
needle, so the run as a whole is NOT PASSED (exit 1).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparkllm.bench import bench_main
from sparkllm_dev.testing import source_pythonpath

KEY = "bench-engine-key"
DEADLINE_SECONDS = 30.0
PERCENTILES = ("mean", "p50", "p95", "p99")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A simulated rank 0 on 127.0.0.1 with an API key; yields its base URL."""
    model = tmp_path_factory.mktemp("model")
    (model / "config.json").write_text(json.dumps({"num_hidden_layers": 43}))
    port = _free_port()
    command = [
        "python3", "-m", "sglang.launch_server", "--model-path", str(model),
        "--served-model-name", "dsv4", "--nnodes", "3", "--node-rank", "0",
        "--pp-size", "3", "--tp-size", "1", "--context-length", "12288",
        "--max-running-requests", "8", "--host", "0.0.0.0", "--port", "30000",
        "--api-key", KEY,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": source_pythonpath()}
    process = subprocess.Popen(
        [sys.executable, "-m", "sparkllm_dev.sim", "--sim-host", "127.0.0.1", "--sim-port",
         str(port), "--", *command],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + DEADLINE_SECONDS
        while True:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, "simulator did not become healthy"
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.communicate(timeout=DEADLINE_SECONDS)


def _check_load_scenario(scenario: dict[str, Any]) -> None:
    requests = scenario["requests"]
    assert (scenario["completed"], scenario["errors"]) == (requests, 0), scenario["error_samples"]
    ttft, tpot, e2e = scenario["ttft_ms"], scenario["tpot_ms"], scenario["e2e_ms"]
    assert ttft["count"] == tpot["count"] == e2e["count"] == requests
    for key in PERCENTILES:
        assert 0 < ttft[key] < e2e[key]  # every request: TTFT < E2E, so every order statistic
        assert tpot[key] > 0
    output = scenario["basis"]["output_tokens"]
    assert scenario["output_tokens"] == requests * output  # ignore_eos: exact lengths
    # TPOT = (E2E - TTFT) / (out - 1) per request, so the means agree exactly.
    assert tpot["mean"] * (output - 1) == pytest.approx(e2e["mean"] - ttft["mean"], abs=0.2)
    assert scenario["output_tokens_per_s"] > 0
    assert 0 < scenario["achieved_concurrency"] <= scenario["basis"]["concurrency"] + 0.01
    # Without tokenizer.json the simulator counts words, as our approximate prompts do.
    counted = scenario["basis"]["prompt_tokens_counted"]
    assert counted == [scenario["basis"]["input_tokens"]] * 2
    assert scenario["server_prompt_tokens"] == requests * counted[0]


def test_tiny_matrix_against_the_simulator(
    engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARKLLM_TEST_ENGINE_KEY", KEY)
    output, markdown, summary = (tmp_path / n for n in ("r.json", "r.md", "summary.json"))
    code = bench_main(
        [
            "--base-url", engine, "--model", "dsv4", "--api-key-env", "SPARKLLM_TEST_ENGINE_KEY",
            "--scenarios", "short-c1,short-c4,cold-4k,niah", "--requests", "4",
            "--output", str(output), "--markdown", str(markdown),
            "--status-summary", str(summary),
        ]
    )  # fmt: skip
    assert code == 1  # the needle check cannot pass on the simulator
    report = json.loads(output.read_text())
    assert report["passed"] is False
    assert report["token_counting"].startswith("approximate")
    scenarios = {s["name"]: s for s in report["scenarios"]}
    assert list(scenarios) == ["short-c1", "short-c4", "cold-4k", "niah"]
    for name in ("short-c1", "short-c4", "cold-4k"):
        _check_load_scenario(scenarios[name])
    assert scenarios["short-c4"]["basis"]["concurrency"] == 4
    needle = scenarios["niah"]["needle"]
    assert (needle["passed"], needle["total"]) == (0, 4)
    assert {case["found_in"] for case in needle["cases"]} == {"nowhere"}
    assert [case["depth"] for case in needle["cases"]] == pytest.approx([0, 1 / 3, 2 / 3, 1])
    assert scenarios["niah"]["errors"] == 0  # it ran: every request answered
    text = markdown.read_text()
    assert "| short-c4 | 256 -> 128 | 4 | 4/4 | 0 |" in text
    assert "needle found 0/4" in text
    status = json.loads(summary.read_text())
    assert len(summary.read_bytes()) < 4096
    assert status["passed"] is False
    assert [s["name"] for s in status["scenarios"]] == list(scenarios)
    assert KEY not in output.read_text() + text + summary.read_text()


def test_a_wrong_key_stops_at_the_warm_up(
    engine: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SPARKLLM_TEST_ENGINE_KEY", "wrong")
    argv = ["--base-url", engine, "--model", "dsv4", "--api-key-env", "SPARKLLM_TEST_ENGINE_KEY"]
    assert bench_main([*argv, "--scenarios", "short-c1"]) == 2
    err = capsys.readouterr().err
    assert "warm-up request" in err
    assert "HTTP 401: Unauthorized" in err


def test_an_unset_key_variable_is_a_usage_error(
    engine: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SPARKLLM_UNSET_KEY", raising=False)
    argv = ["--base-url", engine, "--model", "dsv4", "--api-key-env", "SPARKLLM_UNSET_KEY"]
    assert bench_main(argv) == 2
    assert "SPARKLLM_UNSET_KEY" in capsys.readouterr().err
