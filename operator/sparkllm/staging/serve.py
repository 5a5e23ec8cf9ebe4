"""``sparkllm stage-model --serve``: a finished copy, served to the group's other nodes.

Why HTTP on the node's own address: the copies travel over the links NetworkVerified
checked (the nodes' addresses on the 200 GbE ring), with the same resumable Range code
path as a download. Plain HTTP (no TLS): the bytes are public to the group's nodes
anyway (the model), and every copy is checked against the manifest's sha256, so a
tampered or truncated byte is a HashMismatch, not a silent difference.

Routes: ``GET /manifest.json`` (``{"files": [{"path", "size", "sha256"}]}``, from the
manifest the stage wrote beside the files, :data:`MANIFEST_FILE`), ``GET /files/<path>``
with ``Range: bytes=<start>-[<end>]`` (206) or without (200), ``HEAD`` likewise. Only the
manifest's files are served: nothing else under the directory, nothing outside it.
"""

from __future__ import annotations

import json
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote, urlsplit

from sparkllm.errors import SparkllmError

MANIFEST_FILE: Final = ".sparkllm-staged.json"
COPY_CHUNK: Final = 1024 * 1024


def read_manifest(model_dir: Path) -> dict[str, Any]:
    """The manifest a finished stage wrote into ``model_dir``."""
    path = model_dir / MANIFEST_FILE
    try:
        manifest: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SparkllmError(f"{model_dir} holds no finished stage ({path}: {exc})") from exc
    return manifest


def _parse_range(header: str, size: int) -> tuple[int, int] | None:
    """``bytes=a-b`` / ``bytes=a-`` -> (start, end inclusive); None when unsatisfiable."""
    unit, _, spec = header.partition("=")
    first, _, last = spec.partition("-")
    if unit.strip() != "bytes" or not first.strip().isdigit():
        return None
    start = int(first)
    end = int(last) if last.strip().isdigit() else size - 1
    if start >= size or end < start:
        return None
    return start, min(end, size - 1)


class _Handler(BaseHTTPRequestHandler):
    server: PeerServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        del format, args  # one line per request would drown the progress lines

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, *, body: bool) -> None:
        route = unquote(urlsplit(self.path).path)
        if route == "/manifest.json":
            data = json.dumps({"files": self.server.files}).encode()
            self._headers(HTTPStatus.OK, len(data), "application/json")
            if body:
                self.wfile.write(data)
            return
        sizes = {f["path"]: int(f["size"]) for f in self.server.files}
        name = route.removeprefix("/files/")
        if not route.startswith("/files/") or name not in sizes:
            self._headers(HTTPStatus.NOT_FOUND, 0)
            return
        size = sizes[name]
        start, end, status = 0, size - 1, HTTPStatus.OK
        if "Range" in self.headers:
            span = _parse_range(self.headers["Range"], size)
            if span is None:
                self._headers(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE, 0, total=size)
                return
            (start, end), status = span, HTTPStatus.PARTIAL_CONTENT
        self._headers(status, end - start + 1, range_=(start, end, size))
        if body:
            with (self.server.model_dir / name).open("rb") as fh:
                fh.seek(start)
                self.server.count(self.client_address[0], self._send(fh, end - start + 1))

    def _send(self, fh: Any, length: int) -> int:
        sent = 0
        while sent < length:
            chunk = fh.read(min(COPY_CHUNK, length - sent))
            if not chunk:
                break
            self.wfile.write(chunk)
            sent += len(chunk)
        return sent

    def _headers(
        self,
        status: HTTPStatus,
        length: int,
        content_type: str = "application/octet-stream",
        *,
        range_: tuple[int, int, int] | None = None,
        total: int | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        if range_ is not None and status == HTTPStatus.PARTIAL_CONTENT:
            self.send_header("Content-Range", f"bytes {range_[0]}-{range_[1]}/{range_[2]}")
        if total is not None:
            self.send_header("Content-Range", f"bytes */{total}")
        self.end_headers()


class PeerServer(ThreadingHTTPServer):
    """Serves one finished model directory; counts the bytes sent to each client."""

    daemon_threads = True

    def __init__(self, model_dir: Path, address: tuple[str, int]) -> None:
        self.model_dir = model_dir
        self.files: list[dict[str, Any]] = read_manifest(model_dir)["files"]
        self.bytes_sent: dict[str, int] = {}
        self._lock = threading.Lock()
        super().__init__(address, _Handler)

    def count(self, client: str, sent: int) -> None:
        with self._lock:
            self.bytes_sent[client] = self.bytes_sent.get(client, 0) + sent
