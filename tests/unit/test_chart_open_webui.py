"""The chart's optional Open WebUI (``openWebUI.*``): off by default; when on, wired to one
InferenceCluster's front door with the front-end key and forwarded user headers, its
image pinned to the release the browser test runs, its data on a PVC, schema-valid.

The browser test (tests/e2e/test_open_webui.py) runs this very Deployment's environment;
these pin what the chart renders without a cluster (helm, and kubeconform for the
objects' schemas).
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest

from sparkllm_dev.devcluster.open_webui import REQUIREMENTS, container_env
from tests.unit.test_chart_kubeconform import kubeconform, summary
from tests.unit.test_chart_render import CHART, find, one, render_chart, run_helm, values_file

pytestmark = pytest.mark.needs_binary  # helm, kubeconform and its schemas (make binaries)
KEY = ("webui-key", "token")
ON: dict[str, Any] = {
    "openWebUI": {
        "enabled": True,
        "frontDoor": {"inferenceCluster": "llama", "namespace": "llm"},
        "apiKeySecretRef": {"name": KEY[0], "key": KEY[1]},
    }
}
SECRETS = {KEY: "the-front-end-key", ("webui-session", "k"): "signing"}


def _open_webui(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        o
        for o in objs
        if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "open-webui"
    ]


def _env(values: dict[str, Any]) -> dict[str, str]:
    deployment = one(render_chart(values, namespace="llm"), "Deployment", "sparkllm-open-webui")
    return container_env(deployment, SECRETS)


def _with(**fields: Any) -> dict[str, Any]:
    return {"openWebUI": {**ON["openWebUI"], **fields}}


def test_off_by_default() -> None:
    assert _open_webui(render_chart()) == []


def test_wired_to_the_front_door_with_the_front_end_key_and_forwarded_users() -> None:
    env = _env(ON)
    assert env["OPENAI_API_BASE_URL"] == "http://llama.llm.svc:8000/v1"
    assert env["OPENAI_API_KEY"] == "the-front-end-key"  # from the Secret, never inline
    assert env["ENABLE_FORWARD_USER_INFO_HEADERS"] == "true"
    assert env["ENABLE_OLLAMA_API"] == "false"
    # Sign-in on, and only the admin adds accounts, which wait for approval, by default.
    assert (env["WEBUI_AUTH"], env["ENABLE_SIGNUP"], env["DEFAULT_USER_ROLE"]) == (
        "true",
        "false",
        "pending",
    )
    # No model downloads at start (offline by default).
    assert env["OFFLINE_MODE"] == "true"
    assert env["HF_HUB_OFFLINE"] == "1"
    for switch in ("RAG_EMBEDDING", "RAG_RERANKING", "WHISPER"):
        assert env[f"{switch}_MODEL_AUTO_UPDATE"] == "false"
    assert env["DATA_DIR"] == "/app/backend/data"
    # No built-in tools sent with every chat (thousands of tokens each time).
    assert json.loads(env["DEFAULT_MODEL_METADATA"]) == {"capabilities": {"builtin_tools": False}}


def test_url_override_namespace_default_and_login_choices() -> None:
    same_namespace = {"inferenceCluster": "llama", "namespace": "", "url": ""}
    assert _env(_with(frontDoor=same_namespace))["OPENAI_API_BASE_URL"] == (
        "http://llama.llm.svc:8000/v1"
    )
    tls = {"inferenceCluster": "", "namespace": "", "url": "https://llm.example.com/v1"}
    assert _env(_with(frontDoor=tls))["OPENAI_API_BASE_URL"] == "https://llm.example.com/v1"
    env = _env(
        _with(
            enableSignup=True,
            defaultUserRole="user",
            defaultModel="llama-70b",
            shareModelWithAllUsers=False,
            offline=False,
            builtinTools=True,
            secretKeySecretRef={"name": "webui-session", "key": "k"},
            env=[{"name": "ENABLE_TITLE_GENERATION", "value": "false"}],
        )
    )
    assert env["WEBUI_SECRET_KEY"] == "signing"
    assert (env["ENABLE_SIGNUP"], env["DEFAULT_USER_ROLE"]) == ("true", "user")
    assert env["DEFAULT_MODELS"] == "llama-70b"
    assert env["BYPASS_MODEL_ACCESS_CONTROL"] == "false"
    assert env["ENABLE_TITLE_GENERATION"] == "false"
    assert "OFFLINE_MODE" not in env
    assert "DEFAULT_MODEL_METADATA" not in env  # builtinTools: true below


def test_the_image_is_the_release_the_browser_test_runs() -> None:
    pinned = re.search(r"^open-webui==(\S+)$", REQUIREMENTS.read_text(), re.M)
    assert pinned
    deployment = one(render_chart(ON), "Deployment", "sparkllm-open-webui")
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"ghcr.io/open-webui/open-webui:v{pinned.group(1)}"


def test_one_pod_on_its_claim() -> None:
    objs = render_chart(ON)
    deployment = one(objs, "Deployment", "sparkllm-open-webui")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}  # SQLite: one writer
    claim = one(objs, "PersistentVolumeClaim", "sparkllm-open-webui")
    assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"
    volume = deployment["spec"]["template"]["spec"]["volumes"][0]
    assert volume["persistentVolumeClaim"] == {"claimName": "sparkllm-open-webui"}
    service = one(objs, "Service", "sparkllm-open-webui")
    assert service["spec"]["ports"][0]["port"] == 8080

    existing = _pod_volume(enabled=True, existing_claim="mine")
    assert existing == (False, {"persistentVolumeClaim": {"claimName": "mine"}})
    assert _pod_volume(enabled=False, existing_claim="") == (False, {"emptyDir": {}})


def _pod_volume(*, enabled: bool, existing_claim: str) -> tuple[bool, dict[str, Any]]:
    """(a claim is rendered, the data volume's source) for these persistence values."""
    persistence = {"enabled": enabled, "size": "1Gi", "storageClassName": "",
                   "existingClaim": existing_claim}  # fmt: skip
    objs = render_chart(_with(persistence=persistence))
    volume = dict(one(objs, "Deployment")["spec"]["template"]["spec"]["volumes"][0])
    volume.pop("name")
    return bool(find(objs, "PersistentVolumeClaim")), volume


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"apiKeySecretRef": {"name": "", "key": ""}},
            "openWebUI.apiKeySecretRef.name is required",
        ),
        (
            {"apiKeySecretRef": {"name": "k", "key": ""}},
            "openWebUI.apiKeySecretRef.key is required",
        ),
        (
            {"frontDoor": {"inferenceCluster": "", "namespace": "", "url": ""}},
            "openWebUI.frontDoor.inferenceCluster",
        ),
        (
            {
                "image": {
                    "repository": "ghcr.io/open-webui/open-webui",
                    "tag": "main",
                    "pullPolicy": "IfNotPresent",
                }
            },
            "tag",
        ),
        ({"defaultUserRole": "root"}, "defaultUserRole"),
    ],
)
def test_wrong_values_fail_naming_them(fields: dict[str, Any], message: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        result = run_helm(
            "template", "x", str(CHART), "-f", values_file(_with(**fields), tmp), check=False
        )
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


def test_its_objects_are_schema_valid() -> None:
    everything = _with(
        secretKeySecretRef={"name": "webui-session", "key": "k"},
        defaultModel="llama-70b",
        env=[{"name": "ENABLE_TITLE_GENERATION", "value": "false"}],
    )
    docs = _open_webui(render_chart(everything))
    assert sorted(d["kind"] for d in docs) == ["Deployment", "PersistentVolumeClaim", "Service"]
    with tempfile.TemporaryDirectory() as no_crds:
        code, output = kubeconform(docs, Path(no_crds))
    assert code == 0, output
    assert summary(output) == {"valid": 3, "invalid": 0, "errors": 0, "skipped": 0}
