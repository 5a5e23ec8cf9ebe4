"""User API keys: a mounted Secret directory, re-read when it changes, compared in constant time.

Why a directory: Kubernetes mounts a Secret as one file per key, and updates it in place
(atomically swapping a ``..data`` symlink) when the Secret changes. One file per user,
file name = user id, content = the key: adding or revoking a user is a Secret edit, with
no gateway restart. The directory is checked at most once per ``reload_interval`` (a
``scandir`` and one ``stat`` per file), lazily on the request path, so an idle gateway
does no work and a busy one pays a few microseconds a second.

Why constant time: ``hmac.compare_digest`` against every key, without stopping at the
first match, so response timing reveals neither a key's prefix nor which user matched.
Keys are never logged; user ids (file names) are logged, and are not metric labels
because their number is unbounded.
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from sparkllm.errors import GatewayError
from sparkllm.gateway import replies
from sparkllm.gateway.replies import ErrorReply

logger = logging.getLogger(__name__)

MAX_KEY_FILE_BYTES = 4096
_BEARER = b"bearer "

Snapshot = tuple[tuple[str, int, int, int], ...]


def _snapshot(directory: Path) -> Snapshot:
    """What identifies the directory's current content: name, inode, size, mtime per file."""
    entries = []
    with os.scandir(directory) as scan:
        for entry in scan:
            if entry.name.startswith("."):  # Secret volume internals (..data, ..2024_...)
                continue
            try:
                stat = entry.stat()  # follows the Secret's symlinks
            except FileNotFoundError:  # removed while listing
                continue
            entries.append((entry.name, stat.st_ino, stat.st_size, stat.st_mtime_ns))
    return tuple(sorted(entries))


def _read_keys(directory: Path) -> tuple[tuple[str, bytes], ...]:
    keys: list[tuple[str, bytes]] = []
    for name, _inode, size, _mtime in _snapshot(directory):
        path = directory / name
        if not path.is_file():
            continue
        if size > MAX_KEY_FILE_BYTES:
            logger.warning("api key file ignored: larger than %d bytes user=%s", size, name)
            continue
        key = path.read_bytes().strip()
        if not key:
            logger.warning("api key file ignored: empty user=%s", name)
            continue
        keys.append((name, key))
    return tuple(keys)


def presented_key(authorization: bytes | None, x_api_key: bytes | None) -> bytes | ErrorReply:
    """The key a request presents: ``Authorization: Bearer <key>`` (OpenAI's SDKs, and
    Anthropic's given ``auth_token``) or ``x-api-key: <key>`` (Anthropic's protocol:
    its SDKs' default, raw HTTP, many coding agents). Both with different keys is a 401
    that names the conflict; an Authorization that is not Bearer counts as no key."""
    bearer = None
    if authorization is not None and authorization[: len(_BEARER)].lower() == _BEARER:
        bearer = authorization[len(_BEARER) :].strip() or None
    header_key = None if x_api_key is None else (x_api_key.strip() or None)
    both = bearer is not None and header_key is not None
    if both and not hmac.compare_digest(bearer or b"", header_key or b""):
        return replies.conflicting_api_keys()
    presented = bearer if bearer is not None else header_key
    return replies.missing_api_key() if presented is None else presented


class ApiKeyStore:
    """The users' keys; ``authenticate`` maps a request's key headers to a user id."""

    def __init__(
        self,
        directory: Path,
        *,
        reload_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._directory = directory
        self._reload_interval = reload_interval
        self._clock = clock
        try:
            self._snapshot = _snapshot(directory)
            self._keys = _read_keys(directory)
        except OSError as exc:
            raise GatewayError(f"cannot read API keys from {directory}: {exc}") from exc
        self._checked_at = clock()
        self._log_loaded()

    @property
    def users(self) -> tuple[str, ...]:
        """The user ids currently holding a key (file names)."""
        return tuple(user for user, _key in self._keys)

    def authenticate(
        self, authorization: bytes | None, x_api_key: bytes | None = None
    ) -> str | ErrorReply:
        """The user id for ``Authorization: Bearer <key>`` or ``x-api-key: <key>``, or
        the 401 to send."""
        self._reload_if_changed()
        presented = presented_key(authorization, x_api_key)
        if isinstance(presented, ErrorReply):
            return presented
        matched: str | None = None
        for user, key in self._keys:  # no early exit: the time does not depend on who
            if hmac.compare_digest(presented, key):
                matched = user
        return matched if matched is not None else replies.invalid_api_key()

    def _reload_if_changed(self) -> None:
        now = self._clock()
        if now - self._checked_at < self._reload_interval:
            return
        self._checked_at = now
        try:
            snapshot = _snapshot(self._directory)
            if snapshot == self._snapshot:
                return
            keys = _read_keys(self._directory)
        except OSError as exc:  # keep serving with the keys we have
            logger.error("api keys not reloaded, keeping %d: %s", len(self._keys), exc)
            return
        self._snapshot, self._keys = snapshot, keys
        self._log_loaded()

    def _log_loaded(self) -> None:
        if not self._keys:
            logger.warning(
                "no api keys loaded from %s: every request will get 401", self._directory
            )
            return
        logger.info("api keys loaded users=%s", ",".join(self.users))
        if len({key for _user, key in self._keys}) < len(self._keys):
            logger.warning("the same api key is in several files: it maps to the last user")
