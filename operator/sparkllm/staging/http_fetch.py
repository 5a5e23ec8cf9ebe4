"""Files over HTTP(S): a source's URLs, and a peer node's finished copy.

Both are the same code path (issue 31: "fetch from a peer: the same HTTPS/HTTP code
path, resumable"): an :class:`~sparkllm.staging.transfer.Opener` that sends ``Range:
bytes=<offset>-`` and streams the body with httpx (pinned already for the gateway).
A peer is read from its manifest (``/manifest.json``, written by ``serve``): every file's
path, size and sha256, so a copy is checked exactly as the download was.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit

import certifi
import httpx

from sparkllm.staging.errors import StageError, from_http_status
from sparkllm.staging.plan import StageReason
from sparkllm.staging.transfer import ConnectionLostError, Expected, Opener, Stream

CHUNK = 1024 * 1024
MANIFEST_PATH = "/manifest.json"


@dataclass(frozen=True, slots=True)
class RemoteFile:
    """One file to fetch: where it goes in the model directory, where it comes from."""

    path: str
    url: str
    expected: Expected = field(default_factory=Expected)


def http_client(*, ca_file: Path | None = None, local_address: str | None = None) -> httpx.Client:
    """A client that follows redirects (mirrors and CDNs redirect); ``ca_file`` adds trust;
    ``local_address`` sends from this node's address on the group's link (peer copies)."""
    # identity: the bytes on disk are the bytes served (a Range counts them).
    headers = {"Accept-Encoding": "identity"}
    verify: ssl.SSLContext | bool = True
    if ca_file is not None:
        verify = ssl.create_default_context(cafile=certifi.where())
        verify.load_verify_locations(cafile=str(ca_file))
    return httpx.Client(
        transport=httpx.HTTPTransport(verify=verify, local_address=local_address),
        follow_redirects=True,
        headers=headers,
        timeout=httpx.Timeout(60.0, connect=15.0),
    )


def http_opener(client: httpx.Client, url: str, *, what: str) -> Opener:
    """Open ``url`` from an offset with a Range request."""

    @contextlib.contextmanager
    def open_from(offset: int) -> Iterator[Stream | None]:
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        try:
            with client.stream("GET", url, headers=headers) as response:
                if response.status_code == 416:  # nothing from offset: already complete
                    yield None
                    return
                if response.status_code not in (200, 206):
                    raise from_http_status(response.status_code, what=what)
                total = _total(response)
                yield Stream(
                    chunks=_chunks(response), from_start=response.status_code == 200, total=total
                )
        except httpx.TransportError as exc:
            raise ConnectionLostError(f"{what}: {type(exc).__name__}: {exc}") from exc

    return open_from


def _chunks(response: httpx.Response) -> Iterator[bytes]:
    yield from response.iter_bytes()  # as received: a drop keeps every byte that arrived


def _total(response: httpx.Response) -> int | None:
    content_range = response.headers.get("content-range", "")
    if "/" in content_range and not content_range.endswith("/*"):
        return int(content_range.rsplit("/", 1)[1])
    length = response.headers.get("content-length")
    return int(length) if length is not None else None


def https_files(urls: Sequence[tuple[str, str | None, str | None]]) -> list[RemoteFile]:
    """(url, sha256, path) entries of ``spec.model.source.https`` -> files (path: default
    the URL's last segment)."""
    files = []
    for url, sha256, path in urls:
        name = path or urlsplit(url).path.rsplit("/", 1)[-1]
        if not name:
            raise StageError(StageReason.INVALID_SOURCE, f"{url}: no file name; set its path")
        files.append(RemoteFile(path=name, url=url, expected=Expected(sha256=sha256)))
    return files


def head_sizes(client: httpx.Client, files: Sequence[RemoteFile]) -> int | None:
    """The files' total size from HEAD requests (None when a server does not say), before
    any download: the disk-space check and the ETA need it; a missing file fails here."""
    total = 0
    for remote in files:
        if remote.expected.size is not None:
            total += remote.expected.size
            continue
        try:
            response = client.head(remote.url)
        except httpx.TransportError as exc:
            raise StageError(StageReason.CONNECTION_LOST, f"{_name(remote)}: {exc}") from exc
        if response.status_code != 200:
            raise from_http_status(response.status_code, what=_name(remote))
        length = response.headers.get("content-length")
        if length is None:
            return None
        total += int(length)
    return total


def _name(remote: RemoteFile) -> str:
    return f"{remote.path} ({remote.url})"


def peer_files(client: httpx.Client, base_url: str) -> list[RemoteFile]:
    """The files a peer serves, from its manifest (PeerUnavailable when it serves none)."""
    base = base_url.rstrip("/")
    what = f"peer {base}"
    try:
        response = client.get(base + MANIFEST_PATH)
    except httpx.TransportError as exc:
        raise StageError(StageReason.PEER_UNAVAILABLE, f"{what}: {exc}") from exc
    if response.status_code != 200:
        raise StageError(
            StageReason.PEER_UNAVAILABLE, f"{what}: manifest HTTP {response.status_code}"
        )
    try:
        entries = response.json()["files"]
        return [
            RemoteFile(
                path=e["path"],
                url=f"{base}/files/{quote(e['path'])}",
                expected=Expected(size=int(e["size"]), sha256=str(e["sha256"])),
            )
            for e in entries
        ]
    except (ValueError, KeyError, TypeError) as exc:
        raise StageError(StageReason.INVALID_SOURCE, f"{what}: malformed manifest") from exc
