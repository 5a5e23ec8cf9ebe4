"""HTTPS served by the admission layer (``spec.exposure.type: TLS``): a real process, a
self-signed certificate made here with the ``openssl`` CLI, a request over TLS, and the
certificate renewed in place (as the kubelet swaps a mounted Secret) picked up without a
restart."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from sparkllm.errors import GatewayError
from sparkllm.gateway import main
from sparkllm.gateway.config import load_gateway_config
from sparkllm.gateway.tls import ReloadingCertificate
from sparkllm_dev.ci import in_ci
from tests.unit.gateway_fixtures import (
    MODEL,
    free_port,
    train_tokenizer,
    wait_until,
    write_keys,
    write_model_dir,
)
from tests.unit.loopback_http import JSONHandler, serving

OPENSSL = shutil.which("openssl")
pytestmark = pytest.mark.skipif(OPENSSL is None and not in_ci(), reason="openssl CLI not installed")


def make_certificate(directory: Path, *, name: str) -> tuple[Path, Path]:
    """A self-signed EC certificate for localhost / 127.0.0.1 (its own CA)."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "tls.crt", directory / "tls.key"
    subprocess.run(
        [str(OPENSSL), "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", f"/CN={name}",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def served_fingerprint(port: int) -> str:
    """SHA-256 of the certificate the server presents on a new handshake."""
    pem = ssl.get_server_certificate(("127.0.0.1", port), timeout=5)
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem)).hexdigest()


def file_fingerprint(cert: Path) -> str:
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(cert.read_text())).hexdigest()


class FakeRouter(JSONHandler):
    """The router behind the admission layer: records what reached it, answers a chat."""

    received: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        length = int(self.headers["Content-Length"])
        FakeRouter.received.append(json.loads(self.rfile.read(length)))
        reply = {"id": "c1", "object": "chat.completion", "model": MODEL, "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"},
             "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}  # fmt: skip
        self.answer(json.dumps(reply).encode())


@pytest.fixture
def tls_gateway(tmp_path: Path) -> Iterator[tuple[int, Path, subprocess.Popen[str]]]:
    """``python -m sparkllm.gateway`` over HTTPS, the certificate in a Secret-like dir."""
    stack = contextlib.ExitStack()
    secret = tmp_path / "tls"
    make_certificate(secret, name="first")
    model_dir = write_model_dir(tmp_path / "model", train_tokenizer())
    keys_dir = write_keys(tmp_path / "keys", {"alice": "key-alice"})
    port = free_port()
    router = stack.enter_context(serving(FakeRouter))
    environ = {
        **os.environ,
        "SPARKLLM_GATEWAY_SERVED_MODEL_NAME": MODEL,
        "SPARKLLM_GATEWAY_API_KEYS_DIR": str(keys_dir),
        "SPARKLLM_GATEWAY_TOKENIZER_DIR": str(model_dir),
        "SPARKLLM_GATEWAY_UPSTREAM_URL": router,
        "SPARKLLM_GATEWAY_TLS_CERT_FILE": str(secret / "tls.crt"),
        "SPARKLLM_GATEWAY_TLS_KEY_FILE": str(secret / "tls.key"),
    }
    command = [sys.executable, "-m", "sparkllm.gateway", "--listen-host", "127.0.0.1",
               "--listen-port", str(port)]  # fmt: skip
    process = subprocess.Popen(command, env=environ, stderr=subprocess.PIPE, text=True)
    try:
        yield port, secret, process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process.stderr:
            process.stderr.close()
        stack.close()


def test_a_request_over_tls_through_the_admission_layer(
    tls_gateway: tuple[int, Path, subprocess.Popen[str]],
) -> None:
    port, secret, _process = tls_gateway
    trusted = ssl.create_default_context(cafile=str(secret / "tls.crt"))
    url = f"https://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(url + "/health", verify=trusted).status_code == 200
        except httpx.TransportError:
            return False

    wait_until(healthy, timeout=60, what="the gateway to serve /health over TLS")
    # Admission runs behind TLS exactly as behind HTTP: no key is 401; a keyed chat is
    # counted, given its max_tokens and relayed to the router, whose answer comes back.
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hello there"}]}
    assert httpx.post(url + "/v1/chat/completions", json=chat, verify=trusted).status_code == 401
    FakeRouter.received.clear()
    answer = httpx.post(
        url + "/v1/chat/completions",
        json=chat,
        verify=trusted,
        headers={"Authorization": "Bearer key-alice"},
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == "hi"
    assert len(FakeRouter.received) == 1
    assert FakeRouter.received[0]["max_tokens"] > 0  # injected by admission
    # Plain HTTP on the same port is not served; an untrusted certificate is refused.
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(url + "/health")


def test_a_renewed_certificate_is_served_without_a_restart(
    tls_gateway: tuple[int, Path, subprocess.Popen[str]], tmp_path: Path
) -> None:
    port, secret, process = tls_gateway
    first = file_fingerprint(secret / "tls.crt")

    def serving() -> bool:
        try:
            return served_fingerprint(port) == first
        except OSError:
            return False

    wait_until(serving, timeout=60, what="the gateway to present the first certificate")
    renewed_cert, renewed_key = make_certificate(tmp_path / "renewed", name="renewed")
    # The kubelet swaps a mounted Secret's files in one step; replace both files in turn.
    os.replace(renewed_key, secret / "tls.key")
    os.replace(renewed_cert, secret / "tls.crt")
    second = file_fingerprint(secret / "tls.crt")
    assert second != first
    wait_until(
        lambda: served_fingerprint(port) == second,
        timeout=30,
        what="the renewed certificate to be served",
    )
    assert process.poll() is None  # the same process: no restart


def test_a_broken_renewal_keeps_the_previous_certificate(tmp_path: Path) -> None:
    cert, key = make_certificate(tmp_path / "tls", name="first")
    now = [0.0]
    certificate = ReloadingCertificate(cert_file=cert, key_file=key, clock=lambda: now[0])
    cert.write_text("not a certificate\n")
    now[0] = 10.0
    certificate._refresh()
    assert certificate.reloads == 0
    make_certificate(tmp_path / "tls", name="second")
    now[0] = 11.0  # within the interval: not looked at yet
    certificate._refresh()
    assert certificate.reloads == 0
    now[0] = 20.0
    certificate._refresh()
    assert certificate.reloads == 1


def test_a_missing_certificate_exits_1(tmp_path: Path) -> None:
    model_dir = write_model_dir(tmp_path / "model", train_tokenizer())
    keys = write_keys(tmp_path / "keys", {"alice": "k"})
    flags = ["--served-model-name", MODEL, "--api-keys-dir", str(keys),
             "--tokenizer-dir", str(model_dir), "--tls-cert-file", str(tmp_path / "absent.crt"),
             "--tls-key-file", str(tmp_path / "absent.key")]  # fmt: skip
    assert main(flags) == 1
    with pytest.raises(GatewayError, match="cannot load the TLS certificate"):
        ReloadingCertificate(cert_file=tmp_path / "absent.crt", key_file=tmp_path / "absent.key")


def test_certificate_and_key_are_configured_together(tmp_path: Path) -> None:
    base = ["--served-model-name", "m", "--api-keys-dir", str(tmp_path),
            "--tokenizer-dir", str(tmp_path)]  # fmt: skip
    with pytest.raises(GatewayError, match="tls_cert_file and tls_key_file"):
        load_gateway_config([*base, "--tls-cert-file", str(tmp_path / "c")], environ={})
    config = load_gateway_config(base, environ={})
    assert config.tls_cert_file is None
    assert config.tls_key_file is None
