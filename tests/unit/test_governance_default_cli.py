"""The operator's default governance store outside the operator (issue 17 item 5).

``sparkllm render`` takes the chart's ``governance.redis`` values as flags and prints
what the operator, started with the same values, applies: a gateway on that Redis for a
spec naming no store, the spec's own store otherwise; a bad value is one line naming
the flags. ``sparkllm usage`` with neither ``--base-url`` nor ``--redis`` reads the same
default store from the operator's env, or says what it needs.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkllm.cli import main
from sparkllm.gateway.governance import redis_store
from sparkllm.gateway_settings import governance_key_prefix
from sparkllm.offline import fresh_plan, load_cluster
from sparkllm.render.governance_default import (
    ADDRESS_ENV,
    PASSWORD_SECRET_ENV,
    governance_default_from,
)
from sparkllm_dev.redis_fixture import RedisServer
from tests.unit.test_governance_default import ADDRESS, DEFAULT_ENV, PASSWORD, admission_of

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "manifests" / "samples" / "deepseek-v4-flash.yaml"
FLAGS = [
    "--governance-redis-address", "redis.shared.svc:6380",
    "--governance-redis-password-secret", "redis-auth",
    "--governance-redis-password-key", "pw",
    "--governance-redis-database", "4",
]  # fmt: skip
OPERATOR_ENV = DEFAULT_ENV  # the same values as the flags, as the chart puts them


def render(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, Any]]:
    assert main(["render", "-f", str(SAMPLE), "-n", "llm", *args]) == 0
    return [o for o in yaml.safe_load_all(capsys.readouterr().out) if o]


def test_render_with_the_default_prints_what_the_operator_applies(
    capsys: pytest.CaptureFixture[str],
) -> None:
    objects = render(capsys, *FLAGS)
    env = admission_of(objects)
    assert env[ADDRESS]["value"] == "redis.shared.svc:6380"
    assert env[PASSWORD]["valueFrom"] == {"secretKeyRef": {"name": "redis-auth", "key": "pw"}}
    # The operator started with the same values (its env) plans exactly these objects.
    operator = fresh_plan(
        load_cluster(str(SAMPLE), namespace="llm"),
        node_ips={},
        governance_default=governance_default_from(OPERATOR_ENV),
    )
    assert list(operator.apply) == objects
    assert operator.status is not None
    assert operator.status["gateway"]["storeSource"] == "OperatorDefault"
    assert ADDRESS not in admission_of(render(capsys))  # no flags: state in process


def test_render_keeps_the_specs_own_store(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = yaml.safe_load(SAMPLE.read_text())
    doc["spec"]["gateway"] = {"governanceStore": {"redis": {"address": "redis.mine.svc"}}}
    path = tmp_path / "ic.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["render", "-f", str(path), "-n", "llm", *FLAGS]) == 0
    objects = [o for o in yaml.safe_load_all(capsys.readouterr().out) if o]
    env = admission_of(objects)
    assert env[ADDRESS]["value"] == "redis.mine.svc"
    assert PASSWORD not in env


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--governance-redis-address", "redis://x:6379"], "is invalid"),
        (["--governance-redis-address", "redis", "--governance-redis-database", "256"],
         "is invalid"),
        (["--governance-redis-password-secret", "auth"],
         "--governance-redis-password-secret needs --governance-redis-address"),
    ],
    ids=["url", "database", "secret-without-address"],
)  # fmt: skip
def test_a_bad_default_is_one_line_naming_the_flags(
    capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    assert main(["render", "-f", str(SAMPLE), "-n", "llm", *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith("sparkllm: error: ")
    assert said in err
    assert "--governance-redis-address" in err
    assert "Traceback" not in err


def test_usage_without_a_source_or_a_default_says_what_it_needs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(ADDRESS_ENV, raising=False)
    assert main(["usage", "--cluster", "llm/llm"]) == 1
    err = capsys.readouterr().err
    assert "no ledger to read: give --base-url" in err
    assert "--redis HOST:PORT" in err
    assert ADDRESS_ENV in err


def test_usage_says_the_default_stores_password_must_be_given(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, value in OPERATOR_ENV.items():
        monkeypatch.setenv(name, value)
    assert main(["usage", "--cluster", "llm/llm"]) == 1
    err = capsys.readouterr().err
    assert "Secret redis-auth (key pw)" in err
    assert "--redis-password-env" in err


def test_usage_reads_the_default_store_with_its_database(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Where it reads: the default's address and database, the cluster's key prefix."""
    seen: dict[str, Any] = {}

    def read_ledger(address: str, **kwargs: Any) -> list[Any]:
        seen.update(kwargs, address=address)
        return []

    monkeypatch.setattr(redis_store, "read_ledger", read_ledger)
    for name, value in OPERATOR_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("REDIS_PASSWORD", "s3cret")
    args = ["usage", "--cluster", "llm/chat", "--redis-password-env", "REDIS_PASSWORD"]
    assert main([*args, "--from", "2026-12-01", "--to", "2026-12-02"]) == 0
    assert seen == {
        "address": "redis.shared.svc:6380",
        "database": 4,
        "password": "s3cret",
        "key_prefix": governance_key_prefix("llm", "chat"),
        "day_from": date(2026, 12, 1),
        "day_to": date(2026, 12, 2),
    }
    assert "reading the operator's default store at redis.shared.svc:6380" in (
        capsys.readouterr().err
    )
    assert main([*args, "--redis-database", "7"]) == 0
    assert seen["database"] == 7  # the flag wins over the default's database


def test_usage_reads_a_real_default_store(
    redis_server: RedisServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(ADDRESS_ENV, redis_server.address)
    monkeypatch.setenv(PASSWORD_SECRET_ENV, "redis-auth")
    monkeypatch.setenv("REDIS_PASSWORD", redis_server.password)
    args = ["usage", "--cluster", "t-default/llm", "--redis-password-env", "REDIS_PASSWORD"]
    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["data"] == []
    assert report["store"]["shared"] is True
    monkeypatch.setenv("REDIS_PASSWORD", "wrong")
    assert main(args) == 1  # a refused password is one clear line, never a traceback
    assert "Traceback" not in capsys.readouterr().err
