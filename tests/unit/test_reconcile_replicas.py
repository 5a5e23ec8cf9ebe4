"""One replica's plan: restart times survive the status round trip to the millisecond
(backoffs are in seconds), and the replica's objects are rendered once when the objects
to apply are the ones whose template hash the plan compared.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sparkllm.api import RestartPolicySpec
from sparkllm.reconcile.decide import replicas
from sparkllm.reconcile.decide.replicas import (
    Observed,
    ReplicaInputs,
    history_from_status,
    plan_replica,
    precise_timestamp,
    timestamp,
)
from sparkllm.reconcile.decide.restarts import backoff_delay
from sparkllm.render import ReplicaPlan, render_replica
from sparkllm.render.placement import NodeFacts
from sparkllm.render.product_image import ProductImage
from tests.unit.test_render_ranks import KEY, NODES, RANK0_IP, sample


def test_precise_timestamp_round_trips_milliseconds() -> None:
    moment = datetime(2026, 3, 1, 12, 0, 0, 987_000, tzinfo=UTC)
    text = precise_timestamp(moment)
    assert text == "2026-03-01T12:00:00.987Z"
    history = history_from_status({"restartTimes": [text]}, reset_budget=False)
    assert history.restart_times == (moment,)
    assert timestamp(moment) == "2026-03-01T12:00:00Z"  # conditions keep whole seconds


def test_backoff_is_measured_from_the_precise_restart_time() -> None:
    stopped = datetime(2026, 3, 1, 12, 0, 0, 900_000, tzinfo=UTC)
    history = history_from_status(
        {"restartTimes": [precise_timestamp(stopped)]}, reset_budget=False
    )
    due = history.restart_times[-1] + backoff_delay(RestartPolicySpec(backoff_seconds=(1,)), 1)
    # With whole-second times the restart could start 0.9 s early; now it cannot.
    assert due == stopped + timedelta(seconds=1)


def test_a_spec_change_resets_the_budget_window() -> None:
    status = {"restartTimes": ["2026-03-01T12:00:00.000Z"], "budgetExhausted": True}
    history = history_from_status(status, reset_budget=True)
    assert history.restart_times == ()
    assert history.exhausted is False


def _first_start() -> tuple[Observed, ReplicaInputs]:
    ips = (RANK0_IP, "10.0.0.11", "10.0.0.12")
    pairs = zip(NODES, ips, strict=True)
    facts = [NodeFacts(name=n, internal_ip=ip, ready=True) for n, ip in pairs]
    observed = Observed(
        nodes={f.name: f for f in facts},
        pods=[],
        owned={"StatefulSet": [], "Service": []},
    )
    inputs = ReplicaInputs(
        index=0, group_key="group-0", nodes=NODES, previous=None, reset_budget=False,
        force=False, others_ready=True, blocked=None, engine_key=KEY,
        tools_image=ProductImage("tools:1"),
        now=datetime(2026, 11, 30, tzinfo=UTC),
    )  # fmt: skip
    return observed, inputs


def test_a_starting_replica_is_rendered_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, bool]] = []
    real = replicas.render_replica

    def counting(ic: Any, *, plan: Any, **kwargs: Any) -> Any:
        calls.append((plan.generation, plan.running))
        return real(ic, plan=plan, **kwargs)

    monkeypatch.setattr(replicas, "render_replica", counting)
    ic = sample()
    result = plan_replica(ic, *_first_start())
    assert calls == [(1, True)]
    assert result.objects is not None
    kinds = sorted(o["kind"] for o in result.objects)
    assert kinds.count("StatefulSet") == ic.spec.engine.pipeline_parallel
    assert result.report.generation == 1


def test_a_restart_whose_status_write_was_lost_still_counts() -> None:
    """The operator applied a stop (generation 3) and died before writing its status."""
    ic = sample()
    observed, inputs = _first_start()
    plan = ReplicaPlan(
        index=0, group_key="group-0", nodes=NODES, rank0_ip=RANK0_IP, generation=3,
        running=False,
    )  # fmt: skip
    stopped = [
        o for o in render_replica(ic, plan=plan, engine_key=KEY) if o["kind"] == "StatefulSet"
    ]
    observed.owned["StatefulSet"] = stopped
    previous = {"index": 0, "generation": 2, "restarts": 1, "phase": "Ready"}
    result = plan_replica(ic, observed, replace(inputs, previous=previous))
    assert result.report.restarts == 2
    assert result.report.generation == 3
    recorded = {**previous, "generation": 3, "restarts": 2}
    again = plan_replica(ic, observed, replace(inputs, previous=recorded))
    assert again.report.restarts == 2  # once written, it is not counted again
