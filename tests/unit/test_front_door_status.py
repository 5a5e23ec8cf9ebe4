"""``status.frontDoor``: where clients reach an InferenceCluster, for each exposure type,
and that a pass writes it (``kubectl get icl -o wide`` shows its ``url``)."""

from __future__ import annotations

from typing import Any

import pytest

from sparkllm.api import validate_inference_cluster
from sparkllm.api.status import InferenceClusterStatus
from sparkllm.reconcile.decide import decide
from sparkllm.render.front_door import front_door_status
from tests.unit import reconcile_fixtures
from tests.unit.reconcile_fixtures import GATEWAY_IMAGE, serving
from tests.unit.test_render_exposure import INGRESS, ROUTE, TLS
from tests.unit.test_render_gateway import NAME, NAMESPACE, cluster

IN_CLUSTER = f"http://{NAME}.{NAMESPACE}.svc:8000"
WILDCARD_FIRST = {
    "type": "HTTPRoute",
    "httpRoute": {"parentRefs": [{"name": "public"}], "hostnames": ["*.example.com", "a.b.c"]},
}
ONLY_WILDCARD = {
    "type": "HTTPRoute",
    "httpRoute": {"parentRefs": [{"name": "public"}], "hostnames": ["*.example.com"]},
}
NO_HOSTNAMES = {"type": "HTTPRoute", "httpRoute": {"parentRefs": [{"name": "public"}]}}


@pytest.mark.parametrize(
    ("exposure", "cluster_url", "url"),
    [
        (None, IN_CLUSTER, IN_CLUSTER),
        (TLS, f"https://{NAME}.{NAMESPACE}.svc:8000", f"https://{NAME}.{NAMESPACE}.svc:8000"),
        (INGRESS, IN_CLUSTER, "https://llm.example.com"),
        (ROUTE, IN_CLUSTER, "https://llm.example.com"),
        (WILDCARD_FIRST, IN_CLUSTER, "https://a.b.c"),
        (ONLY_WILDCARD, IN_CLUSTER, IN_CLUSTER),  # no one host to name
        (NO_HOSTNAMES, IN_CLUSTER, IN_CLUSTER),  # the Gateway's listeners: not in the spec
    ],
)
def test_the_front_door_is_named_for_every_exposure(
    exposure: dict[str, Any] | None, cluster_url: str, url: str
) -> None:
    ic = cluster(exposure=exposure) if exposure is not None else cluster()
    assert front_door_status(ic) == {
        "service": NAME,
        "port": 8000,
        "clusterURL": cluster_url,
        "url": url,
    }


def test_a_pass_writes_the_front_door_and_the_restarts() -> None:
    """From the first pass on (the Service is made in that pass), and kept once serving."""
    obj = reconcile_fixtures.cluster()
    first = decide(reconcile_fixtures.observation(obj), gateway_image=GATEWAY_IMAGE).status
    assert first is not None
    ic = validate_inference_cluster(obj)
    assert first["frontDoor"] == front_door_status(ic)
    assert (
        first["frontDoor"]["url"] == f"http://{ic.metadata.name}.{ic.metadata.namespace}.svc:8000"
    )
    assert first["restarts"] == 0
    settled = serving()
    assert settled.obj is not None
    status = settled.obj["status"]
    assert status["frontDoor"] == first["frontDoor"]
    assert status["restarts"] == sum(r["restarts"] for r in status["replicaStatuses"])
    assert decide(settled, gateway_image=GATEWAY_IMAGE).status is None  # no second write
    InferenceClusterStatus.model_validate(status)  # the CRD's status schema holds it
