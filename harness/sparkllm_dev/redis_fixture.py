"""A real Redis for tests: Debian's ``redis-server`` on a loopback port, as a pytest plugin.

Why a real server and not a fake: the shared governance store (``sparkllm.gateway.
governance.redis_store``) is only as good as the atomicity of its Lua scripts, and
that is a property of the server (one script runs at a time, EVALSHA, TIME inside a
script, key expiry), not of a Python imitation. ``hack/setup-test-tools.sh`` installs
the package; the root conftest.py registers this plugin beside ``sparkllm_dev.testing``.

The server is session-scoped: started once with a password (the gateway always sends
one in production, so the AUTH path is exercised), no persistence, on 127.0.0.1 only.
Tests separate their state by key prefix (``redis_prefix``), never by flushing, so
they may share the one server. A missing ``redis-server`` skips locally and fails
under ``CI=true``, like the dev cluster's binaries.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from sparkllm_dev.ci import unavailable
from sparkllm_dev.devcluster.gateway_io import free_port
from sparkllm_dev.devcluster.pod_supervisor import stop_processes
from sparkllm_dev.devcluster.wait import wait_until

HOST = "127.0.0.1"
START_TIMEOUT_SECONDS = 20


@dataclass(frozen=True, slots=True)
class RedisServer:
    """A running ``redis-server``: where it listens and the password it wants."""

    host: str
    port: int
    password: str
    process: subprocess.Popen[bytes]

    @property
    def address(self) -> str:
        """``host:port``, the form ``spec.admission.governance.store.redis.address`` takes."""
        return f"{self.host}:{self.port}"

    def client(self) -> redis.Redis:
        """A synchronous client (for checks from a test, not for the store itself)."""
        return redis.Redis(host=self.host, port=self.port, password=self.password)

    def stop(self) -> None:
        stop_processes([self.process], grace_seconds=10)


def start_redis_server(binary: str, *, workdir: Path) -> RedisServer:
    """Start ``binary`` on a free loopback port with a fresh password; wait for PING."""
    port = free_port(HOST)
    password = secrets.token_hex(16)
    # The password goes in a config file, not argv, so `ps` does not show it.
    config = workdir / "redis.conf"
    config.write_text(
        f'bind {HOST}\nport {port}\nrequirepass {password}\nsave ""\nappendonly no\n'
        f"dir {workdir}\nprotected-mode yes\n"
    )
    with (workdir / "redis.log").open("wb") as log:  # the child keeps its own descriptor
        process = subprocess.Popen([binary, str(config)], stdout=log, stderr=subprocess.STDOUT)
    server = RedisServer(host=HOST, port=port, password=password, process=process)

    def answers() -> bool:
        if process.poll() is not None:
            text = (workdir / "redis.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"redis-server exited with {process.returncode}: {text}")
        with server.client() as probe:
            return bool(probe.ping())

    try:
        wait_until(answers, timeout=START_TIMEOUT_SECONDS, what=f"redis-server on {HOST}:{port}")
    except Exception:
        server.stop()
        raise
    return server


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that asks for ``redis_server`` needs a set-up step's program: mark it
    ``needs_binary`` (``make unit`` deselects those), so no test can forget the marker."""
    for item in items:
        if "redis_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.needs_binary)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One ``redis-server`` for the session (skips locally, fails in CI, when missing)."""
    binary = shutil.which("redis-server")
    if binary is None:
        unavailable("redis-server missing: run `bash hack/setup-test-tools.sh` (`make test` does)")
    with tempfile.TemporaryDirectory(prefix="sparkllm-redis-") as workdir:
        server = start_redis_server(binary, workdir=Path(workdir))
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture
def redis_prefix() -> str:
    """A key prefix of this test's own: tests share the server, never its keys."""
    return f"sparkllm-test:{uuid.uuid4().hex[:12]}"
