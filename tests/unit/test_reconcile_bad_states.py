"""Bad and stuck states become clear statuses (issue 16 items 1-3), decided without a cluster.

Each test builds what one pass observes and checks the plan: a spec that validates but
cannot be rendered is ``InvalidSpec`` with one Warning Event and no timer; a node group
another InferenceCluster holds is ``NodeGroupInUse`` naming it, before any rank object
exists; a rank pod the scheduler cannot place is ``Unschedulable`` with the scheduler's
words once the grace is over (and a timer for when it ends); ``replicas: 0`` is ``Stopped``.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from sparkllm.api import Reason
from sparkllm.reconcile.decide import decide
from sparkllm.reconcile.decide.actions import Plan
from sparkllm.reconcile.decide.observation import Observation
from sparkllm.reconcile.decide.replica_state import UNSCHEDULABLE_GRACE_SECONDS, unschedulable
from tests.unit.reconcile_fixtures import (
    GATEWAY_IMAGE,
    NOW,
    cluster,
    gateway_objects,
    observation,
    rank_pods,
    replica_objects,
    serving,
    with_status,
)

JSON = dict[str, Any]
GROUP_A = ["a0", "a1", "a2"]


def run(obs: Observation) -> Plan:
    return decide(obs, gateway_image=GATEWAY_IMAGE)


def conditions(plan: Plan) -> dict[str, JSON]:
    assert plan.status is not None
    return {c["type"]: c for c in plan.status["conditions"]}


def applied(plan: Plan) -> list[str]:
    return [f"{o['kind']}/{o['metadata']['name']}" for o in plan.apply]


def other(
    name: str, *nodes: list[str], namespace: str = "llm", created: str = "2026-11-30T10:00:00Z"
) -> JSON:
    """Another InferenceCluster whose status says its replicas run on ``nodes``."""
    return {
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": created},
        "status": {
            "replicaStatuses": [{"index": i, "nodes": list(n)} for i, n in enumerate(nodes)]
        },
    }


def created(obj: JSON, stamp: str) -> JSON:
    obj = copy.deepcopy(obj)
    obj["metadata"]["creationTimestamp"] = stamp
    return obj


# --- item 1: a SpecError anywhere in the pass --------------------------------------------


def test_a_spec_that_cannot_be_rendered_is_invalid_spec_once() -> None:
    # A template-kwargs flag whose value is not JSON passes the API's rules (CEL cannot
    # parse JSON) but cannot be rendered: the front door must read the same object (the
    # render step raises SpecError). The pass reports it instead of raising. (Flags and
    # values only an SGLang version judges are the launch check's: LaunchChecked.)
    extra = ["--default-chat-template-kwargs", "{not json"]
    obs = observation(cluster(groups=1, engine={"extraArgs": extra}), key_exists=False)
    plan = run(obs)
    assert plan.status is not None
    assert plan.status["phase"] == "Failed"
    ready = conditions(plan)["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert ready["message"].startswith(
        "spec.engine.extraArgs: --default-chat-template-kwargs is not JSON: "
    )
    assert [(e.warning, e.reason) for e in plan.events] == [(True, Reason.INVALID_SPEC)]
    assert plan.apply == ()
    assert plan.retry_after is None
    again = run(with_status(obs, plan.status))
    assert again.status is None
    assert again.events == ()


def test_an_invalid_spec_names_the_unknown_flag() -> None:
    obs = Observation(
        key=("llm", "llm"),
        obj=cluster(groups=1, engine={"extraArgs": ["--enable-magic-mode"]}),
        now=NOW,
        spec_error="InferenceCluster llm is invalid: spec.engine.extraArgs: extraArgs must use "
        "only flags of SGLang 0.5.23, spelled out in full; unknown: --enable-magic-mode",
    )
    plan = run(obs)
    ready = conditions(plan)["Ready"]
    assert ready["reason"] == "InvalidSpec"
    assert "unknown: --enable-magic-mode" in ready["message"]
    assert plan.events[0].reason is Reason.INVALID_SPEC
    assert plan.retry_after is None


# --- item 2: node groups other objects hold -----------------------------------------------


def test_an_explicit_group_held_by_another_object_is_node_group_in_use() -> None:
    obs = replace(
        observation(cluster(groups=1), key_exists=False), others=(other("first", GROUP_A),)
    )
    plan = run(obs)
    progressing = conditions(plan)["Progressing"]
    assert (progressing["status"], progressing["reason"]) == ("False", "NodeGroupInUse")
    assert (
        "node group 'group-0' (a0, a1, a2) is in use by InferenceCluster llm/first"
        in (progressing["message"])
    )
    assert not [name for name in applied(plan) if name.startswith("StatefulSet/llm-r")]
    warnings = [e for e in plan.events if e.reason is Reason.NODE_GROUP_IN_USE]
    assert len(warnings) == 1
    assert warnings[0].warning
    assert "llm/first" in warnings[0].message
    again = run(with_status(obs, plan.status))
    assert not [e for e in again.events if e.reason is Reason.NODE_GROUP_IN_USE]


def test_a_free_explicit_group_is_taken_instead() -> None:
    obs = replace(
        observation(cluster(groups=2), key_exists=False), others=(other("first", GROUP_A),)
    )
    plan = run(obs)
    assert "StatefulSet/llm-r0-rank0" in applied(plan)
    assert conditions(plan)["Progressing"]["reason"] != "NodeGroupInUse"
    rank0 = next(o for o in plan.apply if o["metadata"]["name"] == "llm-r0-rank0")
    assert "b0" in str(rank0["spec"]["template"]["spec"]["affinity"])


def test_a_group_held_by_an_object_in_another_namespace_counts_too() -> None:
    held = other("first", GROUP_A, namespace="team-b")
    plan = run(replace(observation(cluster(groups=1), key_exists=False), others=(held,)))
    assert "in use by InferenceCluster team-b/first" in conditions(plan)["Progressing"]["message"]


def test_an_object_without_placed_replicas_holds_nothing() -> None:
    idle = {"metadata": {"name": "idle", "namespace": "llm"}, "status": {"phase": "Failed"}}
    plan = run(replace(observation(cluster(groups=1), key_exists=False), others=(idle,)))
    assert "StatefulSet/llm-r0-rank0" in applied(plan)


def _running_on_group_a(*, me: str) -> Observation:
    """This object's replica 0 runs on group a (its StatefulSets exist)."""
    obj = created(cluster(groups=1), me)
    objects = gateway_objects(obj) + replica_objects(obj, 0)
    return observation(obj, objects=objects, pods=rank_pods(replica_objects(obj, 0)))


