"""A real HTTPS file server on 127.0.0.1 with faults, and a toy model, for the staging tests.

The server is Python's ``http.server`` under an ``ssl`` context with a self-signed
certificate made by the ``openssl`` CLI (tests/unit/test_gateway_tls.py's
``make_certificate``). It serves ``files`` with Range requests and injects, per path:
a connection dropped after N bytes (once), corrupted bytes (the first N responses), or a
status code. It also answers the Hugging Face Hub's API (``/api/models/<repo>/revision/
<rev>`` and ``/<repo>/resolve/<rev>/<file>``) for the Hub client's own code.
"""

from __future__ import annotations

import hashlib
import json
import ssl
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from sparkllm.staging.serve import MANIFEST_FILE, PeerServer
from tests.unit.test_gateway_tls import make_certificate
from tests.unit.test_integrity_fixtures import make_model_dir


@dataclass
class Faults:
    drop_after: dict[str, int] = field(default_factory=dict)  # path -> bytes, then close (once)
    drop_always: set[str] = field(default_factory=set)  # paths whose body never arrives
    corrupt: dict[str, int] = field(default_factory=dict)  # path -> responses to corrupt
    status: dict[str, int] = field(default_factory=dict)  # path -> HTTP status
    ranges: list[tuple[str, str]] = field(default_factory=list)  # (path, Range header) seen
    gets: list[str] = field(default_factory=list)  # paths of file GETs, in order


@dataclass
class Hub:
    repo: str
    commit: str


class _Handler(BaseHTTPRequestHandler):
    server: FileServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        del format, args

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, *, body: bool) -> None:
        route = unquote(urlsplit(self.path).path).lstrip("/")
        hub = self.server.hub
        if hub is not None and route == f"api/models/{hub.repo}/revision/{hub.commit}":
            siblings = [{"rfilename": name} for name in sorted(self.server.files)]
            self._reply(200, json.dumps({"id": hub.repo, "sha": hub.commit, "siblings": siblings}))
            return
        if hub is not None and route == f"api/models/{hub.repo}/tree/{hub.commit}":
            if "tree" in self.server.faults.status:
                self._reply(self.server.faults.status["tree"], "{}")
                return
            self._reply(200, json.dumps([hub_entry(p, d) for p, d in self.server.files.items()]))
            return
        extra: dict[str, str] = {}
        if hub is not None and route.startswith(f"{hub.repo}/resolve/{hub.commit}/"):
            route = route.removeprefix(f"{hub.repo}/resolve/{hub.commit}/")
            data = self.server.files.get(route, b"")
            extra = {"X-Repo-Commit": hub.commit, "ETag": f'"{hub_etag(route, data)}"'}
        faults = self.server.faults
        if route in faults.status:
            self._reply(faults.status[route], "")
            return
        data = self.server.files.get(route)
        if data is None:
            self._reply(404, "")
            return
        if body:
            faults.gets.append(route)
        if body and faults.corrupt.get(route, 0) > 0:
            faults.corrupt[route] -= 1
            data = bytes(b ^ 0xFF for b in data[:16]) + data[16:]
        start, status = 0, 200
        if "Range" in self.headers:
            faults.ranges.append((route, self.headers["Range"]))
            start = int(self.headers["Range"].split("=")[1].split("-")[0])
            if start >= len(data):
                self._reply(416, "", {"Content-Range": f"bytes */{len(data)}"})
                return
            status = 206
            extra["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        part = data[start:]
        self.send_response(status)
        for key, value in {**extra, "Content-Length": str(len(part))}.items():
            self.send_header(key, value)
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        if not body:
            return
        cut = 0 if route in faults.drop_always else faults.drop_after.pop(route, None)
        if cut is not None:
            self.wfile.write(part[:cut])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.wfile.write(part)

    def _reply(self, status: int, text: str, headers: dict[str, str] | None = None) -> None:
        data = text.encode()
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class FileServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, files: dict[str, bytes], hub: Hub | None = None) -> None:
        self.files, self.hub, self.faults = files, hub, Faults()
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server_port}"


@contextmanager
def https_server(
    files: dict[str, bytes], *, certs: Path, hub: Hub | None = None
) -> Iterator[tuple[FileServer, Path]]:
    """A serving FileServer over TLS and the CA file that trusts it."""
    cert, key = make_certificate(certs, name="127.0.0.1")
    server = FileServer(files, hub)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, cert
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def toy_model(root: Path) -> dict[str, bytes]:
    """A valid 3-shard model (index, shards, config, tokenizer) as {path: bytes}."""
    model = make_model_dir(root, layers=4, shards=3, hidden=64, vocab=256)
    return {
        p.relative_to(model).as_posix(): p.read_bytes()
        for p in sorted(model.rglob("*"))
        if p.is_file()
    }


def is_lfs(path: str) -> bool:
    return path.endswith(".safetensors")


def hub_etag(path: str, data: bytes) -> str:
    """The Hub's ETag: an LFS file's sha256, else the git blob id."""
    if is_lfs(path):
        return sha256(data)
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def hub_entry(path: str, data: bytes) -> dict[str, Any]:
    """One entry of the Hub's tree listing."""
    git_blob = hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()
    entry: dict[str, Any] = {"type": "file", "path": path, "size": len(data), "oid": git_blob}
    if is_lfs(path):
        entry["lfs"] = {"oid": sha256(data), "size": len(data), "pointerSize": 134}
    return entry


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def seed_copy(root: Path, files: dict[str, bytes], *, wrong_sha: str | None = None) -> Path:
    """A finished copy at ``root`` as a group's download leaves it (the files and the
    manifest a peer serves), without a source server: the origin of the peer-copy tests.
    ``wrong_sha`` names a file whose manifest hash is wrong (every copy of it mismatches)."""
    root.mkdir(parents=True)
    entries = []
    for path, data in sorted(files.items()):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
        digest = sha256(b"not " + data) if path == wrong_sha else sha256(data)
        entries.append({"path": path, "size": len(data), "sha256": digest})
    (root / MANIFEST_FILE).write_text(json.dumps({"files": entries}), encoding="utf-8")
    return root


@contextmanager
def peer_server(model_dir: Path) -> Iterator[str]:
    """``stage-model --serve``'s server on 127.0.0.1 for ``model_dir``; yields its URL."""
    with PeerServer(model_dir, ("127.0.0.1", 0)) as server, ThreadPoolExecutor(1) as pool:
        serving = pool.submit(server.serve_forever)
        try:
            yield f"http://127.0.0.1:{server.server_port}"
        finally:
            server.shutdown()
        serving.result()  # the server's loop ended without an error
