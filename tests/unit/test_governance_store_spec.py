"""spec.gateway: replicas and the shared governance store, from the spec to the gateway.

Pinned: the default stays one replica with state in the process (and renders as before:
no governance store setting at all); more than one replica without Redis is refused
with a message naming the fix; a Redis spec reaches the gateway as settings its own
config loader accepts, with the password only as a secretKeyRef and a key prefix per
InferenceCluster; the store the gateway then opens is the one configured; and status
says where the state lives.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest

from sparkllm.api import InferenceClusterStatus, validate_inference_cluster
from sparkllm.errors import GatewayError, SpecError
from sparkllm.gateway.config import load_gateway_config
from sparkllm.gateway.governance.redis_store import RedisStore, open_store
from sparkllm.gateway.governance.store import MemoryStore
from sparkllm.gateway_settings import env_var_name
from sparkllm.reconcile.decide import decide
from sparkllm.render.gateway import admission_env, render_gateway
from sparkllm.render.product_image import ProductImage
from sparkllm.render.ranks import EngineKeyRef
from tests.unit import reconcile_fixtures

ENGINE_KEY = EngineKeyRef(secret="llm-engine-key", key="token")
REDIS = {
    "address": "redis.governance.svc:6380",
    "passwordSecretRef": {"name": "redis-auth"},
    "database": 3,
}
BASE: dict[str, Any] = {
    "apiVersion": "sparkllm.io/v1alpha1",
    "kind": "InferenceCluster",
    "metadata": {"name": "llm", "namespace": "serving", "uid": "uid-1"},
    "spec": {
        "model": {"path": "/models/m", "servedName": "m"},
        "engine": {"image": "nvcr.io/nvidia/sglang:26.07-py3", "pipelineParallel": 3},
        "admission": {"apiKeysSecretRef": {"name": "llm-user-keys"}},
    },
}


def manifest(gateway: dict[str, Any] | None = None) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    if gateway is not None:
        doc["spec"]["gateway"] = gateway
    return doc


def env_of(gateway: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    ic = validate_inference_cluster(manifest(gateway))
    return {e["name"]: e for e in admission_env(ic, engine_key=ENGINE_KEY)}


def deployment(gateway: dict[str, Any] | None) -> dict[str, Any]:
    ic = validate_inference_cluster(manifest(gateway))
    objects = render_gateway(ic, engine_key=ENGINE_KEY, gateway_image=ProductImage("img:1"))
    return next(obj for obj in objects if obj["kind"] == "Deployment")


def test_the_default_is_one_replica_with_state_in_process() -> None:
    assert deployment(None)["spec"]["replicas"] == 1
    assert not [name for name in env_of(None) if "GOVERNANCE_REDIS" in name]
    assert not [name for name in env_of(None) if "GOVERNANCE_KEY" in name]


@pytest.mark.parametrize("replicas", [2, 16])
def test_replicas_above_one_without_redis_are_refused_naming_the_fix(replicas: int) -> None:
    with pytest.raises(SpecError, match=r"gateway.replicas above 1 needs gateway.governanceStore"):
        validate_inference_cluster(manifest({"replicas": replicas}))


def test_replicas_with_redis_render_that_many_pods() -> None:
    gateway = {"replicas": 3, "governanceStore": {"redis": REDIS}}
    assert deployment(gateway)["spec"]["replicas"] == 3


@pytest.mark.parametrize("replicas", [0, 17])
def test_replicas_are_bounded(replicas: int) -> None:
    with pytest.raises(SpecError, match="replicas"):
        validate_inference_cluster(manifest({"replicas": replicas, "governanceStore": {}}))


@pytest.mark.parametrize(
    "address", ["redis", "redis.ns.svc.cluster.local:6379", "10.0.0.7:7000", "[fd00::7]:6379"]
)
def test_addresses_the_gateway_parses_are_accepted(address: str) -> None:
    env = env_of({"governanceStore": {"redis": {"address": address}}})
    assert env[env_var_name("governance_redis_address")]["value"] == address


@pytest.mark.parametrize("address", ["redis://redis:6379", "redis:", "re dis", "-redis", ""])
def test_malformed_addresses_are_refused(address: str) -> None:
    with pytest.raises(SpecError, match="address"):
        validate_inference_cluster(manifest({"governanceStore": {"redis": {"address": address}}}))


def test_redis_settings_reach_the_gateway_config_and_the_password_stays_a_reference() -> None:
    env = env_of({"replicas": 2, "governanceStore": {"redis": REDIS}})
    password = env[env_var_name("governance_redis_password")]
    assert "value" not in password
    assert password["valueFrom"] == {"secretKeyRef": {"name": "redis-auth", "key": "password"}}
    environ = {name: e.get("value", "from-the-secret") for name, e in env.items()}
    config = load_gateway_config([], environ=environ)
    assert config.governance_redis_address == "redis.governance.svc:6380"
    assert config.governance_redis_database == 3
    assert config.governance_key_prefix == "sparkllm:{serving/llm}"
    assert config.governance_redis_password is not None
    assert config.governance_redis_password.get_secret_value() == "from-the-secret"


def test_no_password_reference_means_no_password_variable() -> None:
    env = env_of({"governanceStore": {"redis": {"address": "redis"}}})
    assert env_var_name("governance_redis_password") not in env
    assert env_var_name("governance_redis_database") not in env  # database 0: the default


def _config(tmp_path: Path, **extra: str) -> Any:
    environ = {
        env_var_name("served_model_name"): "m",
        env_var_name("api_keys_dir"): str(tmp_path),
        env_var_name("tokenizer_dir"): str(tmp_path),
        **{env_var_name(name): value for name, value in extra.items()},
    }
    return load_gateway_config([], environ=environ)


def test_the_gateway_opens_the_store_it_is_configured_with(tmp_path: Path) -> None:
    async def opened(**extra: str) -> object:
        store = open_store(_config(tmp_path, **extra))
        await store.aclose()
        return store

    assert isinstance(asyncio.run(opened()), MemoryStore)
    redis_store = asyncio.run(opened(governance_redis_address="127.0.0.1:6390"))
    assert isinstance(redis_store, RedisStore)
    assert redis_store.shared


def test_a_malformed_address_in_the_gateway_config_is_named(tmp_path: Path) -> None:
    with pytest.raises(GatewayError, match=r"governance_redis_address: .*invalid Redis address"):
        _config(tmp_path, governance_redis_address="redis:port")


@pytest.mark.parametrize(
    ("gateway", "expected", "said"),
    [
        ({}, {"replicas": 1, "governanceStore": "InProcess"}, "lost when the gateway restarts"),
        (
            {"replicas": 2, "governanceStore": {"redis": REDIS}},
            {"replicas": 2, "governanceStore": "Redis"},
            "shared by the 2 gateway replica(s) and survive restarts",
        ),
    ],
)
def test_status_says_where_governance_state_lives(
    gateway: dict[str, Any], expected: dict[str, Any], said: str
) -> None:
    """Through decide, as the operator writes it: status.gateway, valid against the API."""
    obj = reconcile_fixtures.cluster(gateway=gateway)
    plan = decide(reconcile_fixtures.observation(obj), gateway_image=ProductImage("img:1"))
    assert plan.status is not None
    status = plan.status["gateway"]
    assert {k: status[k] for k in expected} == expected
    assert said in status["message"]
    InferenceClusterStatus.model_validate(plan.status)  # the CRD's status schema's source