def test_a_running_replica_keeps_its_group_when_a_younger_object_also_took_it() -> None:
    obs = _running_on_group_a(me="2026-11-30T09:00:00Z")
    younger = other("second", GROUP_A, created="2026-11-30T10:00:00Z")
    plan = run(replace(obs, others=(younger,)))
    assert not plan.prune
    assert conditions(plan)["Progressing"]["reason"] != "NodeGroupInUse"


def test_the_younger_of_two_simultaneous_claims_yields_the_group() -> None:
    obs = _running_on_group_a(me="2026-11-30T11:00:00Z")
    older = other("first", GROUP_A, created="2026-11-30T10:00:00Z")
    plan = run(replace(obs, others=(older,)))
    pruned = {f"{r.kind}/{r.name}" for r in plan.prune}
    assert {"StatefulSet/llm-r0-rank0", "StatefulSet/llm-r0-rank2"} <= pruned
    progressing = conditions(plan)["Progressing"]
    assert progressing["reason"] == "NodeGroupInUse"
    assert "llm/first" in progressing["message"]


# --- item 2: rank pods the scheduler cannot place -----------------------------------------


def _unscheduled(pod: JSON, *, since: float, message: str) -> JSON:
    pod = copy.deepcopy(pod)
    pod["spec"] = {}
    stamp = (NOW - timedelta(seconds=since)).strftime("%Y-%m-%dT%H:%M:%SZ")
    pod["status"] = {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": message, "lastTransitionTime": stamp}
        ],
    }  # fmt: skip
    return pod


SCHEDULER = "0/6 nodes are available: 1 node(s) had untolerated taint {gpu: broken}."


