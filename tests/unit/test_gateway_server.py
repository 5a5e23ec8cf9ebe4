"""``main()`` and ``python -m sparkllm.gateway``: exit codes and a real serving process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from sparkllm.gateway import main
from tests.unit.gateway_fixtures import (
    MODEL,
    free_port,
    train_tokenizer,
    wait_until,
    write_keys,
    write_model_dir,
)


def test_bad_configuration_exits_2_naming_the_field(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--served-model-name", "m", "--max-input-tokens", "zero"]) == 2
    error = capsys.readouterr().err
    assert "max_input_tokens" in error
    assert "api_keys_dir: Field required" in error


def test_unloadable_tokenizer_exits_1(tmp_path: Path) -> None:
    keys = write_keys(tmp_path / "keys", {"alice": "k"})
    flags = ["--served-model-name", "m", "--api-keys-dir", str(keys)]
    assert main([*flags, "--tokenizer-dir", str(tmp_path / "absent")]) == 1


def test_python_m_serves_and_shuts_down_gracefully_on_sigterm(tmp_path: Path) -> None:
    model_dir = write_model_dir(tmp_path / "model", train_tokenizer())
    keys_dir = write_keys(tmp_path / "keys", {"alice": "key-alice"})
    port, metrics_port = free_port(), free_port()
    environ = {
        **os.environ,
        "SPARKLLM_GATEWAY_SERVED_MODEL_NAME": MODEL,
        "SPARKLLM_GATEWAY_API_KEYS_DIR": str(keys_dir),
        "SPARKLLM_GATEWAY_TOKENIZER_DIR": str(model_dir),
        "SPARKLLM_GATEWAY_UPSTREAM_URL": f"http://127.0.0.1:{free_port()}",
    }
    command = [sys.executable, "-m", "sparkllm.gateway", "--listen-host", "127.0.0.1",
               "--listen-port", str(port), "--metrics-port", str(metrics_port)]  # fmt: skip
    process = subprocess.Popen(command, env=environ, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(url + "/health").status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(healthy, timeout=60, what="the gateway process to serve /health")
        refused = httpx.post(url + "/v1/chat/completions", json={"model": MODEL})
        assert refused.status_code == 401
        assert httpx.get(url + "/ready").status_code == 503  # no router behind it
        # The metrics (series per user) on their own port only, never the users' (issue 25).
        assert httpx.get(url + "/metrics").status_code == 404
        metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics").text
        refused_line = (
            'sparkllm_gateway_requests_total{outcome="unauthorized",'
            'route="/v1/chat/completions"} 1.0'
        )
        assert refused_line in metrics
        process.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal: the usual exit status.
        assert process.wait(timeout=30) == -signal.SIGTERM
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        stderr = process.stderr.read() if process.stderr else ""
        if process.stderr:
            process.stderr.close()
    assert "gateway listening" in stderr
    assert "request refused" in stderr
    assert "Application shutdown complete" in stderr
