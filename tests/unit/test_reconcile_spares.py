"""Spare groups and quarantine (decide/spares.py, failover.py, quarantine.py), pure.

Each branch as a table row would hide the passes between: these tests run the pure
decide over a small world (``reconcile_world.advance``: the plan's writes made, the
StatefulSets' pods following) — a failed node with a spare free, none free, a quarantined
spare skipped, a flapping node, a wedge, a lift, a settle, and an operator restart.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from sparkllm.api import Reason
from sparkllm.api.quarantine import QuarantineSpec
from sparkllm.keys import ANNOTATION_LIFT_QUARANTINE, LABEL_GENERATION, LABEL_NODE_GROUP
from sparkllm.reconcile.decide import decide
from sparkllm.reconcile.decide.failover import NodeFault
from sparkllm.reconcile.decide.observation import Observation
from sparkllm.reconcile.decide.quarantine import Quarantine, record
from sparkllm.render.placement import NodeFacts
from tests.unit.reconcile_fixtures import (
    GATEWAY_IMAGE,
    GROUPS,
    IPS,
    NOW,
    cluster,
    nodes,
    serving,
    status_of,
    with_obj,
)
from tests.unit.reconcile_world import advance, edit_pod, pod_name

JSON = dict[str, Any]
A, B, C = GROUPS


def down(obs: Observation, *names: str, unknown: bool = False, since_s: float = 0) -> Observation:
    """``names`` NotReady since ``since_s`` seconds before the observation's now (Ready=Unknown:
    the heartbeat lost), every other node as it was."""
    facts = dict(obs.observed.nodes)
    for name in names:
        facts[name] = replace(
            facts[name],
            ready=False,
            heartbeat_lost=unknown,
            ready_changed=obs.now - timedelta(seconds=since_s),
        )
    return replace(obs, observed=replace(obs.observed, nodes=facts))


def up(obs: Observation, *names: str) -> Observation:
    """``names`` Ready again from now on."""
    facts = dict(obs.observed.nodes)
    for name in names:
        facts[name] = replace(facts[name], ready=True, heartbeat_lost=False, ready_changed=obs.now)
    return replace(obs, observed=replace(obs.observed, nodes=facts))


def run(obs: Observation, passes: int = 1) -> tuple[Observation, list[Any]]:
    """``passes`` passes, each plan executed; the observation after, and the plans."""
    plans = []
    for _ in range(passes):
        plan = decide(obs, gateway_image=GATEWAY_IMAGE)
        plans.append(plan)
        obs = advance(obs, plan)
    return obs, plans


def replica(obs: Observation, index: int = 0) -> JSON:
    assert obs.obj is not None
    entries = obs.obj["status"]["replicaStatuses"]
    return next(dict(r) for r in entries if r["index"] == index)


def events(plans: list[Any], reason: Reason) -> list[str]:
    return [e.message for p in plans for e in p.events if e.reason is reason]


def sts_groups(obs: Observation) -> set[str]:
    return {s["metadata"]["labels"][LABEL_NODE_GROUP] for s in obs.observed.statefulsets}


def pod_nodes(obs: Observation) -> list[str]:
    return sorted(p["spec"]["nodeName"] for p in obs.observed.pods)


def with_status(obs: Observation, **fields: Any) -> Observation:
    assert obs.obj is not None
    obj = {**obs.obj, "status": {**obs.obj["status"], **fields}}
    return with_obj(obs, obj)


def test_a_failed_node_with_a_spare_free_moves_the_replica_there_at_once() -> None:
    obs = down(serving(groups=2), "a1")
    first = decide(obs, gateway_image=GATEWAY_IMAGE)
    # At once: the ranks stop (a new generation), on the spare group's StatefulSets.
    applied = [o for o in first.apply if o["kind"] == "StatefulSet"]
    assert {o["metadata"]["labels"][LABEL_NODE_GROUP] for o in applied} == {"group-1"}
    assert {o["spec"]["replicas"] for o in applied} == {0}
    assert {o["spec"]["template"]["metadata"]["labels"][LABEL_GENERATION] for o in applied} == {"2"}
    status = status_of(obs, first)
    entry = status["replicaStatuses"][0]
    assert entry["nodeGroup"] == "group-1"
    assert entry["nodes"] == list(B)
    assert entry["lastFailover"]["from"] == "group-0"
    assert entry["lastFailover"]["to"] == "group-1"
    assert entry["lastFailover"]["reason"] == "node a1 NotReady"
    assert entry["lastRestart"]["reason"] == "failover: node a1 NotReady"
    (moved,) = events([first], Reason.NODE_FAILOVER)
    assert moved == (
        "replica 0: node a1 NotReady; moved from node group 'group-0' (a0, a1, a2) to the "
        "spare node group 'group-1' (b0, b1, b2)"
    )
    assert first.failovers == 1
    assert status["nodeFailures"][0]["node"] == "a1"
    assert "quarantine" not in status  # one failure: not more than maxNodeFailures (2)
    # The old pods go first, then the new generation runs on the spare's nodes.
    obs, plans = run(advance(obs, first), passes=3)
    assert pod_nodes(obs) == sorted(B)
    assert replica(obs)["phase"] == "Ready"
    assert all(p.failovers == 0 for p in plans)  # it moved once


def test_the_assignment_survives_an_operator_restart() -> None:
    moved, _ = run(down(serving(groups=2), "a1"), passes=3)
    back = up(moved, "a1")  # the failed node is back: the replica stays where it serves
    after, plans = run(back, passes=2)
    assert sts_groups(after) == {"group-1"}
    assert all(not p.apply or {"group-1"} >= _groups(p) for p in plans)
    # A fresh operator that finds no StatefulSet (deleted meanwhile) reads the status.
    bare = replace(after, observed=replace(after.observed, owned={
        **after.observed.owned, "StatefulSet": [], "Service": []}))  # fmt: skip
    plan = decide(bare, gateway_image=GATEWAY_IMAGE)
    assert _groups(plan) == {"group-1"}


def _groups(plan: Any) -> set[str]:
    return {
        o["metadata"]["labels"][LABEL_NODE_GROUP] for o in plan.apply if o["kind"] == "StatefulSet"
    }


def test_no_spare_free_keeps_todays_behaviour() -> None:
    obs = down(serving(groups=1), "a1")
    plan = decide(obs, gateway_image=GATEWAY_IMAGE)
    status = status_of(obs, plan)
    assert status["replicaStatuses"][0]["phase"] == "Degraded"
    assert status["replicaStatuses"][0]["nodeGroup"] == "group-0"
    assert "lastFailover" not in status["replicaStatuses"][0]
    assert not events([plan], Reason.NODE_FAILOVER)
    assert _groups(plan) <= {"group-0"}
    assert plan.waiting_for_nodes  # any node change looks again: a spare may free up


def test_a_spare_with_a_quarantined_node_is_skipped() -> None:
    obs = serving(groups=3)
    quarantined = {"node": "b1", "since": "2026-11-30T11:59:00Z", "reason": "wedged"}
    obs = down(with_status(obs, quarantine=[quarantined]), "a1")
    plan = decide(obs, gateway_image=GATEWAY_IMAGE)
    assert _groups(plan) == {"group-2"}
    (moved,) = events([plan], Reason.NODE_FAILOVER)
    assert moved.endswith("to the spare node group 'group-2' (c0, c1, c2)")
    assert [q["node"] for q in status_of(obs, plan)["quarantine"]] == ["b1"]


def test_an_unhealthy_spare_is_not_taken() -> None:
    obs = down(serving(groups=2), "a1", "b2")
    plan = decide(obs, gateway_image=GATEWAY_IMAGE)
    assert not events([plan], Reason.NODE_FAILOVER)
    assert status_of(obs, plan)["replicaStatuses"][0]["phase"] == "Degraded"


def test_a_flapping_node_is_quarantined_and_its_replica_waits_while_it_is() -> None:
    # Two failures already in the window; the third NotReady spell quarantines a1.
    earlier = ["2026-11-30T11:20:00Z", "2026-11-30T11:40:00Z"]
    obs = with_status(serving(groups=1), nodeFailures=[{"node": "a1", "times": earlier}])
    obs = down(obs, "a1")
    plan = decide(obs, gateway_image=GATEWAY_IMAGE)
    status = status_of(obs, plan)
    (entry,) = status["quarantine"]
    assert entry["node"] == "a1"
    assert entry["reason"].startswith("failed a replica 3 times within 3600 s")
    assert entry["since"] == "2026-11-30T12:00:00Z"
    assert plan.quarantined_nodes == 1
    (message,) = events([plan], Reason.NODE_QUARANTINED)
    assert message.startswith("node a1 quarantined: failed a replica 3 times")
    # The same NotReady spell, seen again, is not another failure.
    obs, plans = run(advance(obs, plan), passes=2)
    assert len(obs.obj["status"]["nodeFailures"][0]["times"]) == 3  # type: ignore[index]
    # Back and Ready, it is still quarantined: the replica waits, stopped, and says why.
    obs, plans = run(up(obs, "a1"), passes=2)
    assert replica(obs)["phase"] == "Degraded"
    assert "a1 quarantined" in replica(obs)["message"]
    assert not obs.observed.pods
    # The pass looks again when a1 settles (Ready for settleSeconds: 1800 s).
    assert plans[-1].retry_after is not None
    assert 1790 < plans[-1].retry_after <= 1800


def test_a_wedged_node_is_quarantined_at_its_first_failure() -> None:
    obs = down(serving(groups=2), "a1", unknown=True)
    plan = decide(obs, gateway_image=GATEWAY_IMAGE)
    status = status_of(obs, plan)
    (entry,) = status["quarantine"]
    assert entry["reason"] == "wedged: node a1 NotReady (heartbeat lost, its rank pod never exited)"
    assert _groups(plan) == {"group-1"}  # and the replica moved to the spare


def test_a_node_whose_pod_exited_before_the_heartbeat_stopped_is_no_wedge() -> None:
    def exited(pod: JSON) -> JSON:
        pod["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 0}}
        return pod

    obs = down(edit_pod(serving(groups=2), 0, 1, exited), "a1", unknown=True)
    status = status_of(obs, decide(obs, gateway_image=GATEWAY_IMAGE))
    assert "quarantine" not in status


def test_the_lift_annotation_frees_a_node_and_is_consumed() -> None:
    quarantined = {"node": "a1", "since": "2026-11-30T11:59:00Z", "reason": "wedged"}
    obs = with_status(serving(groups=1), quarantine=[quarantined])
    obs, _ = run(obs, passes=2)  # held: a1 is quarantined
    assert replica(obs)["phase"] == "Degraded"
    assert obs.obj is not None
    obj = {**obs.obj, "metadata": {**obs.obj["metadata"], "annotations": {
        ANNOTATION_LIFT_QUARANTINE: "a1"}}}  # fmt: skip
    plan = decide(with_obj(obs, obj), gateway_image=GATEWAY_IMAGE)
    assert plan.annotations == {"metadata": {"annotations": {ANNOTATION_LIFT_QUARANTINE: None}}}
    assert status_of(obs, plan)["quarantine"] == []
    (lifted,) = events([plan], Reason.QUARANTINE_LIFTED)
    assert lifted == "node a1 is used again: quarantine lifted (sparkllm.io/lift-quarantine)"
    obs, _ = run(advance(with_obj(obs, obj), plan), passes=2)
    assert pod_nodes(obs) == sorted(A)  # started again on its group


def test_a_lift_naming_no_quarantined_node_is_a_warning_not_a_silent_success() -> None:
    quarantined = {"node": "a1", "since": "2026-11-30T11:59:00Z", "reason": "wedged"}
    obs = with_status(serving(groups=1), quarantine=[quarantined])
    assert obs.obj is not None
    obj = {**obs.obj, "metadata": {**obs.obj["metadata"], "annotations": {
        ANNOTATION_LIFT_QUARANTINE: "a1x"}}}  # fmt: skip
    plan = decide(with_obj(obs, obj), gateway_image=GATEWAY_IMAGE)
    assert plan.annotations == {"metadata": {"annotations": {ANNOTATION_LIFT_QUARANTINE: None}}}
    assert [q["node"] for q in status_of(obs, plan)["quarantine"]] == ["a1"]  # still held
    assert events([plan], Reason.QUARANTINE_LIFTED) == []
    (warning,) = events([plan], Reason.LIFT_QUARANTINE_UNMATCHED)
    assert warning == (
        "sparkllm.io/lift-quarantine names a1x, not quarantined (quarantined: a1); "
        "nothing was lifted for them and the annotation was removed"
    )


def test_a_quarantined_node_settles_after_settle_seconds_ready() -> None:
    quarantined = {"node": "a1", "since": "2026-11-30T11:00:00Z", "reason": "wedged"}
    obs = with_status(serving(groups=1), quarantine=[quarantined])
    facts = dict(obs.observed.nodes)
    facts["a1"] = replace(facts["a1"], ready_changed=NOW - timedelta(seconds=1799))
    obs = replace(obs, observed=replace(obs.observed, nodes=facts))
    assert [q["node"] for q in status_of(obs, decide(obs, gateway_image=GATEWAY_IMAGE))[
        "quarantine"]] == ["a1"]  # fmt: skip
    settled = replace(obs, now=NOW + timedelta(seconds=1))
    plan = decide(settled, gateway_image=GATEWAY_IMAGE)
    assert status_of(settled, plan)["quarantine"] == []
    (message,) = events([plan], Reason.QUARANTINE_LIFTED)
    assert message == "node a1 is used again: Ready since 11:30:01, longer than 1800 s"


def test_record_counts_a_failure_once_and_a_gone_node_once() -> None:
    policy = QuarantineSpec(max_node_failures=1)
    spell = NodeFault(node="a1", why="node a1 NotReady", since=NOW)
    q, _ = record(Quarantine(), [spell], policy=policy, seen_before=frozenset(), now=NOW)
    q, new = record(q, [spell], policy=policy, seen_before=frozenset(), now=NOW)
    assert q.failures["a1"] == (NOW,)
    assert not new
    gone = NodeFault(node="a2", why="node a2 missing", since=None)
    q, _ = record(q, [gone], policy=policy, seen_before=frozenset(), now=NOW)
    q, _ = record(q, [gone], policy=policy, seen_before=frozenset({"a2"}), now=NOW)
    assert q.failures["a2"] == (NOW,)
    later = NOW + timedelta(minutes=5)
    again = NodeFault(node="a1", why="node a1 NotReady", since=later)
    q, new = record(q, [again], policy=policy, seen_before=frozenset(), now=later)
    assert q.nodes == {"a1"}
    assert [e.reason for e in new] == [Reason.NODE_QUARANTINED]


def test_rank_pods_stuck_on_a_lost_node_are_deleted() -> None:
    def terminating(pod: JSON) -> JSON:
        pod["metadata"]["deletionTimestamp"] = "2026-11-30T11:59:59Z"
        return pod

    obs = down(edit_pod(serving(groups=2), 0, 1, terminating), "a1")
    plan = decide(obs, gateway_image=GATEWAY_IMAGE)
    assert [r.name for r in plan.delete_pods] == [pod_name(0, 1)]


def test_a_replica_whose_pod_cannot_be_scheduled_moves_to_the_spare() -> None:
    def unschedulable(pod: JSON) -> JSON:
        pod["spec"] = {}
        pod["status"] = {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/9 nodes are available", "lastTransitionTime": "2026-11-30T11:58:00Z"}
            ],
        }  # fmt: skip
        return pod

    obs = edit_pod(serving(groups=2), 0, 2, unschedulable)
    plan = decide(obs, gateway_image=GATEWAY_IMAGE)
    (moved,) = events([plan], Reason.NODE_FAILOVER)
    assert moved.startswith(
        "replica 0: rank 2 pod on a2 cannot be scheduled (0/9 nodes are available); moved"
    )
    assert _groups(plan) == {"group-1"}


def test_label_discovered_groups_fail_over_too() -> None:
    label = "example.com/group"
    obj = cluster(groups=2)
    obj["spec"]["placement"] = {"nodeGroupLabel": label}
    facts = {
        n: NodeFacts(name=n, internal_ip=IPS[n], ready=True,
                     labels={label: g, "sparkllm.io/rank": str(r)})
        for g, group in (("a", A), ("b", B)) for r, n in enumerate(group)
    }  # fmt: skip
    obs = serving(obj=obj)
    obs = replace(obs, observed=replace(obs.observed, nodes=facts))
    obs, _ = run(obs, passes=3)
    assert sts_groups(obs) == {"a"}
    del facts["a1"]  # the node is gone: group "a" is no longer complete
    obs = replace(obs, observed=replace(obs.observed, nodes=dict(facts)))
    plan = decide(obs, gateway_image=GATEWAY_IMAGE)
    (moved,) = events([plan], Reason.NODE_FAILOVER)
    assert "node group 'a' is no longer complete: node a1 missing" in moved
    assert _groups(plan) == {"b"}
    assert nodes()  # the fixtures' full set is untouched


def test_a_pod_the_kubelet_rejected_moves_the_replica_and_counts_once() -> None:
    def rejected(pod: JSON) -> JSON:
        pod["metadata"]["creationTimestamp"] = "2026-11-30T11:59:30Z"
        pod["status"] = {"phase": "Failed", "reason": "UnexpectedAdmissionError"}
        return pod

    obs = edit_pod(serving(groups=2), 0, 0, rejected)
    plan = decide(obs, gateway_image=GATEWAY_IMAGE)
    (moved,) = events([plan], Reason.NODE_FAILOVER)
    assert moved.startswith(
        "replica 0: rank 0 pod on a0 rejected by the kubelet (UnexpectedAdmissionError); moved"
    )
    (failures,) = status_of(obs, plan)["nodeFailures"]
    assert failures["node"] == "a0"
    # Without a spare the replica stays; the same pod is one failure however many passes.
    held = edit_pod(serving(groups=1), 0, 0, rejected)
    after, _ = run(held, passes=1)
    again = decide(replace(after, observed=held.observed), gateway_image=GATEWAY_IMAGE)
    assert [len(f["times"]) for f in status_of(after, again).get("nodeFailures", [])] == [1]
