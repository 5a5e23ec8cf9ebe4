"""Status as an API, pure: replica reports -> phase, counts and conditions.

What machines read: ``lastTransitionTime`` moves only when a condition's status flips
(alerts key on it), conditions come in one documented order, the cluster phase follows
from the replicas, an invalid spec is a condition (not a crash loop), and every status
this module derives is one the CRD's status schema accepts.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sparkllm.api import ConditionType, InferenceClusterStatus, Phase, Reason
from sparkllm.reconcile.decide.replicas import precise_timestamp
from sparkllm.reconcile.decide.status import (
    ClusterReport,
    ReplicaReport,
    cluster_phase,
    condition,
    derive_status,
    merge_conditions,
)

JSON = dict[str, Any]
NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
NOW_TEXT = "2026-03-01T12:00:00Z"
EARLIER_TEXT = "2026-02-28T08:30:00Z"
NODES = ("spark-a0", "spark-a1", "spark-a2")
SELECTOR = "sparkllm.io/cluster=llm"


def cond(kind: ConditionType, status: bool | None, reason: Reason = Reason.RECONCILED) -> JSON:
    return condition(kind, status=status, reason=reason, message=f"{kind} msg", generation=3)


def report(index: int, phase: Phase, **fields: Any) -> ReplicaReport:
    return ReplicaReport(
        index=index, nodes=NODES, phase=phase, ready_ranks=3 if phase is Phase.READY else 0,
        generation=1, **fields,
    )  # fmt: skip


def cluster(*replicas: ReplicaReport, desired: int | None = None, **fields: Any) -> ClusterReport:
    return ClusterReport(
        generation=3,
        desired_replicas=len(replicas) if desired is None else desired,
        selector=SELECTOR,
        replicas=replicas,
        **fields,
    )


# --- condition and merge_conditions ----------------------------------------------------


@pytest.mark.parametrize(("status", "text"), [(True, "True"), (False, "False"), (None, "Unknown")])
def test_condition_shape(status: bool | None, text: str) -> None:
    assert condition(
        ConditionType.MODEL_VERIFIED,
        status=status,
        reason=Reason.MODEL_FILES_VERIFIED,
        message="m",
        generation=7,
    ) == {
        "type": "ModelVerified",
        "status": text,
        "reason": "ModelFilesVerified",
        "message": "m",
        "observedGeneration": 7,
    }


def test_a_new_condition_gets_the_current_time() -> None:
    [merged] = merge_conditions([], [cond(ConditionType.READY, True)], NOW)
    assert merged == {**cond(ConditionType.READY, True), "lastTransitionTime": NOW_TEXT}


@pytest.mark.parametrize(
    ("old_status", "new_status", "moved"),
    [
        ("True", True, False),
        ("False", False, False),
        ("Unknown", None, False),
        ("True", False, True),
        ("False", True, True),
        ("Unknown", True, True),
        ("True", None, True),
    ],
)
def test_transition_time_moves_only_when_the_status_flips(
    old_status: str, new_status: bool | None, moved: bool
) -> None:
    previous = [
        {"type": "Ready", "status": old_status, "reason": "Old", "message": "old",
         "observedGeneration": 1, "lastTransitionTime": EARLIER_TEXT},
    ]  # fmt: skip
    new = condition(
        ConditionType.READY, status=new_status, reason=Reason.REPLICAS_NOT_READY,
        message="new words", generation=3,
    )  # fmt: skip
    [merged] = merge_conditions(previous, [new], NOW)
    assert merged["lastTransitionTime"] == (NOW_TEXT if moved else EARLIER_TEXT)
    # Everything else is always the new condition's.
    assert {k: v for k, v in merged.items() if k != "lastTransitionTime"} == new


def test_same_status_without_a_recorded_time_gets_now() -> None:
    previous = [{"type": "Ready", "status": "True"}]
    [merged] = merge_conditions(previous, [cond(ConditionType.READY, True)], NOW)
    assert merged["lastTransitionTime"] == NOW_TEXT


def test_conditions_not_updated_are_kept_and_inputs_not_mutated() -> None:
    kept = {**cond(ConditionType.MODEL_VERIFIED, True), "lastTransitionTime": EARLIER_TEXT}
    previous = [kept]
    snapshot = [dict(kept)]
    merged = merge_conditions(previous, [cond(ConditionType.READY, False)], NOW)
    assert [c["type"] for c in merged] == ["Ready", "ModelVerified"]
    assert merged[1] == kept
    assert previous == snapshot
    merged[1]["message"] = "changed"
    assert previous[0]["message"] == "ModelVerified msg"


def test_conditions_are_ordered_by_type_unknown_types_last() -> None:
    previous = [
        {"type": "Custom.example.com/B", "status": "True", "lastTransitionTime": EARLIER_TEXT},
        {"type": "CapacityPlanned", "status": "True", "lastTransitionTime": EARLIER_TEXT},
        {"type": "Custom.example.com/A", "status": "True", "lastTransitionTime": EARLIER_TEXT},
    ]
    updates = [
        cond(ConditionType.CONFIG_APPLIED, True),
        cond(ConditionType.DEGRADED, False),
        cond(ConditionType.READY, True),
        cond(ConditionType.MODEL_VERIFIED, None),
        cond(ConditionType.PROGRESSING, False),
        cond(ConditionType.MONITORED, False),
        cond(ConditionType.EXPOSED, False),
        cond(ConditionType.NETWORK_VERIFIED, True),
        cond(ConditionType.MEMORY_VERIFIED, False),
        cond(ConditionType.UPDATE_PENDING, False),
        cond(ConditionType.IMAGES_CONSISTENT, True),
        cond(ConditionType.LAUNCH_CHECKED, None),
        cond(ConditionType.MODEL_STAGED, False),
    ]
    merged = merge_conditions(previous, updates, NOW)
    assert [c["type"] for c in merged] == [
        "Ready", "Progressing", "Degraded", "ModelVerified", "ConfigApplied", "CapacityPlanned",
        "NetworkVerified", "MemoryVerified", "Exposed", "Monitored", "UpdatePending",
        "LaunchChecked", "ImagesConsistent", "ModelStaged", "Custom.example.com/B",
        "Custom.example.com/A",
    ]  # fmt: skip
    assert [t.value for t in ConditionType] == [c["type"] for c in merged[:14]]


def test_a_later_update_of_the_same_type_wins() -> None:
    merged = merge_conditions(
        [], [cond(ConditionType.READY, False), cond(ConditionType.READY, True)], NOW
    )
    assert [(c["type"], c["status"]) for c in merged] == [("Ready", "True")]


def test_merge_timestamps_are_utc_seconds() -> None:
    moment = datetime(2026, 3, 1, 12, 0, 0, 987654, tzinfo=UTC)
    [merged] = merge_conditions([], [cond(ConditionType.READY, True)], moment)
    assert merged["lastTransitionTime"] == NOW_TEXT


# --- cluster_phase ------------------------------------------------------------------------

R, S, D, X, P = Phase.READY, Phase.STARTING, Phase.DEGRADED, Phase.RESTARTING, Phase.PENDING


@pytest.mark.parametrize(
    ("phases", "desired", "extra", "expected"),
    [
        pytest.param([R], 1, {}, R, id="ready"),
        pytest.param([R, R], 2, {}, R, id="all-ready"),
        pytest.param([R, S], 2, {}, S, id="one-starting"),
        pytest.param([S], 1, {}, S, id="starting"),
        pytest.param([X, R], 2, {}, X, id="restarting"),
        pytest.param([X, S], 2, {}, X, id="restarting-beats-starting"),
        pytest.param([D, R], 2, {}, D, id="degraded"),
        pytest.param([D, X], 2, {}, D, id="degraded-beats-restarting"),
        pytest.param([R], 2, {"unplaced": (1,)}, D, id="unplaced-is-degraded"),
        pytest.param([], 1, {}, P, id="nothing-reported"),
        pytest.param([P, P], 2, {}, P, id="pending"),
        # replicas 0: Stopped, not Ready (issue 16: nothing serves, on purpose)
        pytest.param([], 0, {}, Phase.STOPPED, id="scaled-to-zero"),
        pytest.param([D], 0, {}, Phase.STOPPED, id="scaled-to-zero-while-one-is-removed"),
        pytest.param([R, R, S], 2, {}, R, id="scaling-down-extra-replica-starting"),
        pytest.param([R], 1, {"spec_error": "bad"}, Phase.FAILED, id="spec-error"),
        pytest.param([], 0, {"spec_error": "bad"}, Phase.FAILED, id="spec-error-beats-zero"),
    ],
)  # fmt: skip
def test_cluster_phase(
    phases: list[Phase], desired: int, extra: dict[str, Any], expected: Phase
) -> None:
    replicas = [report(i, p) for i, p in enumerate(phases)]
    assert cluster_phase(cluster(*replicas, desired=desired, **extra)) is expected


# --- derive_status --------------------------------------------------------------------------


def by_type(status: JSON) -> dict[str, JSON]:
    return {c["type"]: c for c in status["conditions"]}


def summary(c: JSON) -> tuple[str, str, str]:
    return c["status"], c["reason"], c["message"]


@pytest.mark.parametrize(
    ("cluster_report", "ready", "progressing", "degraded"),
    [
        pytest.param(
            cluster(report(0, R), report(1, R)),
            ("True", "AllReplicasReady", "2/2 replicas ready"),
            ("False", "Reconciled", "desired state reached"),
            ("False", "NotDegraded", ""),
            id="all-ready",
        ),
        pytest.param(
            cluster(report(0, R), report(1, S)),
            ("False", "ReplicasNotReady", "1/2 replicas ready"),
            ("True", "RanksStarting", "1/2 replicas ready"),
            ("False", "NotDegraded", ""),
            id="starting",
        ),
        pytest.param(
            cluster(report(0, R), report(1, X)),
            ("False", "ReplicasNotReady", "1/2 replicas ready"),
            ("True", "GangRestart", "1/2 replicas ready"),
            ("False", "NotDegraded", ""),
            id="restarting",
        ),
        pytest.param(
            cluster(report(0, D, message="restart budget exhausted"), report(1, D)),
            ("False", "ReplicasNotReady", "0/2 replicas ready"),
            ("False", "ReplicaDegraded", "0/2 replicas ready; the others are held: "
             "replica 0: restart budget exhausted; replica 1: degraded"),
            ("True", "ReplicaDegraded", "replica 0: restart budget exhausted; replica 1: degraded"),
            id="degraded",
        ),
        pytest.param(
            cluster(report(0, R), desired=2, unplaced=(1,),
                    placement_problems=("group 'c' incomplete",)),
            ("False", "ReplicasNotReady", "1/2 replicas ready"),
            ("False", "InsufficientNodeGroups",
             "no free node group for replica(s) [1]: group 'c' incomplete"),
            ("True", "InsufficientNodeGroups", "1 replica(s) cannot be placed"),
            id="unplaced-with-problems",
        ),
        pytest.param(
            cluster(desired=2, unplaced=(0, 1)),
            ("False", "ReplicasNotReady", "0/2 replicas ready"),
            ("False", "InsufficientNodeGroups", "no free node group for replica(s) [0, 1]"),
            ("True", "InsufficientNodeGroups", "2 replica(s) cannot be placed"),
            id="unplaced-without-problems",
        ),
        pytest.param(
            cluster(report(0, D, message="node spark-a1 NotReady"), desired=2, unplaced=(1,)),
            ("False", "ReplicasNotReady", "0/2 replicas ready"),
            ("False", "InsufficientNodeGroups", "no free node group for replica(s) [1]"),
            ("True", "ReplicaDegraded", "replica 0: node spark-a1 NotReady"),
            id="degraded-replica-named-before-unplaced",
        ),
        pytest.param(
            cluster(desired=0),
            ("False", "ScaledToZero", "spec.replicas is 0"),
            ("False", "Reconciled", "desired state reached"),
            ("False", "NotDegraded", ""),
            id="scaled-to-zero",
        ),
    ],
)  # fmt: skip
def test_derived_conditions(
    cluster_report: ClusterReport,
    ready: tuple[str, str, str],
    progressing: tuple[str, str, str],
    degraded: tuple[str, str, str],
) -> None:
    status = derive_status(cluster_report, {}, NOW)
    conditions = by_type(status)
    assert list(conditions) == ["Ready", "Progressing", "Degraded"]
    assert summary(conditions["Ready"]) == ready
    assert summary(conditions["Progressing"]) == progressing
    assert summary(conditions["Degraded"]) == degraded
    assert all(c["observedGeneration"] == 3 for c in status["conditions"])
    assert all(c["lastTransitionTime"] == NOW_TEXT for c in status["conditions"])
    InferenceClusterStatus.model_validate(status)  # the CRD's status schema accepts it


def test_derive_status_counts_and_replica_statuses() -> None:
    replicas = (
        report(0, R, endpoint="http://10.0.0.10:30000", restarts=2),
        report(1, S, restarts=1),
        report(2, R),
    )
    status = derive_status(cluster(*replicas, desired=3), {}, NOW)
    assert {k: v for k, v in status.items() if k != "conditions"} == {
        "observedGeneration": 3,
        "phase": "Starting",
        "replicas": 3,
        "readyReplicas": 2,
        "selector": SELECTOR,
        "replicaStatuses": [r.to_json() for r in replicas],
        "restarts": 3,  # every replica's, summed: kubectl get icl -o wide
    }
    assert [r["index"] for r in status["replicaStatuses"]] == [0, 1, 2]
    InferenceClusterStatus.model_validate(status)


def test_derive_status_reuses_transition_times_and_keeps_other_conditions() -> None:
    first = derive_status(cluster(report(0, R)), {}, NOW - timedelta(hours=2))
    first["conditions"].append(
        {**cond(ConditionType.MODEL_VERIFIED, True), "lastTransitionTime": EARLIER_TEXT}
    )
    again = derive_status(cluster(report(0, R)), first, NOW)
    assert again == first  # an idle pass derives the identical status: no write
    restarting = derive_status(cluster(report(0, X)), first, NOW)
    times = {c["type"]: c["lastTransitionTime"] for c in restarting["conditions"]}
    assert times == {
        "Ready": NOW_TEXT,  # True -> False
        "Progressing": NOW_TEXT,  # False -> True
        "Degraded": "2026-03-01T10:00:00Z",  # False -> False
        "ModelVerified": EARLIER_TEXT,  # untouched
    }
    degraded = derive_status(cluster(report(0, D, message="x")), restarting, NOW + timedelta(1))
    times = {c["type"]: c["lastTransitionTime"] for c in degraded["conditions"]}
    assert times == {
        "Ready": NOW_TEXT,  # False -> False
        "Progressing": "2026-03-02T12:00:00Z",  # True -> False: the replica is held
        "Degraded": "2026-03-02T12:00:00Z",  # False -> True
        "ModelVerified": EARLIER_TEXT,
    }
    assert by_type(degraded)["Progressing"]["reason"] == "ReplicaDegraded"


def test_progressing_is_false_while_every_replica_is_held_degraded() -> None:
    held = report(0, D, message="restart budget exhausted", budget_exhausted=True)
    status = derive_status(cluster(held), {}, NOW)
    assert by_type(status)["Progressing"]["status"] == "False"


def test_extra_conditions_follow_the_derived_ones() -> None:
    extra = (
        cond(ConditionType.CAPACITY_PLANNED, True, Reason.CAPACITY_FITS),
        cond(ConditionType.MODEL_VERIFIED, None, Reason.VERIFICATION_PENDING),
    )
    status = derive_status(cluster(report(0, R), extra_conditions=extra), {}, NOW)
    assert [c["type"] for c in status["conditions"]] == [
        "Ready", "Progressing", "Degraded", "ModelVerified", "CapacityPlanned",
    ]  # fmt: skip
    assert by_type(status)["CapacityPlanned"]["reason"] == "CapacityFits"


@pytest.mark.parametrize(
    ("reason", "expected"), [(None, "InvalidSpec"), (Reason.SECRET_MISSING, "SecretMissing")]
)
def test_spec_error_is_a_condition_with_its_reason(reason: Reason | None, expected: str) -> None:
    fields: dict[str, Any] = {"spec_error": "spec.engine.extraArgs: unknown flag --x"}
    if reason is not None:
        fields["spec_error_reason"] = reason
    extra = (cond(ConditionType.CAPACITY_PLANNED, None, Reason.CAPACITY_UNKNOWN),)
    previous_degraded = {
        "conditions": [
            {**cond(ConditionType.DEGRADED, True, Reason.REPLICA_DEGRADED),
             "lastTransitionTime": EARLIER_TEXT},
        ]
    }  # fmt: skip
    status = derive_status(
        cluster(report(0, R), extra_conditions=extra, **fields), previous_degraded, NOW
    )
    assert status["phase"] == "Failed"
    conditions = by_type(status)
    for kind in ("Ready", "Progressing"):
        assert summary(conditions[kind]) == (
            "False",
            expected,
            "spec.engine.extraArgs: unknown flag --x",
        )
    assert conditions["CapacityPlanned"]["reason"] == "CapacityUnknown"
    # No Degraded is derived from an invalid spec; the last one observed stays.
    assert conditions["Degraded"]["lastTransitionTime"] == EARLIER_TEXT
    assert [c["type"] for c in status["conditions"]] == [
        "Ready", "Progressing", "Degraded", "CapacityPlanned",
    ]  # fmt: skip
    InferenceClusterStatus.model_validate(status)


# --- ReplicaReport.to_json ------------------------------------------------------------------


def test_replica_report_omits_empty_optional_fields() -> None:
    assert report(2, S).to_json() == {
        "index": 2,
        "nodes": list(NODES),
        "phase": "Starting",
        "readyRanks": 0,
        "restarts": 0,
        "generation": 1,
    }


def test_replica_report_with_every_field() -> None:
    full = replace(
        report(0, D),
        endpoint="http://10.0.0.10:30000",
        restarts=4,
        last_restart={"time": NOW_TEXT, "reason": "rank 1 pod deleted"},
        recent_restarts=(EARLIER_TEXT, NOW_TEXT),
        members=("u0", "u1", "u2"),
        budget_exhausted=True,
        node_down=True,
        message="restart budget exhausted",
    )
    assert full.to_json() == {
        "index": 0,
        "nodes": list(NODES),
        "phase": "Degraded",
        "readyRanks": 0,
        "restarts": 4,
        "generation": 1,
        "lastRestart": {"time": NOW_TEXT, "reason": "rank 1 pod deleted"},
        "endpoint": "http://10.0.0.10:30000",
        "message": "restart budget exhausted",
        "restartTimes": [EARLIER_TEXT, NOW_TEXT],
        "members": ["u0", "u1", "u2"],
        "budgetExhausted": True,
        "nodeDown": True,
    }
    InferenceClusterStatus.model_validate({"replicaStatuses": [full.to_json()]})


def test_restart_times_dump_as_the_writer_wrote_them() -> None:
    """Typed restart times (datetimes) dump as written: milliseconds when there is a
    fraction (precise_timestamp, the backoff's form), whole seconds otherwise."""
    fractional = precise_timestamp(NOW + timedelta(milliseconds=250))
    assert fractional == "2026-03-01T12:00:00.250Z"
    wire = report(0, Phase.READY, recent_restarts=(fractional, EARLIER_TEXT)).to_json()
    assert wire["restartTimes"] == [fractional, EARLIER_TEXT]
    assert "members" not in report(0, Phase.READY).to_json()  # absent while none
