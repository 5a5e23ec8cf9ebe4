"""The condition registry is the one place a condition is described, and the setter is
the one way a condition enters a status.

What could drift if nobody checked: a ConditionType without its row (so no order, no
docs, no Ready effect), a row naming a producer that never sets it, docs/api.md's table
or the CRD's description left behind after a row changed, Ready ignoring a condition the
table says blocks it, and a setter that moves lastTransitionTime (alerts key on it) or
reports a change that is none (a write every idle pass).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from sparkllm.api import Condition, ConditionType, Phase, Reason
from sparkllm.api.conditions import (
    BY_TYPE,
    CONDITIONS,
    ORDER,
    ConditionKind,
    ReadyEffect,
    conditions_table,
    type_description,
)
from sparkllm.api.status import set_condition
from sparkllm.reconcile.decide.status import ClusterReport, ReplicaReport, condition, derive_status

ROOT = Path(__file__).resolve().parents[2]
OPERATOR = ROOT / "operator" / "sparkllm"
NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
LATER = NOW + timedelta(minutes=5)


def test_every_condition_type_has_exactly_one_row() -> None:
    assert [row.type for row in CONDITIONS] == list(ConditionType)
    assert set(BY_TYPE) == {t.value for t in ConditionType}
    assert tuple(t.value for t in ConditionType) == ORDER


@pytest.mark.parametrize("kind", CONDITIONS, ids=lambda r: r.type.value)
def test_a_row_names_its_producer_and_distinct_reasons(kind: ConditionKind) -> None:
    assert len(set(kind.reasons)) == len(kind.reasons) > 0
    source = (OPERATOR / kind.producer).read_text()
    assert f"ConditionType.{kind.type.name}" in source, f"{kind.producer} never sets {kind.type}"
    # every reason is produced somewhere in the operator (none is only listed here)
    operator_text = "".join(
        p.read_text() for p in OPERATOR.rglob("*.py") if p.name not in {"conditions.py"}
    )
    for reason in kind.reasons:
        assert f"Reason.{reason.name}" in operator_text, f"{reason} is never used"


def test_exactly_the_proofs_that_hold_the_replicas_block_ready() -> None:
    blocks = {row.type for row in CONDITIONS if row.ready is ReadyEffect.BLOCKS}
    assert blocks == {
        ConditionType.MODEL_VERIFIED, ConditionType.CAPACITY_PLANNED, ConditionType.LAUNCH_CHECKED,
    }  # fmt: skip
    assert BY_TYPE["Ready"].ready is ReadyEffect.DERIVED


def test_docs_api_md_carries_the_generated_table() -> None:
    text = (ROOT / "docs" / "api.md").read_text()
    found = re.search(
        r"<!-- conditions table: generated[^\n]*-->\n(.*?)\n<!-- end conditions table -->",
        text,
        re.S,
    )
    assert found is not None, "docs/api.md lost its conditions table markers"
    assert found.group(1) == conditions_table(), (
        "docs/api.md's conditions table drifted: paste sparkllm.api.conditions.conditions_table()"
    )


def test_the_crd_describes_condition_types_from_the_registry() -> None:
    crd = yaml.safe_load((ROOT / "crds" / "sparkllm.io_inferenceclusters.yaml").read_text())
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    described = status["properties"]["conditions"]["items"]["properties"]["type"]["description"]
    assert described == type_description()
    assert all(f"{t.value}: " in described for t in ConditionType)


# --- the one setter ---------------------------------------------------------------------


def typed(
    kind: ConditionType, status: str, reason: Reason, at: datetime, **extra: str
) -> Condition:
    return Condition(
        type=kind.value,
        status=status,  # type: ignore[arg-type]
        reason=reason.value,
        message=extra.get("message", ""),
        observed_generation=1,
        last_transition_time=at,
    )


def test_a_new_condition_is_a_change() -> None:
    conditions: list[Condition] = []
    new = typed(ConditionType.READY, "True", Reason.ALL_REPLICAS_READY, NOW)
    assert set_condition(conditions, new) is True
    assert conditions == [new]


def test_the_same_condition_again_is_no_change_and_keeps_its_time() -> None:
    old = typed(ConditionType.READY, "True", Reason.ALL_REPLICAS_READY, NOW)
    conditions = [old]
    again = typed(ConditionType.READY, "True", Reason.ALL_REPLICAS_READY, LATER)
    assert set_condition(conditions, again) is False
    assert conditions == [old]


def test_a_new_message_is_a_change_that_keeps_the_transition_time() -> None:
    conditions = [typed(ConditionType.DEGRADED, "True", Reason.REPLICA_DEGRADED, NOW)]
    update = typed(ConditionType.DEGRADED, "True", Reason.REPLICA_DEGRADED, LATER, message="m")
    assert set_condition(conditions, update) is True
    assert conditions[0].message == "m"
    assert conditions[0].last_transition_time == NOW


def test_a_flip_is_a_change_with_the_new_time() -> None:
    conditions = [typed(ConditionType.READY, "True", Reason.ALL_REPLICAS_READY, NOW)]
    flip = typed(ConditionType.READY, "False", Reason.REPLICAS_NOT_READY, LATER)
    assert set_condition(conditions, flip) is True
    assert conditions == [flip]


def test_the_setter_keeps_the_registry_order() -> None:
    conditions = [typed(ConditionType.MONITORED, "True", Reason.MONITORS_APPLIED, NOW)]
    set_condition(conditions, typed(ConditionType.READY, "True", Reason.ALL_REPLICAS_READY, NOW))
    set_condition(conditions, typed(ConditionType.EXPOSED, "True", Reason.API_SERVED, NOW))
    assert [c.type for c in conditions] == ["Ready", "Exposed", "Monitored"]


# --- Ready follows the registry ---------------------------------------------------------


def serving(*proofs: dict[str, object]) -> ClusterReport:
    replica = ReplicaReport(
        index=0, nodes=("spark-a0",), phase=Phase.READY, ready_ranks=1, generation=1
    )
    return ClusterReport(
        generation=2,
        desired_replicas=1,
        selector="sparkllm.io/cluster=llm",
        replicas=(replica,),
        extra_conditions=tuple(dict(p) for p in proofs),
    )


def ready_of(report: ClusterReport) -> dict[str, object]:
    status = derive_status(report, {}, NOW)
    return next(c for c in status["conditions"] if c["type"] == "Ready")


def test_a_blocking_condition_false_holds_ready_while_replicas_serve() -> None:
    mismatch = condition(
        ConditionType.MODEL_VERIFIED,
        status=False,
        reason=Reason.CHECKSUM_MISMATCH,
        message="rank 1 differs",
        generation=2,
    )
    ready = ready_of(serving(mismatch))
    assert (ready["status"], ready["reason"]) == ("False", "ReplicasNotReady")
    assert ready["message"] == "1/1 replicas ready; held while ModelVerified is False"


def test_an_informational_condition_false_leaves_ready_alone() -> None:
    mismatch = condition(
        ConditionType.CONFIG_APPLIED,
        status=False,
        reason=Reason.CONFIG_MISMATCH,
        message="--mem-fraction-static differs",
        generation=2,
    )
    ready = ready_of(serving(mismatch))
    assert (ready["status"], ready["reason"]) == ("True", "AllReplicasReady")
