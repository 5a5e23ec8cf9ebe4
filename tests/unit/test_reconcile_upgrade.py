"""Issue 32: an operator upgrade restarts no engine by itself (render/rank_stamp.py,
reconcile/decide/upgrade.py), pinned without a cluster.

The rank pods record their making; a pass of a newer operator (here: another image tag,
which changes the init containers) shows UpdatePending and applies the new template to the
StatefulSets only; ``sparkllm.io/restart=now`` or ``upgrade.applyOperatorChanges: drained``
take it, drained, with a cause that says so; a user's spec change still rolls as before.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from sparkllm.api import InferenceCluster
from sparkllm.api.validate import validate_inference_cluster
from sparkllm.errors import SparkllmError
from sparkllm.keys import ANNOTATION_DRAIN_REASON, ANNOTATION_OPERATOR_VERSION, ANNOTATION_RESTART
from sparkllm.reconcile.decide import decide
from sparkllm.reconcile.decide.actions import Plan
from sparkllm.reconcile.decide.observation import Observation
from sparkllm.reconcile.decide.replicas import cause_class
from sparkllm.reconcile.decide.restarts import UPDATE_CAUSE, is_requested
from sparkllm.reconcile.decide.secrets import engine_key_ref
from sparkllm.reconcile.decide.upgrade import (
    APPLY_ENV,
    TEMPLATE_CAUSE,
    PendingUpdate,
    UpgradeSettings,
    adopt_patches,
    drift,
    restart_request,
    update_pending_condition,
    upgrade_settings_from,
)
from sparkllm.render import ReplicaPlan, render_replica
from sparkllm.render.product_image import ProductImage
from sparkllm.render.rank_stamp import Stamp, operator_version
from tests.unit.reconcile_fixtures import (
    GATEWAY_IMAGE,
    cluster,
    serving,
    with_obj,
    with_status,
)
from tests.unit.reconcile_world import pod_name
from tests.unit.test_reconcile_decide import restart_draining

JSON = dict[str, Any]
NEW = ProductImage("registry.example/sparkllm:test2")  # the upgraded operator's image
NODES = ("a0", "a1", "a2")


def _stamps(ic_obj: JSON, image: ProductImage, *, rank0_ip: str = "10.0.0.10") -> list[Stamp]:
    ic: InferenceCluster = validate_inference_cluster(ic_obj)
    plan = ReplicaPlan(index=0, group_key="a", nodes=NODES, rank0_ip=rank0_ip, generation=1)
    objects = render_replica(ic, plan=plan, engine_key=engine_key_ref(ic), tools_image=image)
    return [
        Stamp.of(o["spec"]["template"]["metadata"]["annotations"])
        for o in objects
        if o["kind"] == "StatefulSet"
    ]


def _pods(stamps: list[Stamp], generation: int = 1) -> list[JSON]:
    """Rank pods carrying ``stamps`` as their annotations."""
    pods = []
    for rank, s in enumerate(stamps):
        annotations = {
            "sparkllm.io/template-hash": s.template,
            "sparkllm.io/template-parts": ",".join(f"{k}={v}" for k, v in s.parts.items()),
            "sparkllm.io/spec-hash": s.spec,
            ANNOTATION_OPERATOR_VERSION: s.version,
        }
        labels = {"sparkllm.io/rank": str(rank), "sparkllm.io/restart-generation": str(generation)}
        pods.append({"metadata": {"labels": labels, "annotations": annotations}})
    return pods


# --- the stamp ------------------------------------------------------------------------


def test_a_new_operator_image_changes_only_the_init_containers_section() -> None:
    old, new = _stamps(cluster(), GATEWAY_IMAGE), _stamps(cluster(), NEW)
    for before, after in zip(old, new, strict=True):
        assert before.template != after.template  # the whole template differs...
        assert before.changed(after) == ("init",)  # ...but not the engine's sections
        assert before.spec == after.spec
        assert (before.version, after.version) == ("test", "test2")


def test_a_spec_change_changes_the_spec_digest_and_the_engine() -> None:
    old = _stamps(cluster(), GATEWAY_IMAGE)
    new = _stamps(cluster(engine={"chunkedPrefillSize": 2048}), GATEWAY_IMAGE)
    assert all(o.spec != n.spec and "engine" in o.changed(n) for o, n in zip(old, new, strict=True))
    scaled = _stamps(cluster(replicas=2, admission={"maxConcurrentRequests": 4}), GATEWAY_IMAGE)
    assert [s.spec for s in scaled] == [s.spec for s in old]  # not rank-shaping


@pytest.mark.parametrize(
    ("reference", "version"),
    [
        ("ghcr.io/sparkllm/sparkllm:0.2.0", "0.2.0"),
        ("localhost:5000/sparkllm:0.3.1", "0.3.1"),
        ("r.local/sparkllm@sha256:" + "ab" * 32, "0.1.0@abababababab"),
    ],
)
def test_operator_version_is_the_image_tag(reference: str, version: str) -> None:
    assert operator_version(ProductImage(reference)) == version


# --- drift: why the pods differ --------------------------------------------------------


def test_operator_update_is_pending_not_a_restart() -> None:
    old, new = _stamps(cluster(), GATEWAY_IMAGE), _stamps(cluster(), NEW)
    got = drift(_pods(old), 1, dict(enumerate(new)))
    assert got.roll is None
    assert got.pending == PendingUpdate("test", "test2", ("init",))
    assert got.pending is not None
    assert not got.pending.engine
    assert drift(_pods(old, generation=1), 2, dict(enumerate(new))).pending is None  # old gen


def test_spec_change_rolls_even_with_a_new_operator() -> None:
    old = _stamps(cluster(), GATEWAY_IMAGE)
    new = _stamps(cluster(engine={"chunkedPrefillSize": 2048}), NEW)
    assert drift(_pods(old), 1, dict(enumerate(new))).roll == UPDATE_CAUSE


def test_same_operator_same_spec_new_node_address_rolls_as_a_template_change() -> None:
    old = _stamps(cluster(), GATEWAY_IMAGE)
    new = _stamps(cluster(), GATEWAY_IMAGE, rank0_ip="10.0.0.99")
    assert drift(_pods(old), 1, dict(enumerate(new))).roll == TEMPLATE_CAUSE


def test_pods_without_a_stamp_wait_as_an_operator_update() -> None:
    new = _stamps(cluster(), NEW)
    bare = [{"metadata": p["metadata"] | {"annotations": {}}} for p in _pods(new)]
    got = drift(bare, 1, dict(enumerate(new)))
    assert got.roll is None
    assert got.pending is not None
    assert got.pending.from_version == "unrecorded"
    assert got.pending.engine


def test_the_setting_is_read_and_checked() -> None:
    assert upgrade_settings_from({}) == UpgradeSettings("onRestart")
    assert upgrade_settings_from({APPLY_ENV: "drained"}) == UpgradeSettings("drained")
    with pytest.raises(SparkllmError, match=f"^{APPLY_ENV}: 'now' is not one of"):
        upgrade_settings_from({APPLY_ENV: "now"})


def test_causes_are_classified_and_requested_ones_recognised() -> None:
    pending = PendingUpdate("0.1.0", "0.2.0", ("init",))
    assert cause_class(pending.cause + " (requested)") == "operator_update"
    assert is_requested("operator update 0.1.0 -> 0.2.0 (requested)")
    assert not is_requested("operator update 0.1.0 -> 0.2.0 (upgrade.applyOperatorChanges=drained)")
    assert cause_class(TEMPLATE_CAUSE) == "update"


def test_condition_names_versions_sections_and_what_applies_it() -> None:
    pending = [(0, PendingUpdate("0.1.0", "0.2.0", ("init", "labels")))]
    (cond,) = update_pending_condition(pending, {}, generation=3, settings=UpgradeSettings())
    assert (cond["status"], cond["reason"]) == ("True", "OperatorUpdatePending")
    assert cond["message"] == (
        "operator update 0.1.0 -> 0.2.0 changes the init containers, labels of replica(s) 0: "
        "no new engine process (only what runs before or around it); applied at each "
        "replica's next restart, or now, drained, with the annotation sparkllm.io/restart=now"
    )
    assert update_pending_condition([], {}, generation=3, settings=UpgradeSettings()) == ()
    before = {"conditions": [cond]}
    (done,) = update_pending_condition([], before, generation=3, settings=UpgradeSettings())
    assert (done["status"], done["reason"]) == ("False", "RankPodsCurrent")


# --- whole passes --------------------------------------------------------------------------


def _upgraded(obs: Observation, **kwargs: Any) -> Plan:
    return decide(obs, gateway_image=NEW, **kwargs)


def _condition(obs: Observation, plan: Plan, kind: str) -> JSON:
    status = plan.status if plan.status is not None else (obs.obj or {}).get("status") or {}
    return next(c for c in status["conditions"] if c["type"] == kind)


def _stopped(plan: Plan) -> set[str]:
    return {
        o["metadata"]["name"]
        for o in plan.apply
        if o["kind"] == "StatefulSet" and o["spec"]["replicas"] == 0
    }


def test_upgraded_operator_restarts_nothing_shows_pending_and_updates_templates() -> None:
    obs = serving(replicas=2)
    plan = _upgraded(obs)
    assert plan.gang_restarts == ()
    assert plan.pod_patches == ()
    assert _stopped(plan) == set()
    templates = [o for o in plan.apply if o["kind"] == "StatefulSet"]
    assert len(templates) == 6  # every rank's template updated in place (OnDelete)
    for sts in templates:
        annotations = sts["spec"]["template"]["metadata"]["annotations"]
        assert annotations[ANNOTATION_OPERATOR_VERSION] == "test2"
        assert sts["spec"]["replicas"] == 1
    cond = _condition(obs, plan, "UpdatePending")
    assert cond["status"] == "True"
    assert cond["message"].startswith(
        "operator update test -> test2 changes the init containers of replica(s) 0, 1:"
    )
    assert [r["phase"] for r in plan.status["replicaStatuses"]] == ["Ready", "Ready"]  # type: ignore[index]


def test_restart_now_applies_the_update_drained_with_a_true_cause() -> None:
    obs = serving(replicas=2)
    assert obs.obj is not None
    obj = {
        **obs.obj,
        "metadata": {**obs.obj["metadata"], "annotations": {ANNOTATION_RESTART: "now"}},
    }
    plan = _upgraded(with_obj(obs, obj))
    reasons = {
        p.name: p.patch["metadata"]["annotations"][ANNOTATION_DRAIN_REASON]
        for p in plan.pod_patches
    }
    assert reasons == {pod_name(i, 0): "operator update test -> test2 (requested)" for i in (0, 1)}
    assert _stopped(plan) == set()  # drained first, stopped once drained
    assert plan.annotations == {"metadata": {"annotations": {ANNOTATION_RESTART: None}}}


def test_drained_setting_rolls_one_replica_at_a_time() -> None:
    obs = serving(replicas=2)
    plan = _upgraded(obs, upgrade=UpgradeSettings("drained"))
    (patch,) = plan.pod_patches
    assert patch.name == pod_name(0, 0)
    assert patch.patch["metadata"]["annotations"][ANNOTATION_DRAIN_REASON] == (
        "operator update test -> test2 (upgrade.applyOperatorChanges=drained)"
    )
    messages = [r["message"] for r in plan.status["replicaStatuses"]]  # type: ignore[index]
    assert messages[1] == "update waits for the other replicas"


def test_same_operator_after_the_upgrade_is_quiet() -> None:
    obs = serving(replicas=1)
    first = _upgraded(obs)
    again = _upgraded(with_status(obs, first.status))
    assert again.gang_restarts == ()
    assert again.pod_patches == ()
    assert again.status is None


def test_a_spec_change_after_the_upgrade_still_rolls() -> None:
    obs = serving(replicas=1)
    assert obs.obj is not None
    spec = {**obs.obj["spec"], "engine": {**obs.obj["spec"]["engine"], "chunkedPrefillSize": 2048}}
    obj = {**obs.obj, "spec": spec, "metadata": {**obs.obj["metadata"], "generation": 2}}
    plan = _upgraded(replace(with_obj(obs, obj)))
    (patch,) = plan.pod_patches
    assert patch.patch["metadata"]["annotations"][ANNOTATION_DRAIN_REASON] == UPDATE_CAUSE


def test_a_requested_update_stops_once_drained_with_its_cause() -> None:
    """The annotation is consumed at once; the drain on rank 0 carries the cause to the stop."""
    cause = "operator update test -> test2 (requested)"
    drained = restart_draining(lambda: serving(replicas=1), reason=cause, seconds=10, running=0)
    plan = _upgraded(drained())
    assert plan.gang_restarts == ("operator_update",)
    assert _stopped(plan) == {f"llm-r0-rank{r}" for r in range(3)}
    (replica,) = plan.status["replicaStatuses"]  # type: ignore[index]
    assert replica["lastRestart"]["reason"] == cause


def test_the_spec_digest_ignores_defaults_so_a_new_default_is_an_operator_change() -> None:
    spelled = cluster(engine={"tensorParallel": 1}, restartPolicy={"startupGraceSeconds": 1800})
    assert _stamps(spelled, GATEWAY_IMAGE)[0].spec == _stamps(cluster(), GATEWAY_IMAGE)[0].spec
    other = cluster(restartPolicy={"startupGraceSeconds": 600})
    assert _stamps(other, GATEWAY_IMAGE)[0].spec != _stamps(cluster(), GATEWAY_IMAGE)[0].spec


def test_a_security_fix_is_named_in_the_condition() -> None:
    pending = [(0, PendingUpdate("0.1.0", "0.2.0", ("engine",)))]
    fixes = {"0.2.0": "the engine key no longer reaches the launcher's argv"}
    (cond,) = update_pending_condition(
        pending, {}, generation=1, settings=UpgradeSettings(), security=fixes
    )
    assert cond["message"].startswith(
        "operator update 0.1.0 -> 0.2.0 changes the engine container of replica(s) 0: a new "
        "engine process; SECURITY FIX in 0.2.0 (the engine key no longer reaches the "
        "launcher's argv): apply it now; applied at each replica's next restart"
    )


@pytest.mark.parametrize("value", ["true", "Now", "yes", ""])
def test_a_restart_annotation_other_than_now_is_refused_in_words_and_removed(value: str) -> None:
    """It sat on the object doing nothing, while the user waited for a restart: now a
    Warning Event says so and the annotation goes; nothing restarts."""
    obs = serving(replicas=2)
    assert obs.obj is not None
    obj = {
        **obs.obj,
        "metadata": {**obs.obj["metadata"], "annotations": {ANNOTATION_RESTART: value}},
    }
    plan = _upgraded(with_obj(obs, obj))
    assert plan.gang_restarts == ()
    assert plan.pod_patches == ()
    assert _stopped(plan) == set()
    assert plan.annotations == {"metadata": {"annotations": {ANNOTATION_RESTART: None}}}
    refused = [e for e in plan.events if e.reason == "RestartAnnotationRefused"]
    assert [(e.warning, e.message) for e in refused] == [
        (
            True,
            f"annotation sparkllm.io/restart={value!r} is not understood: only 'now' "
            "restarts the replicas (drained); nothing was restarted and the annotation was "
            "removed",
        )
    ]
    assert restart_request({ANNOTATION_RESTART: "now"}).force
    assert not restart_request({}).answered


# --- pods of an operator from before the stamp: a user's spec change still rolls ----------

_STAMPS = ("sparkllm.io/template-parts", "sparkllm.io/spec-hash", ANNOTATION_OPERATOR_VERSION)


def _prestamp(pods: list[JSON]) -> list[JSON]:
    """The pods as an operator from before issue 32 made them: template hash only."""
    out = []
    for i, pod in enumerate(pods):
        meta = pod["metadata"]
        kept = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in _STAMPS}
        out.append({**pod, "metadata": {"name": f"p{i}", "namespace": "llm", **meta,
                                        "annotations": kept}})  # fmt: skip
    return out


def test_prestamp_pods_get_the_spec_digest_then_a_spec_change_rolls() -> None:
    """Without the adoption a user's spec change on such pods waited as "operator update
    unrecorded -> test2" (no roll, and a restart cause that would not be true)."""
    old = _prestamp(_pods(_stamps(cluster(), GATEWAY_IMAGE)))
    same = dict(enumerate(_stamps(cluster(), NEW)))
    changed = dict(enumerate(_stamps(cluster(engine={"chunkedPrefillSize": 2048}), NEW)))
    assert drift(old, 1, changed).roll is None  # what a spec change met before
    patches = adopt_patches(old, 1, same)
    assert [(p.name, p.patch) for p in patches] == [
        (f"p{rank}", {"metadata": {"annotations": {"sparkllm.io/spec-hash": same[rank].spec}}})
        for rank in range(3)
    ]
    adopted = [
        {**pod, "metadata": {**pod["metadata"], "annotations": {
            **pod["metadata"]["annotations"], **p.patch["metadata"]["annotations"]}}}
        for pod, p in zip(old, patches, strict=True)
    ]  # fmt: skip
    assert adopt_patches(adopted, 1, same) == []  # once
    waiting = drift(adopted, 1, same)
    assert waiting.roll is None
    assert waiting.pending is not None
    assert waiting.pending.from_version == "unrecorded"  # still an operator update
    assert drift(adopted, 1, changed).roll == UPDATE_CAUSE
    assert adopt_patches(old, 2, same) == []  # not the running generation


def test_a_pass_over_prestamp_pods_adopts_them_and_restarts_nothing() -> None:
    obs = serving(replicas=2)
    bare = replace(obs, observed=replace(obs.observed, pods=_prestamp(obs.observed.pods)))
    plan = _upgraded(bare)
    assert plan.gang_restarts == ()
    assert _stopped(plan) == set()
    assert len(plan.pod_patches) == 6
    assert {tuple(p.patch["metadata"]["annotations"]) for p in plan.pod_patches} == {
        ("sparkllm.io/spec-hash",)
    }
    assert _condition(bare, plan, "UpdatePending")["status"] == "True"
