"""HTTPS served by the admission layer itself, from a mounted ``kubernetes.io/tls`` Secret.

Why here and not in front of it: a cluster with neither a Gateway nor an Ingress
controller still needs the documents' "client --HTTPS--> front door"
(``spec.exposure.type: TLS``, docs/exposure.md). The operator mounts the Secret as a
directory, so the kubelet swaps ``tls.crt`` and ``tls.key`` in place when cert-manager (or
anyone) renews it; the gateway must pick the new pair up without a restart, which would
drop every stream in flight.

How: the server context's SNI callback runs at the start of every handshake (with or
without a server name). At most once per ``check_interval`` it compares the files'
modification times and sizes with the pair it loaded; when they changed, it loads them
into a fresh context and switches the handshake to it — the way Python documents for
choosing a certificate per connection. Connections already open keep their session;
a pair that fails to load (a half-written file) is logged and the previous one is kept,
so a bad renewal never takes the front door down.
"""

from __future__ import annotations

import logging
import os
import ssl
import time
from collections.abc import Callable
from pathlib import Path

from sparkllm.errors import GatewayError

logger = logging.getLogger(__name__)

CHECK_INTERVAL_SECONDS = 5.0


def _stamp(*paths: Path) -> tuple[tuple[int, int], ...]:
    stats = [os.stat(path) for path in paths]
    return tuple((s.st_mtime_ns, s.st_size) for s in stats)


def server_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    """A TLS 1.2+ server context holding one certificate chain and its key."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile=cert_file, keyfile=key_file)
    return context


class ReloadingCertificate:
    """The server context uvicorn listens with, following the certificate files."""

    def __init__(
        self,
        *,
        cert_file: Path,
        key_file: Path,
        check_interval: float = CHECK_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._files = (cert_file, key_file)
        self._interval = check_interval
        self._clock = clock
        try:
            self._stamp = _stamp(*self._files)
            self._current = server_context(cert_file, key_file)
        except (OSError, ssl.SSLError) as exc:
            raise GatewayError(f"cannot load the TLS certificate {cert_file}: {exc}") from exc
        self._checked = clock()
        self.listening = server_context(cert_file, key_file)
        self.listening.sni_callback = self._on_handshake
        self.reloads = 0

    def _on_handshake(
        self, connection: ssl.SSLObject | ssl.SSLSocket, _name: str | None, _ctx: ssl.SSLContext
    ) -> None:
        self._refresh()
        connection.context = self._current

    def _refresh(self) -> None:
        now = self._clock()
        if now - self._checked < self._interval:
            return
        self._checked = now
        try:
            stamp = _stamp(*self._files)
            if stamp == self._stamp:
                return
            self._current = server_context(*self._files)
        except (OSError, ssl.SSLError) as exc:
            logger.warning("TLS certificate not reloaded, keeping the previous one: %s", exc)
            return
        self._stamp = stamp
        self.reloads += 1
        logger.info("TLS certificate reloaded cert=%s", self._files[0])


__all__ = ["CHECK_INTERVAL_SECONDS", "ReloadingCertificate", "server_context"]
