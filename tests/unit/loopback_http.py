"""A stand-in HTTP peer on loopback for the unit tests that need one byte-exact answer.

Why a module: two suites replay what a real peer sends (an engine's model info, the
API server's watch stream) to code that speaks HTTP through a real client library, and
both need the same thing — a threaded ``http.server`` on 127.0.0.1, a JSON answer with
its length, no request log — started and torn down around one test.
"""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator
from typing import Any


class JSONHandler(http.server.BaseHTTPRequestHandler):
    """A handler whose subclasses answer with ``self.answer(body)``; quiet."""

    def answer(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests read what their handler recorded instead."""


@contextlib.contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve ``handler`` on a free loopback port; yields its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
