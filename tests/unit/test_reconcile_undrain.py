"""A drain abandoned mid-way puts rank 0 back in routing (issue 16 item 5).

A replica scaled down is drained first: its rank-0 pod gets ``serving=false`` and the
drain's start stamp, and its objects go once its requests finish. Scaled back up in the
middle of that drain, the replica keeps its pods — and the StatefulSet never relabels a
live pod — so the pass must put ``serving=true`` back and clear the stamps. A planned
restart's drain (a reason on the pod) is not undone: the restart still goes ahead.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sparkllm.keys import ANNOTATION_DRAIN_REASON, ANNOTATION_DRAIN_STARTED, LABEL_SERVING
from sparkllm.reconcile.decide import decide
from sparkllm.reconcile.decide.actions import Plan, PodPatch
from sparkllm.reconcile.decide.drain import undrain_patch
from sparkllm.reconcile.decide.observation import Observation
from sparkllm.reconcile.decide.restarts import FORCE_CAUSE
from tests.unit.reconcile_fixtures import GATEWAY_IMAGE, later, serving, with_obj
from tests.unit.reconcile_world import edit_pod, pod_name

JSON = dict[str, Any]
BACK = {
    "metadata": {
        "labels": {LABEL_SERVING: "true"},
        "annotations": {ANNOTATION_DRAIN_STARTED: None, ANNOTATION_DRAIN_REASON: None},
    }
}


def run(obs: Observation) -> Plan:
    return decide(obs, gateway_image=GATEWAY_IMAGE)


def with_replicas(obs: Observation, replicas: int, generation: int) -> Observation:
    assert obs.obj is not None
    obj = {**obs.obj, "spec": {**obs.obj["spec"], "replicas": replicas},
           "metadata": {**obs.obj["metadata"], "generation": generation}}  # fmt: skip
    return with_obj(obs, obj)


def marked(patch: PodPatch) -> Any:
    """Apply a pod patch the way the API server's merge patch does (None deletes)."""

    def edit(pod: JSON) -> JSON:
        for field in ("labels", "annotations"):
            for key, value in (patch.patch["metadata"].get(field) or {}).items():
                if value is None:
                    pod["metadata"].setdefault(field, {}).pop(key, None)
                else:
                    pod["metadata"].setdefault(field, {})[key] = value
        return pod

    return edit


def test_scaled_down_then_up_mid_drain_puts_rank0_back_in_routing() -> None:
    obs = with_replicas(serving(replicas=2), 1, generation=2)
    (out,) = run(obs).pod_patches  # the scale-down drain: replica 1 out of routing
    assert out.name == pod_name(1, 0)
    assert out.patch["metadata"]["labels"] == {LABEL_SERVING: "false"}
    draining = later(edit_pod(obs, 1, 0, marked(out)), 10)
    assert run(replace(draining, running_requests={1: 3})).pod_patches == ()  # still waits
    back = with_replicas(draining, 2, generation=3)  # scaled back up mid-drain
    plan = run(back)
    (undo,) = plan.pod_patches
    assert (undo.name, undo.patch) == (pod_name(1, 0), BACK)
    assert not plan.prune  # the replica's objects stay
    restored = edit_pod(back, 1, 0, marked(undo))
    pod = next(p for p in restored.observed.pods if p["metadata"]["name"] == pod_name(1, 0))
    assert pod["metadata"]["labels"][LABEL_SERVING] == "true"
    assert ANNOTATION_DRAIN_STARTED not in pod["metadata"]["annotations"]
    assert run(restored).pod_patches == ()  # once back, nothing more to write


def test_a_planned_restarts_drain_is_not_undone() -> None:
    obs = serving(replicas=1)
    stamps = {
        ANNOTATION_DRAIN_STARTED: "2026-11-30T12:00:00Z",
        ANNOTATION_DRAIN_REASON: FORCE_CAUSE,
    }
    out = PodPatch(name="", namespace="", patch={
        "metadata": {"labels": {LABEL_SERVING: "false"}, "annotations": stamps}})  # fmt: skip
    drain = replace(later(edit_pod(obs, 0, 0, marked(out)), 3), running_requests={0: 2})
    assert run(drain).pod_patches == ()  # drains on; rank 0 stays out of routing


def test_undrain_patch_only_for_a_rank0_taken_out() -> None:
    pod: JSON = {"metadata": {"name": "p", "namespace": "n", "labels": {LABEL_SERVING: "true"}}}
    assert undrain_patch(pod) is None
    stamped = {**pod["metadata"], "annotations": {ANNOTATION_DRAIN_STARTED: "x"}}
    assert undrain_patch({"metadata": stamped}) is not None
    out = {**pod["metadata"], "labels": {LABEL_SERVING: "false"}}
    patch = undrain_patch({"metadata": out})
    assert patch is not None
    assert patch.patch == BACK
    assert undrain_patch({"metadata": {**out, "deletionTimestamp": "2026-11-30T12:00:00Z"}}) is None