def _one_rank_unscheduled(*, since: float) -> Observation:
    obs = serving(groups=1)  # no spare group to move to (that is test_reconcile_spares')
    pods = list(obs.observed.pods)
    index = next(i for i, p in enumerate(pods) if p["metadata"]["name"] == "llm-r0-rank1-0")
    pods[index] = _unscheduled(pods[index], since=since, message=SCHEDULER)
    return replace(obs, observed=replace(obs.observed, pods=pods))


def test_a_rank_pod_pending_past_the_grace_is_unschedulable_with_the_schedulers_words() -> None:
    plan = run(_one_rank_unscheduled(since=UNSCHEDULABLE_GRACE_SECONDS + 30))
    progressing = conditions(plan)["Progressing"]
    assert (progressing["status"], progressing["reason"]) == ("False", "Unschedulable")
    assert progressing["message"] == (
        f"pod llm-r0-rank1-0 (replica 0, rank 1) cannot be scheduled: {SCHEDULER}"
    )
    assert [e.reason for e in plan.events if e.warning] == [Reason.UNSCHEDULABLE]


def test_within_the_grace_it_is_not_reported_yet_and_a_pass_is_due_when_it_ends() -> None:
    plan = run(_one_rank_unscheduled(since=10))
    progressing = conditions(plan)["Progressing"] if plan.status else {}
    assert progressing.get("reason") != "Unschedulable"
    assert plan.retry_after is not None
    assert plan.retry_after <= UNSCHEDULABLE_GRACE_SECONDS - 10


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda p: p["metadata"].update(deletionTimestamp="2026-11-30T11:59:00Z"), "deleting"),
        (lambda p: p["spec"].update(nodeName="a1"), "bound to a node"),
        (lambda p: p["status"]["conditions"][0].update(reason="SchedulingGated"), "gated"),
        (lambda p: p["status"]["conditions"][0].update(status="True"), "scheduled"),
    ],
)
def test_only_pods_the_scheduler_refused_count(edit: Any, why: str) -> None:
    pod = _unscheduled(
        {"metadata": {"name": "p", "labels": {}}},
        since=UNSCHEDULABLE_GRACE_SECONDS * 2,
        message="m",
    )
    assert unschedulable([pod], now=NOW).messages, why
    edit(pod)
    assert unschedulable([pod], now=NOW) == unschedulable([], now=NOW), why


# --- item 3: replicas 0 ----------------------------------------------------------------------


def test_replicas_zero_is_stopped_not_ready() -> None:
    plan = run(observation(cluster(replicas=0), key_exists=True))
    assert plan.status is not None
    assert plan.status["phase"] == "Stopped"
    ready = conditions(plan)["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "ScaledToZero")


def _gateway_pod(*, since: float) -> dict[str, Any]:
    """A gateway pod that follows the rank pods (required pod affinity), unschedulable."""
    term = {"labelSelector": {"matchLabels": {"app.kubernetes.io/component": "engine"}},
            "topologyKey": "kubernetes.io/hostname"}  # fmt: skip
    pod = {"metadata": {"name": "llm-5f-x",
                        "labels": {"app.kubernetes.io/component": "gateway"}}}  # fmt: skip
    pod = _unscheduled(pod, since=since, message="0/6 nodes: didn't match pod affinity rules")
    required = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    pod["spec"] = {"affinity": {"podAffinity": required}}  # not yet bound to a node
    return pod


def test_a_pod_that_follows_the_ranks_waits_for_them_and_is_named_by_its_component() -> None:
    """The gateway's pod affinity needs a placed rank pod: while none is (the ranks held
    while the model stages), it waits and is not reported; once one is, it is, by name."""
    gateway = _gateway_pod(since=UNSCHEDULABLE_GRACE_SECONDS * 2)
    assert unschedulable([gateway], now=NOW).messages == ()
    rank = {
        "metadata": {"name": "llm-r0-rank0-0",
                     "labels": {"app.kubernetes.io/component": "engine"}},
        "spec": {"nodeName": "a0"},
    }  # fmt: skip
    (message,) = unschedulable([gateway, rank], now=NOW).messages
    assert message.startswith("pod llm-5f-x (gateway) cannot be scheduled: 0/6 nodes")
