"""Open WebUI's pod on the dev cluster: the chart's container, run here as a local process.

Pods are local processes on the dev cluster (the kubelet is this harness); Open WebUI's is
the chart's Deployment (``openWebUI.enabled``, templates/open-webui.yaml) with its
container's environment taken as rendered, so the browser test runs what the chart
configures — the front-end key from its Secret, forwarded user headers, sign-in, the
offline switches — and not a copy of it. What differs is only what a kubelet would
provide differently here: the front door's URL (its Service has no cluster DNS on this
machine: the gateway pod's own loopback address instead), the data directory (a scratch
directory in place of the PVC) and the listening address.

The program is the ``open-webui`` console script of a cached venv that
``hack/setup-open-webui.sh`` installs (never at test time); ``venv_dir`` finds it by the
same key the script computes from ``hack/open-webui-requirements.txt``.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from sparkllm_dev.devcluster.engine_io import spawn_process
from sparkllm_dev.devcluster.gateway_io import free_port
from sparkllm_dev.devcluster.paths import cache_root
from sparkllm_dev.devcluster.pod_supervisor import stop_processes
from sparkllm_dev.devcluster.wait import wait_until
from sparkllm_dev.errors import DevClusterError

REQUIREMENTS = Path(__file__).resolve().parents[3] / "hack" / "open-webui-requirements.txt"
CONTAINER = "open-webui"
STOP_GRACE_SECONDS = 15.0


def requirements_key(text: str) -> str:
    """hack/setup-open-webui.sh's key: ``grep -v '^#' | sha256sum | cut -c1-12``."""
    kept = "".join(line + "\n" for line in text.splitlines() if not line.startswith("#"))
    return hashlib.sha256(kept.encode()).hexdigest()[:12]


def venv_dir() -> Path:
    """Where the set-up script put (or puts) Open WebUI's venv for the current pins."""
    return cache_root() / "open-webui-venv" / requirements_key(REQUIREMENTS.read_text())


def container_env(
    deployment: Mapping[str, Any], secrets: Mapping[tuple[str, str], str]
) -> dict[str, str]:
    """The Open WebUI container's environment as the kubelet would set it.

    ``secrets`` maps (Secret name, key) to its value for every ``secretKeyRef``; a
    reference it lacks is an error naming it (the kubelet's CreateContainerConfigError),
    and so is any other ``valueFrom`` (the chart renders none).
    """
    containers = deployment["spec"]["template"]["spec"]["containers"]
    container = next((c for c in containers if c["name"] == CONTAINER), None)
    if container is None:
        raise DevClusterError(f"no container {CONTAINER!r} in {deployment['metadata']['name']}")
    env: dict[str, str] = {}
    for var in container.get("env") or []:
        if "valueFrom" not in var:
            env[var["name"]] = str(var.get("value", ""))
            continue
        ref = var["valueFrom"].get("secretKeyRef")
        if ref is None:
            raise DevClusterError(f"env {var['name']}: only secretKeyRef is supported here")
        where = (ref["name"], ref["key"])
        if where not in secrets:
            raise DevClusterError(
                f"env {var['name']}: secret {where[0]!r} key {where[1]!r} not found"
            )
        env[var["name"]] = secrets[where]
    return env


def localized(env: Mapping[str, str], *, front_door: str, data_dir: Path) -> dict[str, str]:
    """``env`` with this machine's front door URL (``front_door``: scheme://host:port) and
    data directory; the path of the chart's URL (``/v1``) is kept."""
    rendered = httpx.URL(env["OPENAI_API_BASE_URL"])
    return {
        **env,
        "OPENAI_API_BASE_URL": f"{front_door.rstrip('/')}{rendered.path}",
        "DATA_DIR": str(data_dir),
    }


@dataclass(frozen=True)
class OpenWebUI:
    """A running Open WebUI: its URL and log file."""

    url: str
    log_path: Path


@contextmanager
def run_open_webui(
    env: Mapping[str, str], *, log_path: Path, system_env: Mapping[str, str], timeout: float
) -> Iterator[OpenWebUI]:
    """Open WebUI serving on a free loopback port until the block ends (then stopped).

    ``env`` is the container's (``localized``); ``system_env`` what a container image
    would add (PATH, HOME). Ready when ``/health`` answers 200: it has migrated its
    database and read its settings, as the chart's readiness probe waits for.
    """
    program = venv_dir() / "bin" / "open-webui"
    if not (venv_dir() / ".complete").is_file():
        raise DevClusterError(f"Open WebUI is not installed at {venv_dir()}: run `make tools`")
    port = free_port("127.0.0.1")
    full = {**system_env, **env, "PORT": str(port)}
    argv = [str(program), "serve", "--host", "127.0.0.1", "--port", str(port)]
    # In its data directory: without WEBUI_SECRET_KEY (the chart's secretKeySecretRef is
    # optional) Open WebUI writes a generated .webui_secret_key into its working directory.
    data_dir = Path(full["DATA_DIR"])
    data_dir.mkdir(parents=True, exist_ok=True)
    process = spawn_process(
        argv, env=full, log_path=log_path, header=f"$ {' '.join(argv)}", cwd=data_dir
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(
            lambda: _healthy(url, process),
            timeout=timeout,
            what=f"Open WebUI /health at {url} (log {log_path})",
        )
        yield OpenWebUI(url=url, log_path=log_path)
    finally:
        stop_processes([process], grace_seconds=STOP_GRACE_SECONDS)


def _healthy(url: str, process: subprocess.Popen[bytes]) -> bool:
    if process.poll() is not None:
        raise DevClusterError(f"Open WebUI exited with {process.returncode} before it was ready")
    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False
