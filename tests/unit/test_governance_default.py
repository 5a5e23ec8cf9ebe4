"""The chart's default governance store (values governance.redis, issue 17 item 5): the
operator's env, parsed once; handed to decide with the operator's other settings, which
fills it into specs that name no store (the spec wins); seen in the rendered gateway and
in status.gateway, which says where the store came from; a bad value is one clear error
at start."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, cast

import pytest

from sparkllm.api.governance_store import RedisStoreSpec, gateway_status
from sparkllm.api.status import InferenceClusterStatus
from sparkllm.cli import main
from sparkllm.errors import SparkllmError
from sparkllm.gateway_settings import env_var_name
from sparkllm.kube.client import KubeAPI
from sparkllm.kube.kinds import JSON
from sparkllm.reconcile.decide import decide
from sparkllm.reconcile.reconciler import ClusterReconciler
from sparkllm.render.gateway import admission_env
from sparkllm.render.governance_default import (
    ADDRESS_ENV,
    DATABASE_ENV,
    PASSWORD_KEY_ENV,
    PASSWORD_SECRET_ENV,
    governance_default_from,
    with_governance_default,
)
from tests.unit import reconcile_fixtures
from tests.unit.reconcile_fixtures import GATEWAY_IMAGE, NOW
from tests.unit.test_reconcile_shell import Probe, RecordingAPI, serving_objects
from tests.unit.test_render_gateway import ENGINE_KEY, cluster

DEFAULT_ENV = {
    ADDRESS_ENV: "redis.shared.svc:6380",
    PASSWORD_SECRET_ENV: "redis-auth",
    PASSWORD_KEY_ENV: "pw",
    DATABASE_ENV: "4",
}
ADDRESS = env_var_name("governance_redis_address")
PASSWORD = env_var_name("governance_redis_password")
DATABASE = env_var_name("governance_redis_database")


def env_of(ic: Any) -> dict[str, JSON]:
    return {e["name"]: e for e in admission_env(ic, engine_key=ENGINE_KEY)}


def default() -> RedisStoreSpec:
    store = governance_default_from(DEFAULT_ENV)
    assert store is not None
    return store


def test_no_address_means_no_default() -> None:
    assert governance_default_from({}) is None
    assert governance_default_from({ADDRESS_ENV: " ", PASSWORD_SECRET_ENV: "x"}) is None


def test_the_env_becomes_the_store_with_the_specs_defaults() -> None:
    store = default()
    assert store.address == "redis.shared.svc:6380"
    assert store.database == 4
    assert store.password_secret_ref is not None
    assert (store.password_secret_ref.name, store.password_secret_ref.key) == ("redis-auth", "pw")
    bare = governance_default_from({ADDRESS_ENV: "redis"})
    assert bare == RedisStoreSpec(address="redis")  # no password, database 0
    keyless = governance_default_from({ADDRESS_ENV: "redis", PASSWORD_SECRET_ENV: "auth"})
    assert keyless is not None
    assert keyless.password_secret_ref is not None
    assert keyless.password_secret_ref.key == "password"


@pytest.mark.parametrize(
    "environ",
    [
        {ADDRESS_ENV: "redis://redis:6379"},
        {ADDRESS_ENV: "redis", DATABASE_ENV: "256"},
        {ADDRESS_ENV: "redis", DATABASE_ENV: "one"},
        {ADDRESS_ENV: "redis", PASSWORD_SECRET_ENV: "Not_A_Name"},
    ],
    ids=["url", "database-range", "database-word", "secret-name"],
)
def test_a_bad_value_is_an_error_naming_the_variables(environ: Mapping[str, str]) -> None:
    with pytest.raises(SparkllmError, match=ADDRESS_ENV) as raised:
        governance_default_from(environ)
    message = str(raised.value)
    assert "invalid" in message
    field = (
        "name"
        if PASSWORD_SECRET_ENV in environ
        else ("database" if DATABASE_ENV in environ else "address")
    )
    assert f": {field}" in message  # the one field at fault, as `path: reason`
    assert "errors.pydantic.dev" not in message
    assert "invalid literal" not in message


def test_a_bad_value_stops_sparkllm_run_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(ADDRESS_ENV, "redis://redis:6379")
    assert main(["run", "--metrics-port", "0"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("sparkllm: error: the default governance store")
    assert "Traceback" not in err


def test_without_a_default_the_gateway_keeps_state_in_process() -> None:
    ic = cluster()
    assert with_governance_default(ic, None) is ic
    env = env_of(ic)
    assert ADDRESS not in env
    assert PASSWORD not in env
    assert gateway_status(ic.spec.gateway)["governanceStore"] == "InProcess"


def test_the_default_fills_a_spec_naming_no_store() -> None:
    ic = with_governance_default(cluster(), default())
    env = env_of(ic)
    assert env[ADDRESS]["value"] == "redis.shared.svc:6380"
    assert env[DATABASE]["value"] == "4"
    assert env[PASSWORD]["valueFrom"] == {"secretKeyRef": {"name": "redis-auth", "key": "pw"}}
    status = gateway_status(ic.spec.gateway, from_default=True)
    assert status["governanceStore"] == "Redis"
    assert status["storeSource"] == "OperatorDefault"
    assert "redis.shared.svc:6380" in status["message"]
    assert "the operator's default store" in status["message"]


def test_the_specs_store_wins() -> None:
    own = {"redis": {"address": "redis.mine.svc", "passwordSecretRef": {"name": "mine"}}}
    ic = cluster(gateway={"governanceStore": own})
    assert with_governance_default(ic, default()) is ic
    env = env_of(ic)
    assert env[ADDRESS]["value"] == "redis.mine.svc"
    assert env[PASSWORD]["valueFrom"]["secretKeyRef"] == {"name": "mine", "key": "password"}
    assert DATABASE not in env


class CapturingAPI(RecordingAPI):
    """RecordingAPI that keeps what a pass applied."""

    def __init__(self, objects: list[JSON]) -> None:
        super().__init__(objects)
        self.applied: list[JSON] = []

    async def apply(self, obj: Mapping[str, Any]) -> JSON:
        self.applied.append(dict(obj))
        return await super().apply(obj)


def admission_of(applied: list[JSON]) -> dict[str, JSON]:
    (deployment,) = [o for o in applied if o["kind"] == "Deployment"]
    containers = deployment["spec"]["template"]["spec"]["containers"]
    admission = next(c for c in containers if c["name"] == "admission")
    return {e["name"]: e for e in admission["env"]}


def test_the_operators_pass_renders_and_reports_the_default() -> None:
    api = CapturingAPI(serving_objects())
    reconciler = ClusterReconciler(
        cast(KubeAPI, api), gateway_image=GATEWAY_IMAGE, governance_default=default(),
        clock=lambda: NOW,
    )  # fmt: skip
    reconciler.config_probe = Probe()
    asyncio.run(reconciler.reconcile(("llm", "llm")))
    assert admission_of(api.applied)[ADDRESS]["value"] == "redis.shared.svc:6380"
    assert api.status is not None
    assert api.status["gateway"]["governanceStore"] == "Redis"
    assert api.status["gateway"]["storeSource"] == "OperatorDefault"


@pytest.mark.parametrize(
    ("gateway", "source", "address", "said"),
    [
        ({}, "OperatorDefault", "redis.shared.svc:6380", "chart value governance.redis"),
        (
            {"governanceStore": {"redis": {"address": "redis.mine.svc"}}},
            "Spec",
            "redis.mine.svc",
            "from spec.gateway.governanceStore.redis",
        ),
    ],
    ids=["default", "spec-wins"],
)
def test_decide_acts_on_the_default_and_status_says_where_it_came_from(
    gateway: dict[str, Any], source: str, address: str, said: str
) -> None:
    obj = reconcile_fixtures.cluster(gateway=gateway)
    observation = reconcile_fixtures.observation(obj)
    plan = decide(observation, gateway_image=GATEWAY_IMAGE, governance_default=default())
    assert plan.status is not None
    status = plan.status["gateway"]
    assert (status["governanceStore"], status["storeSource"]) == ("Redis", source)
    assert address in status["message"]
    assert said in status["message"]
    InferenceClusterStatus.model_validate(plan.status)  # the CRD's status schema's source
    assert admission_of(list(plan.apply))[ADDRESS]["value"] == address


def test_without_a_default_decide_keeps_state_in_process_and_names_no_source() -> None:
    plan = decide(
        reconcile_fixtures.observation(reconcile_fixtures.cluster()), gateway_image=GATEWAY_IMAGE
    )
    assert plan.status is not None
    status = plan.status["gateway"]
    assert status["governanceStore"] == "InProcess"
    assert "storeSource" not in status
    assert "governance.redis" in status["message"]  # says how to keep the state
    assert ADDRESS not in admission_of(list(plan.apply))


def test_the_default_changing_is_a_status_change() -> None:
    """A settled status is rewritten when the operator's default starts to apply."""
    settled = reconcile_fixtures.settled(reconcile_fixtures.serving())
    assert decide(settled, gateway_image=GATEWAY_IMAGE).status is None  # no change, no write
    moved = decide(settled, gateway_image=GATEWAY_IMAGE, governance_default=default())
    assert moved.status is not None
    assert moved.status["gateway"]["storeSource"] == "OperatorDefault"
