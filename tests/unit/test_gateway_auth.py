"""User keys: Bearer parsing, matching, and reloading a Secret directory without restart."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from sparkllm.errors import GatewayError
from sparkllm.gateway.auth import ApiKeyStore
from sparkllm.gateway.replies import ErrorReply
from tests.unit.gateway_fixtures import write_keys


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def keys_dir(tmp_path: Path) -> Path:
    return write_keys(tmp_path / "keys", {"alice": "key-alice-1", "bob": "key-bob-2"})


def _code(result: str | ErrorReply) -> str:
    assert isinstance(result, ErrorReply), result
    assert result.status == 401
    return result.code


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (b"Bearer key-alice-1", "alice"),
        (b"bearer key-bob-2", "bob"),
        (b"Bearer   key-bob-2  ", "bob"),
        (None, "missing_api_key"),
        (b"", "missing_api_key"),
        (b"Bearer ", "missing_api_key"),
        (b"Basic a2V5LWFsaWNlLTE=", "missing_api_key"),
        (b"key-alice-1", "missing_api_key"),
        (b"Bearer key-alice-", "invalid_api_key"),
        (b"Bearer key-alice-10", "invalid_api_key"),
        (b"Bearer \xff\xfe", "invalid_api_key"),
    ],
)
def test_bearer_keys_map_to_users(keys_dir: Path, header: bytes | None, expected: str) -> None:
    result = ApiKeyStore(keys_dir).authenticate(header)
    assert (result if isinstance(result, str) else _code(result)) == expected


@pytest.mark.parametrize(
    ("authorization", "x_api_key", "expected"),
    [
        (None, b"key-alice-1", "alice"),
        (None, b"  key-bob-2 ", "bob"),
        (b"Bearer key-alice-1", b"key-alice-1", "alice"),
        (b"Basic a2V5LWFsaWNlLTE=", b"key-bob-2", "bob"),  # not Bearer: no key there
        (b"Bearer ", b"key-bob-2", "bob"),
        (None, b"", "missing_api_key"),
        (None, b"key-alice-", "invalid_api_key"),
        (b"Bearer key-alice-1", b"key-bob-2", "conflicting_api_keys"),
        (b"Bearer key-alice-1", b"nope", "conflicting_api_keys"),
        (b"Bearer nope", b"key-alice-1", "conflicting_api_keys"),
    ],
)
def test_x_api_key_is_a_key_too_and_two_different_keys_conflict(
    keys_dir: Path, authorization: bytes | None, x_api_key: bytes, expected: str
) -> None:
    """Anthropic's protocol authenticates with ``x-api-key`` (its SDKs' default)."""
    result = ApiKeyStore(keys_dir).authenticate(authorization, x_api_key)
    assert (result if isinstance(result, str) else _code(result)) == expected


def test_new_key_file_is_picked_up_after_the_reload_interval(
    keys_dir: Path, clock: FakeClock
) -> None:
    store = ApiKeyStore(keys_dir, clock=clock)
    write_keys(keys_dir, {"carol": "key-carol-3"})
    clock.now += 0.5  # within the interval: the directory is not even looked at
    assert _code(store.authenticate(b"Bearer key-carol-3")) == "invalid_api_key"
    clock.now += 0.6
    assert store.authenticate(b"Bearer key-carol-3") == "carol"
    assert store.users == ("alice", "bob", "carol")


def test_changed_and_removed_keys_take_effect(keys_dir: Path, clock: FakeClock) -> None:
    store = ApiKeyStore(keys_dir, clock=clock)
    (keys_dir / "alice").write_text("key-alice-rotated-and-longer\n")
    (keys_dir / "bob").unlink()
    clock.now += 2
    assert store.authenticate(b"Bearer key-alice-rotated-and-longer") == "alice"
    assert _code(store.authenticate(b"Bearer key-alice-1")) == "invalid_api_key"
    assert _code(store.authenticate(b"Bearer key-bob-2")) == "invalid_api_key"


def test_kubernetes_secret_volume_layout_is_followed(tmp_path: Path, clock: FakeClock) -> None:
    """Files are symlinks into ..data, which the kubelet swaps atomically on update."""
    volume = tmp_path / "secret"
    first = write_keys(volume / "..2026_01_01", {"alice": "old-key"})
    os.symlink(first.name, volume / "..data")
    os.symlink("..data/alice", volume / "alice")
    store = ApiKeyStore(volume, clock=clock)
    assert store.users == ("alice",)
    assert store.authenticate(b"Bearer old-key") == "alice"
    second = write_keys(volume / "..2026_01_02", {"alice": "new-key"})
    os.symlink(second.name, volume / "..data_tmp")
    os.replace(volume / "..data_tmp", volume / "..data")
    clock.now += 2
    assert store.authenticate(b"Bearer new-key") == "alice"
    assert _code(store.authenticate(b"Bearer old-key")) == "invalid_api_key"


def test_empty_and_oversized_files_are_skipped_and_keys_never_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    keys_dir = write_keys(tmp_path, {"alice": "sekrit-alice", "empty": "  "})
    (keys_dir / "huge").write_text("x" * 5000)
    with caplog.at_level(logging.DEBUG, logger="sparkllm.gateway.auth"):
        store = ApiKeyStore(keys_dir)
        store.authenticate(b"Bearer wrong")
        store.authenticate(b"Bearer sekrit-alice")
    assert store.users == ("alice",)
    assert "user=empty" in caplog.text
    assert "user=huge" in caplog.text
    assert "sekrit" not in caplog.text


def test_a_vanished_directory_keeps_the_last_keys(tmp_path: Path, clock: FakeClock) -> None:
    keys_dir = write_keys(tmp_path / "keys", {"alice": "key-a"})
    store = ApiKeyStore(keys_dir, clock=clock)
    (keys_dir / "alice").unlink()
    keys_dir.rmdir()
    clock.now += 2
    assert store.authenticate(b"Bearer key-a") == "alice"


def test_missing_directory_at_start_is_a_gateway_error(tmp_path: Path) -> None:
    with pytest.raises(GatewayError, match="cannot read API keys"):
        ApiKeyStore(tmp_path / "absent")


def test_no_keys_means_every_request_is_refused(tmp_path: Path) -> None:
    store = ApiKeyStore(tmp_path)
    assert _code(store.authenticate(b"Bearer anything")) == "invalid_api_key"
