"""Secret references stay in their lane (issue 25 item 5).

A spec may name, for a use that hands the value on (rank 0's engine key, the Redis
password the gateway sends to the spec's address), only a Secret whose owner labelled it
``sparkllm.io/secret-use=<that use>``. Pure rules first; then a whole pass against the
shell's in-memory API: an unlabelled Secret makes the object InvalidSpec (Ready=False, a
Warning Event naming the field) before any Secret's value is read or sent to rank 0.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any, cast

import pytest

from sparkllm.api import validate_inference_cluster
from sparkllm.api.secret_refs import SecretReference, SecretUse, lane_problem, laned_references
from sparkllm.keys import SECRET_USE_LABEL
from sparkllm.kube.client import KubeAPI
from sparkllm.reconcile.decide import decide
from sparkllm.reconcile.engines import Engines, RunningRequests
from sparkllm.reconcile.observe import observe
from tests.unit.reconcile_fixtures import GATEWAY_IMAGE, NOW, cluster
from tests.unit.test_reconcile_shell import Probe, RecordingAPI, serving_objects

ENGINE_REF = SecretReference("spec.engine.apiKeySecretRef", "theirs", SecretUse.ENGINE_API_KEY)
REDIS = {"address": "redis.example:6379", "passwordSecretRef": {"name": "auth"}}


def test_the_laned_references_of_a_spec() -> None:
    plain = validate_inference_cluster(cluster())
    assert laned_references(plain.spec) == ()  # the generated key is the operator's own
    named = cluster(
        engine={"apiKeySecretRef": {"name": "mine", "key": "k"}},
        gateway={"governanceStore": {"redis": REDIS}},
    )
    refs = laned_references(validate_inference_cluster(named).spec)
    assert [(r.field, r.name, r.use.value) for r in refs] == [
        ("spec.engine.apiKeySecretRef", "mine", "engine-api-key"),
        (
            "spec.gateway.governanceStore.redis.passwordSecretRef",
            "auth",
            "governance-redis-password",
        ),
    ]


@pytest.mark.parametrize(
    ("labels", "problem"),
    [
        (None, None),  # absent: reported missing by the pass, not judged here
        ({SECRET_USE_LABEL: "engine-api-key"}, None),
        ({}, "Secret theirs is not marked for use as engine-api-key"),
        ({"app": "db"}, "is not marked"),
        (
            {SECRET_USE_LABEL: "governance-redis-password"},
            "is marked for 'governance-redis-password', not for use as engine-api-key",
        ),
    ],
)
def test_lane_problem(labels: dict[str, str] | None, problem: str | None) -> None:
    found = lane_problem(ENGINE_REF, labels)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert found.startswith("spec.engine.apiKeySecretRef: ")
        assert problem in found
        assert found.endswith(f"label it {SECRET_USE_LABEL}=engine-api-key")


def _user_keyed(labels: dict[str, str]) -> list[Any]:
    objects = serving_objects()
    obj = objects[0]
    obj["spec"]["engine"]["apiKeySecretRef"] = {"name": "theirs", "key": "password"}
    secret = {
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "theirs", "namespace": "llm", "labels": labels},
        "data": {"password": base64.b64encode(b"another-apps-password").decode()},
    }  # fmt: skip
    return [*objects, secret]


def _pass(objects: list[Any]) -> tuple[Any, Any, Probe, RecordingAPI]:
    api = RecordingAPI(objects)
    probe = Probe()
    engines = Engines(config_probe=probe, running_requests=RunningRequests())
    key = ("llm", "llm")
    obs = asyncio.run(observe(cast(KubeAPI, api), key, engines=engines, clock=lambda: NOW))
    return obs, decide(obs, gateway_image=GATEWAY_IMAGE), probe, api


def test_an_unmarked_secret_is_invalid_spec_before_its_value_is_read() -> None:
    obs, plan, probe, api = _pass(_user_keyed({"app": "billing"}))
    assert obs.engine_key is None  # its value was never read
    assert probe.endpoints == []  # nothing sent to rank 0
    assert ("get", "Secret/theirs") in api.calls
    assert plan.status is not None
    assert plan.status["phase"] == "Failed"
    ready = next(c for c in plan.status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert "spec.engine.apiKeySecretRef: Secret theirs is not marked" in ready["message"]
    (event,) = plan.events
    assert (event.warning, event.reason) == (True, "InvalidSpec")
    assert event.message == ready["message"]
    assert plan.apply == ()


def test_a_marked_secret_is_used() -> None:
    obs, plan, probe, _ = _pass(_user_keyed({SECRET_USE_LABEL: "engine-api-key"}))
    assert obs.spec_error is None
    assert obs.engine_key is not None
    assert obs.engine_key.value == "another-apps-password"
    assert probe.endpoints == ["http://10.0.0.10:30000"]
    assert plan.status is not None
    assert plan.status["phase"] != "Failed"
