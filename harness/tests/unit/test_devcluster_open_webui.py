"""The Open WebUI pod's pure helpers: its environment as the kubelet sets it, the local
rewrites, and the venv key the set-up script computes (so the test finds what it made)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from sparkllm_dev.devcluster.open_webui import (
    REQUIREMENTS,
    container_env,
    localized,
    requirements_key,
)
from sparkllm_dev.errors import DevClusterError


def _deployment(*env: dict[str, Any]) -> dict[str, Any]:
    container = {"name": "open-webui", "env": list(env)}
    return {"metadata": {"name": "w"}, "spec": {"template": {"spec": {"containers": [container]}}}}


KEY_REF = {"secretKeyRef": {"name": "s", "key": "k"}}


def test_values_and_secret_references_resolve() -> None:
    deployment = _deployment(
        {"name": "A", "value": "1"}, {"name": "EMPTY"}, {"name": "KEY", "valueFrom": KEY_REF}
    )
    assert container_env(deployment, {("s", "k"): "secret"}) == {
        "A": "1",
        "EMPTY": "",
        "KEY": "secret",
    }


@pytest.mark.parametrize(
    ("var", "message"),
    [
        ({"name": "KEY", "valueFrom": KEY_REF}, "secret 's' key 'k' not found"),
        ({"name": "F", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}, "only secretKeyRef"),
    ],
)
def test_what_cannot_resolve_is_named(var: dict[str, Any], message: str) -> None:
    with pytest.raises(DevClusterError, match=message):
        container_env(_deployment(var), {})


def test_no_such_container_is_named() -> None:
    deployment = _deployment()
    deployment["spec"]["template"]["spec"]["containers"][0]["name"] = "other"
    with pytest.raises(DevClusterError, match="no container 'open-webui'"):
        container_env(deployment, {})


def test_localized_keeps_the_path_and_replaces_host_and_data() -> None:
    env = {"OPENAI_API_BASE_URL": "http://llama.llm.svc:8000/v1", "DATA_DIR": "/app", "X": "y"}
    assert localized(env, front_door="http://127.0.0.1:4242/", data_dir=Path("/tmp/d")) == {
        "OPENAI_API_BASE_URL": "http://127.0.0.1:4242/v1",
        "DATA_DIR": "/tmp/d",
        "X": "y",
    }


def test_the_venv_key_is_the_set_up_scripts() -> None:
    script = f"grep -v '^#' {REQUIREMENTS} | sha256sum | cut -c1-12"
    computed = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    assert requirements_key(REQUIREMENTS.read_text()) == computed.stdout.strip()
    assert requirements_key("# a comment\nopen-webui==1\n") == requirements_key("open-webui==1\n")
