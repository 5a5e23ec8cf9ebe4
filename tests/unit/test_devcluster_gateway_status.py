"""The dev cluster probes the rendered gateway pod as a kubelet would (issue 16 item 6).

The probes come from ``render_gateway``'s own Deployment: the admission container's
readiness probe is aimed at the local port the harness moved it to, the router (no
readiness probe) is ready while it runs, and the pod is Ready only when both are.
"""

from __future__ import annotations

from typing import Any

from sparkllm.gateway_settings import GATEWAY_HTTP_PORT
from sparkllm_dev.devcluster.gateway_status import (
    local_readiness_probe,
    pod_status_patch,
    started,
)
from sparkllm_dev.devcluster.kubelet import ContainerView
from tests.unit.test_render_gateway import container, pod_spec, render

NOW = "2026-12-01T17:00:00Z"
FRESH = ContainerView(running_since=None, ready=False, restart_count=0)


def _pod() -> dict[str, Any]:
    return {"metadata": {"name": "llm-gateway-x"}, "spec": pod_spec(render()), "status": {}}


def test_the_admission_probe_is_the_rendered_one_on_the_local_port() -> None:
    objects = render()
    admission = container(objects, "admission")
    declared = admission["readinessProbe"]
    assert declared["httpGet"]["path"] == "/health"  # render declares it (the item's check)
    probe = local_readiness_probe(
        _pod(), admission, host="127.0.0.1", ports={GATEWAY_HTTP_PORT: 41234}
    )
    assert probe is not None
    assert probe.url == "http://127.0.0.1:41234/health"
    assert (probe.timeout_seconds, probe.failure_threshold) == (
        declared["timeoutSeconds"],
        declared["failureThreshold"],
    )
    # a port the harness did not move stays as declared: nothing answers, never Ready
    unmoved = local_readiness_probe(_pod(), admission, host="127.0.0.1", ports={1: 2})
    assert unmoved is not None
    assert unmoved.url == f"http://127.0.0.1:{GATEWAY_HTTP_PORT}/health"
    router = container(objects, "router")
    assert "readinessProbe" not in router
    assert local_readiness_probe(_pod(), router, host="127.0.0.1", ports={}) is None


def test_ready_only_when_both_containers_are() -> None:
    router = started(FRESH, now=NOW, has_probe=False)
    assert router.ready  # no readiness probe: ready once running
    admission = started(FRESH, now=NOW, has_probe=True)
    assert not admission.ready  # until its probe passes
    status = pod_status_patch(_pod(), {"admission": admission, "router": router}, now=NOW)
    conditions = {c["type"]: c for c in status["status"]["conditions"]}
    assert conditions["Ready"]["status"] == "False"
    assert conditions["Ready"]["message"] == "containers with unready status: [admission]"
    ready = {s["name"]: s["ready"] for s in status["status"]["containerStatuses"]}
    assert ready == {"admission": False, "router": True}

    admission = ContainerView(running_since=NOW, ready=True, restart_count=0)
    status = pod_status_patch(_pod(), {"admission": admission, "router": router}, now=NOW)
    conditions = {c["type"]: c for c in status["status"]["conditions"]}
    assert conditions["Ready"]["status"] == conditions["ContainersReady"]["status"] == "True"
    assert [s["ready"] for s in status["status"]["containerStatuses"]] == [True, True]
