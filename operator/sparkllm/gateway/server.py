"""Serving the gateway: configuration, logging, the metrics port, uvicorn.

The metrics are served only on ``metrics_port`` (prometheus_client's own server, in a
thread), never on the users' port: their series carry user ids with each user's tokens
and refusals (metrics.py). The operator always sets it (render/gateway.py); by hand,
unset means no metrics over HTTP.

Why separate from app.py: this is the only place with process-wide effects (argv, the
environment, logging setup, a listening socket), so the app itself stays importable and
testable without them. Exit status: 2 for a bad configuration, 1 when the tokenizer,
template or key directory cannot be loaded. On SIGTERM/SIGINT uvicorn stops accepting,
lets in-flight requests finish, runs the lifespan shutdown (closing the upstream pool),
then re-raises the signal, so the process ends with the usual signal status (143/130).
"""

from __future__ import annotations

import logging
import os
import ssl
import sys
from collections.abc import Callable, Sequence

import uvicorn
from prometheus_client import start_http_server

from sparkllm.errors import GatewayError
from sparkllm.gateway.app import GatewayApp, build_gateway_app
from sparkllm.gateway.config import GatewayConfig, load_gateway_config
from sparkllm.gateway.tls import ReloadingCertificate
from sparkllm.gateway.transport import GuardedHttpToolsProtocol

logger = logging.getLogger(__name__)

# uvicorn's httptools protocol (llhttp, C) rather than h11 (pure Python): a few hundred
# microseconds per request, a large share of the layer's ~1 ms budget (docs/gateway.md).
HTTP_PROTOCOL = "httptools"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the gateway until SIGTERM/SIGINT; ``argv`` defaults to ``sys.argv[1:]``.

    Returns 2 for a bad configuration, 1 if the model files or keys cannot be loaded,
    0 if the server stops without a signal.
    """
    try:
        config = load_gateway_config(sys.argv[1:] if argv is None else argv, environ=os.environ)
    except GatewayError as exc:
        print(f"sparkllm gateway: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        app = build_gateway_app(config)
    except GatewayError as exc:
        logger.error("gateway cannot start: %s", exc)
        return 1
    if config.metrics_port is not None:
        registry = app.metrics.registry
        start_http_server(config.metrics_port, addr=config.listen_host, registry=registry)
    logger.info(
        "gateway listening host=%s port=%d metrics_port=%s upstream=%s model=%s "
        "max_input_tokens=%d context_length=%d max_concurrent_requests=%d",
        config.listen_host,
        config.listen_port,
        config.metrics_port or "-",
        config.upstream_url,
        config.served_model_name,
        config.max_input_tokens,
        config.context_length,
        config.max_concurrent_requests,
    )
    try:
        server = uvicorn.Server(uvicorn_config(app, config))
    except GatewayError as exc:  # the TLS certificate cannot be loaded
        logger.error("gateway cannot start: %s", exc)
        return 1
    server.run()
    return 0


def uvicorn_config(app: GatewayApp, config: GatewayConfig) -> uvicorn.Config:
    """uvicorn serving ``app`` with the gateway's connection limits (transport.py), over
    HTTPS when a certificate is configured (tls.py: re-read when the Secret changes)."""
    protocol = GuardedHttpToolsProtocol.configured(
        max_header_bytes=config.max_header_bytes,
        header_timeout=config.header_timeout_seconds,
        body_timeout=config.body_timeout_seconds,
    )
    return uvicorn.Config(
        app,
        host=config.listen_host,
        port=config.listen_port,
        http=protocol,
        timeout_keep_alive=config.keep_alive_timeout_seconds,
        loop="asyncio",
        lifespan="on",
        access_log=False,
        server_header=False,
        proxy_headers=False,  # nothing reads the client address; saves a wrapper per request
        log_level=config.log_level,
        log_config=None,
        ssl_context_factory=_tls_factory(config),
    )


def _tls_factory(
    config: GatewayConfig,
) -> Callable[[uvicorn.Config, Callable[[], ssl.SSLContext]], ssl.SSLContext] | None:
    if config.tls_cert_file is None or config.tls_key_file is None:
        return None
    certificate = ReloadingCertificate(cert_file=config.tls_cert_file, key_file=config.tls_key_file)
    return lambda _config, _default: certificate.listening
