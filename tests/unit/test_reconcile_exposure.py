"""A spec.exposure whose CRDs the cluster lacks is a status, not a failed pass (issue 21).

Each test builds what one pass observes: the observation records the optional kinds the
API server does not serve (HTTPRoute without the Gateway API, InferencePool without the
Inference Extension), and decide leaves those objects out, reports ``Exposed=False``
(reason ``APINotServed``, naming the API and the CRDs to install) with one Warning
Event, and writes the rest of the status as usual; once served, the object is planned
and ``Exposed`` turns True.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from sparkllm.api import Reason, validate_inference_cluster
from sparkllm.kube.kinds import Kind
from sparkllm.reconcile.decide import decide
from sparkllm.reconcile.decide.actions import Plan
from sparkllm.reconcile.decide.observation import Observation
from sparkllm.reconcile.observe import absent_apis
from tests.unit.reconcile_fixtures import GATEWAY_IMAGE, cluster, serving, with_status

JSON = dict[str, Any]
ROUTE = {"type": "HTTPRoute", "httpRoute": {"parentRefs": [{"name": "public"}]}}
POOL = {"inferencePool": {"endpointPicker": {"name": "llm-epp"}}}
ROUTE_API = ("gateway.networking.k8s.io/v1", "HTTPRoute")
POOL_API = ("inference.networking.k8s.io/v1", "InferencePool")


def run(obs: Observation) -> Plan:
    return decide(obs, gateway_image=GATEWAY_IMAGE)


def exposed(plan: Plan) -> JSON | None:
    assert plan.status is not None
    found = [c for c in plan.status["conditions"] if c["type"] == "Exposed"]
    return found[0] if found else None


def kinds(plan: Plan) -> list[str]:
    return [o["kind"] for o in plan.apply]


def test_a_route_without_the_gateway_api_is_not_planned_and_status_says_why() -> None:
    obs = serving(exposure=ROUTE)
    assert "HTTPRoute" in kinds(run(obs))  # served: the route is planned
    plan = run(replace(obs, absent_apis=frozenset({ROUTE_API})))
    assert "HTTPRoute" not in kinds(plan)
    cond = exposed(plan)
    assert cond is not None
    assert (cond["status"], cond["reason"]) == ("False", "APINotServed")
    assert "HTTPRoute (gateway.networking.k8s.io/v1)" in cond["message"]
    assert "install the Gateway API CRDs" in cond["message"]
    warnings = [e for e in plan.events if e.reason is Reason.API_NOT_SERVED]
    assert len(warnings) == 1
    assert warnings[0].warning
    assert warnings[0].message == cond["message"]
    # The rest of the status is written as usual: the replica still serves.
    assert plan.status is not None
    assert plan.status["phase"] == "Ready"
    # The next pass repeats neither the Event nor the status write.
    again = run(with_status(replace(obs, absent_apis=frozenset({ROUTE_API})), plan.status))
    assert again.status is None
    assert not [e for e in again.events if e.warning]


def test_a_pool_without_the_inference_extension_names_its_crds() -> None:
    obs = replace(serving(exposure={**ROUTE, **POOL}), absent_apis=frozenset({POOL_API}))
    plan = run(obs)
    assert "InferencePool" not in kinds(plan)
    cond = exposed(plan)
    assert cond is not None
    assert cond["status"] == "False"
    assert "InferencePool (inference.networking.k8s.io/v1)" in cond["message"]
    assert "Gateway API Inference Extension CRDs" in cond["message"]
    assert "HTTPRoute" not in cond["message"]


def test_exposed_turns_true_once_the_crds_are_installed() -> None:
    obs = serving(exposure=ROUTE)
    missing = run(replace(obs, absent_apis=frozenset({ROUTE_API})))
    plan = run(with_status(obs, missing.status))
    assert "HTTPRoute" in kinds(plan)
    cond = exposed(plan)
    assert cond is not None
    assert (cond["status"], cond["reason"]) == ("True", "APIServed")


def test_no_exposed_condition_while_nothing_was_ever_missing() -> None:
    obs = serving(exposure={**ROUTE, **POOL})  # settled: passes with every API served
    assert obs.obj is not None
    assert "Exposed" not in [c["type"] for c in obs.obj["status"]["conditions"]]


class DiscoveryOnly:
    """Answers API discovery like a cluster with the given kinds' CRDs installed."""

    def __init__(self, served: set[str]) -> None:
        self.served = served
        self.asked: list[str] = []

    async def kind_served(self, kind: Kind) -> bool:
        self.asked.append(kind.kind)
        return kind.kind in self.served


def test_observe_records_the_optional_kinds_the_cluster_does_not_serve() -> None:
    ic = validate_inference_cluster(cluster(exposure={**ROUTE, **POOL}))
    api = DiscoveryOnly(served={"HTTPRoute"})
    absent = asyncio.run(absent_apis(api, ic))  # type: ignore[arg-type]
    assert absent == frozenset({POOL_API})
    assert sorted(api.asked) == ["HTTPRoute", "InferencePool"]
    # Ingress is core networking.k8s.io/v1 (always served); ClusterIP needs nothing.
    for exposure in (
        {"type": "ClusterIP"},
        {"type": "Ingress", "ingress": {"host": "h", "tlsSecretName": "t"}},
    ):
        quiet = DiscoveryOnly(served=set())
        ic = validate_inference_cluster(cluster(exposure=exposure))
        assert asyncio.run(absent_apis(quiet, ic)) == frozenset()  # type: ignore[arg-type]
        assert quiet.asked == []
