"""versitygw, the S3 server the staging tests and the demo's staging journey run.

Why one place: the tests (tests/unit/test_staging_s3.py's fixture) and ``sparkllm-dev
model-source`` start the same server the same way — one account, a posix directory whose
subdirectories are the buckets, on a port of 127.0.0.1 — and wait until it accepts
connections, or report that it exited.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path
from typing import BinaryIO, Final

from sparkllm_dev.devcluster.gateway_io import free_port
from sparkllm_dev.errors import DevClusterError

HOST: Final = "127.0.0.1"
START_DEADLINE_SECONDS: Final = 20.0


def start_versitygw(
    binary: Path,
    *,
    data: Path,
    buckets: tuple[str, ...],
    access_key: str,
    secret_key: str,
    log: BinaryIO,
    new_session: bool = False,
) -> tuple[subprocess.Popen[bytes], int]:
    """versitygw over ``data`` (each of ``buckets`` made a directory), listening on a
    free port of ``HOST``: (the process, its port) once it accepts connections.
    DevClusterError when it exits or does not listen within the deadline (it is stopped)."""
    for bucket in buckets:
        (data / bucket).mkdir(parents=True, exist_ok=True)  # a bucket is a directory
    port = free_port(HOST)
    process = subprocess.Popen(
        [str(binary), "--access", access_key, "--secret", secret_key, "--quiet",
         "--port", f"{HOST}:{port}", "posix", str(data)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=new_session,
    )  # fmt: skip
    try:
        _wait_for_port(port, process)
    except DevClusterError:
        process.terminate()
        process.wait(timeout=10)
        raise
    return process, port


def _wait_for_port(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_DEADLINE_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise DevClusterError(f"versitygw exited with {process.returncode} (see its log)")
        try:
            socket.create_connection((HOST, port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.02)
    waited = f"{START_DEADLINE_SECONDS} s"
    raise DevClusterError(f"versitygw did not listen on {HOST}:{port} in {waited}")


__all__ = ["HOST", "start_versitygw"]
