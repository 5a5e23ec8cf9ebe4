"""The Argo CD health check for InferenceCluster, run by the interpreter Argo CD embeds.

Argo CD evaluates custom health checks with gopher-lua (Lua 5.1): the object is the
global ``obj`` and the chunk returns ``{status=..., message=...}``. These tests run
``manifests/argocd/health-inferencecluster.lua`` the same way with gopher-lua's ``glua``
(built from the Go module proxy: ``GOBIN=<bin dir> go install
github.com/yuin/gopher-lua/cmd/glua@v1.1.2``); a missing glua skips locally and fails
under CI=true.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.test_chart_render import ROOT, require_binary

SCRIPT = ROOT / "manifests" / "argocd" / "health-inferencecluster.lua"
CONFIGMAP_PATCH = ROOT / "manifests" / "argocd" / "argocd-cm-health.yaml"
HEALTH_KEY = "resource.customizations.health.sparkllm.io_InferenceCluster"


def lua_literal(value: Any) -> str:
    """A Lua table constructor for a JSON-like value (how Argo CD hands ``obj`` over)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "nil"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{escaped}"'
    if isinstance(value, list):
        return "{" + ", ".join(lua_literal(v) for v in value) + "}"
    if isinstance(value, dict):
        items = (f"[{lua_literal(str(k))}] = {lua_literal(v)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    raise TypeError(f"not JSON-like: {value!r}")


def health(obj: dict[str, Any]) -> tuple[str, str]:
    glua = require_binary(
        "glua", how="GOBIN=<bin dir> go install github.com/yuin/gopher-lua/cmd/glua@v1.1.2"
    )
    harness = (
        f"obj = {lua_literal(obj)}\n"
        f"local check = assert(loadfile({lua_literal(str(SCRIPT))}))\n"
        "local hs = check()\n"
        'io.write(hs.status, "\\n", hs.message or "")\n'
    )
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as fh:
        fh.write(harness)
    try:
        result = subprocess.run(
            [str(glua), fh.name], capture_output=True, text=True, timeout=30, check=False
        )
    finally:
        Path(fh.name).unlink()
    assert result.returncode == 0, result.stderr
    status, _, message = result.stdout.partition("\n")
    return status, message


def cluster(*, generation: int = 2, status: dict[str, Any] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "sparkllm.io/v1alpha1",
        "kind": "InferenceCluster",
        "metadata": {"name": "m", "namespace": "llm", "generation": generation},
        "spec": {"replicas": 1},
    }
    if status is not None:
        obj["status"] = status
    return obj


def cond(kind: str, status: str, reason: str = "R", message: str = "") -> dict[str, str]:
    return {"type": kind, "status": status, "reason": reason, "message": message}


def observed(phase: str, *conditions: dict[str, str], generation: int = 2) -> dict[str, Any]:
    return {
        "observedGeneration": generation,
        "phase": phase,
        "replicas": 1,
        "readyReplicas": 1 if phase == "Ready" else 0,
        "conditions": list(conditions),
    }


CASES = [
    ("no status yet", cluster(), "Progressing", "generation 2"),
    (
        "old generation, even if Ready",
        cluster(status=observed("Ready", cond("Ready", "True"), generation=1)),
        "Progressing",
        "generation 2",
    ),
    (
        "ready for this generation",
        cluster(status=observed("Ready", cond("Ready", "True", message="1/1 replicas"))),
        "Healthy",
        "1/1 replicas",
    ),
    (
        "ready without a message",
        cluster(status=observed("Ready", cond("Ready", "True"))),
        "Healthy",
        "1 of 1 replicas ready",
    ),
    (
        "starting",
        cluster(status=observed("Starting", cond("Ready", "False", message="loading"))),
        "Progressing",
        "Starting: loading",
    ),
    (
        "restarting",
        cluster(status=observed("Restarting", cond("Progressing", "True"))),
        "Progressing",
        "Restarting",
    ),
    (
        "invalid spec",
        cluster(status=observed("Failed", cond("Ready", "False", message="bad layerPartition"))),
        "Degraded",
        "bad layerPartition",
    ),
    (
        "restart budget spent",
        cluster(
            status=observed(
                "Degraded",
                cond("Ready", "False"),
                cond("Degraded", "True", "RestartBudgetExhausted", "replica 0 gave up"),
            )
        ),
        "Degraded",
        "replica 0 gave up",
    ),
    (
        "cannot progress",
        cluster(
            status=observed(
                "Pending",
                cond("Progressing", "False", "InsufficientNodeGroups", "no free group"),
            )
        ),
        "Degraded",
        "InsufficientNodeGroups: no free group",
    ),
    ("status without conditions", cluster(status={"observedGeneration": 2}), "Progressing", ""),
    (
        "scaled to zero: stopped on purpose, neither healthy nor degraded",
        cluster(
            status=observed(
                "Stopped",
                cond("Ready", "False", "ScaledToZero", "spec.replicas is 0"),
                cond("Progressing", "False", "Reconciled", "desired state reached"),
            )
        ),
        "Suspended",
        "Stopped: spec.replicas is 0",
    ),
    (
        "stopped but the spec changed since: waiting for the operator",
        cluster(status=observed("Stopped", cond("Ready", "False"), generation=1)),
        "Progressing",
        "generation 2",
    ),
    (
        "node group held by another object",
        cluster(
            status=observed(
                "Degraded",
                cond("Ready", "False"),
                cond("Progressing", "False", "NodeGroupInUse", "in use by llm/other"),
                cond("Degraded", "True", "NodeGroupInUse", "in use by llm/other"),
            )
        ),
        "Degraded",
        "in use by llm/other",
    ),
]


@pytest.mark.needs_binary  # glua
@pytest.mark.parametrize(
    ("obj", "want_status", "want_in_message"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_health(obj: dict[str, Any], want_status: str, want_in_message: str) -> None:
    status, message = health(obj)
    assert status == want_status, message
    assert want_in_message in message


def test_the_argocd_configmap_patch_carries_the_same_script() -> None:
    patch = yaml.safe_load(CONFIGMAP_PATCH.read_text())
    assert patch["data"][HEALTH_KEY] == SCRIPT.read_text()
