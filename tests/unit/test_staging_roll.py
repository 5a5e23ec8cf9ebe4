"""A new revision staged beside the old copy, replicas rolled one at a time, old copies cleaned.

Issue 31 item 4, pure, pass by pass on two replicas (groups a and b): revision A staged and
served; the source changes to B. B's stage Jobs are made for both groups at once and
nobody stops (no rank template changes while a group stages); group a staged first:
replica 0 flips to B's copy (its spec hash changes, the existing rolling update restarts
it, cause ``model staged: A -> B``) while replica 1 stays on A; a failed B keeps both on A
with ModelStaged False; the gateway mounts B only once every group holds it; the clean
Jobs (``--clean --keep-previous 1`` on B's copy) appear only once both replicas' pods run
B and are Ready and the gateway rolled onto it, and StagingCleaned is said once per group.
The live objects are rendered by the operator's own code (render_replica, render_gateway)
with the copy each one runs, as the cluster would show them.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sparkllm.api import Reason, validate_inference_cluster
from sparkllm.cli_args import parse_args
from sparkllm.reconcile.decide import decide
from sparkllm.reconcile.decide.actions import Plan
from sparkllm.reconcile.decide.observation import Observation
from sparkllm.reconcile.decide.replicas import cause_class
from sparkllm.reconcile.decide.secrets import engine_key_ref
from sparkllm.reconcile.decide.staging_copies import statefulset_copies
from sparkllm.reconcile.decide.staging_seen import Outcome, StagingJob
from sparkllm.render import ReplicaPlan, render_replica
from sparkllm.render.gateway import render_gateway
from sparkllm.render.model_access import model_node_affinity
from sparkllm.render.model_layout import copy_dir, staging_digest
from sparkllm.render.model_staging import Role, staging_job_name
from sparkllm.staging.args import StageModelArgs
from sparkllm.staging.progress import read_record
from tests.unit.reconcile_fixtures import (
    GATEWAY_IMAGE,
    GROUPS,
    IPS,
    NAME,
    NAMESPACE,
    cluster,
    matching,
    observation,
    rank_pods,
    status_of,
    with_status,
)

JSON = dict[str, Any]
PATH = "/models/DeepSeek-V4-Flash-NVFP4"
DIGEST_KEY = "sparkllm.io/model-digest"


def spec(prefix: str) -> JSON:
    source = {"s3": {"endpoint": "https://s3.corp.example", "bucket": "models", "prefix": prefix}}
    return cluster(replicas=2, groups=2, model={"source": source})


A, B = spec("toy-a/"), spec("toy-b/")
DA, DB = (staging_digest(validate_inference_cluster(o)) for o in (A, B))


def live(obj: JSON, uid: str) -> JSON:
    out = copy.deepcopy(obj)
    out["metadata"]["uid"] = uid
    return out


def replica_on(obj: JSON, index: int, digest: str) -> list[JSON]:
    """Replica ``index``'s StatefulSets and Service as rendered for the copy ``digest``."""
    ic = validate_inference_cluster(obj)
    nodes = GROUPS[index]
    plan = ReplicaPlan(
        index=index, group_key=f"group-{index}", nodes=nodes, rank0_ip=IPS[nodes[0]],
        generation=1, node_ips=tuple(IPS[n] for n in nodes), model_digest=digest,
    )  # fmt: skip
    rendered = render_replica(
        ic, plan=plan, engine_key=engine_key_ref(ic), tools_image=GATEWAY_IMAGE
    )
    return [live(o, f"uid-{o['metadata']['name']}") for o in rendered]


def gateway_on(obj: JSON, digest: str, *, rolled: bool = True) -> list[JSON]:
    ic = validate_inference_cluster(obj)
    rendered = render_gateway(
        ic, engine_key=engine_key_ref(ic), gateway_image=GATEWAY_IMAGE, model_digest=digest
    )
    out = [live(o, f"uid-{o['kind']}-{o['metadata']['name']}") for o in rendered]
    for o in out:
        if o["kind"] == "Deployment":
            o["metadata"]["generation"] = 2
            count = o["spec"]["replicas"]
            o["status"] = {
                "observedGeneration": 2 if rolled else 1, "replicas": count + (0 if rolled else 1),
                "updatedReplicas": count, "availableReplicas": count,
            }  # fmt: skip
    return out


def world(obj: JSON, runs: Sequence[tuple[str, str]], gateway: str, **kw: Any) -> Observation:
    """``obj`` with replica i's StatefulSets on ``runs[i][0]`` and its pods on ``runs[i][1]``,
    each rendered from the spec of the revision it runs (as the pass that made it did)."""
    made_from = {DA: A, DB: B}
    objects = gateway_on(made_from[gateway], gateway, rolled=kw.pop("rolled", True))
    pods: list[JSON] = []
    for index, (sts_copy, pod_copy) in enumerate(runs):
        objects += replica_on(made_from[sts_copy], index, sts_copy)
        pods += rank_pods(replica_on(made_from[pod_copy], index, pod_copy))
    return observation(obj, objects=objects, pods=pods, server_info=matching(0, 1), **kw)


def job(
    replica: int, rank: int, digest: str, outcome: Outcome, role: Role = "stage", **kw: Any
) -> StagingJob:
    node = GROUPS[replica][rank]
    name = staging_job_name(NAME, replica=replica, rank=rank, role=role, digest=digest, node=node)
    return StagingJob(
        name=name, namespace=NAMESPACE, uid=f"uid-{name}", digest=digest, role=role,
        replica=replica, node=node, outcome=outcome, **kw,
    )  # fmt: skip


def staged(replica: int, digest: str) -> tuple[StagingJob, ...]:
    return tuple(job(replica, rank, digest, "succeeded") for rank in range(3))


def run(obs: Observation) -> Plan:
    return decide(obs, gateway_image=GATEWAY_IMAGE)


def settle(obs: Observation) -> tuple[Observation, Plan]:
    """Passes with the status written back until it holds (nothing else changes); the
    last pass's plan, its status filled in from the object when it wrote none."""
    plan = run(obs)
    for _ in range(4):
        obs = with_status(obs, plan.status)
        again = run(obs)
        if again.status is None or again.status == plan.status:
            return obs, replace(again, status=status_of(obs, again))
        plan = again
    raise AssertionError("the status did not settle")


def applied(plan: Plan, kind: str) -> list[JSON]:
    return [o for o in plan.apply if o["kind"] == kind]


def model_path(obj: JSON) -> str:
    volumes = obj["spec"]["template"]["spec"]["volumes"]
    return str(next(v for v in volumes if v["name"] == "model")["hostPath"]["path"])


def condition(plan_or_status: JSON, kind: str = "ModelStaged") -> JSON:
    return next(c for c in plan_or_status["conditions"] if c["type"] == kind)


def roles(jobs: Sequence[JSON], role: str) -> list[JSON]:
    return [j for j in jobs if j["metadata"]["labels"]["sparkllm.io/staging-role"] == role]


def args_of(made: JSON) -> StageModelArgs:
    words = made["spec"]["template"]["spec"]["containers"][0]["args"]
    return parse_args(StageModelArgs, words[1:])


def cleaned(replica: int, digest: str, freed: int) -> tuple[StagingJob, ...]:
    return tuple(
        job(replica, rank, digest, "succeeded", role="clean", bytes_freed=freed)
        for rank in range(3)
    )


def test_the_layout_is_one_directory_per_digest_beside_the_model_path() -> None:
    assert copy_dir(PATH, DA) == f"/models/.sparkllm-models/DeepSeek-V4-Flash-NVFP4/{DA}"
    assert DA != DB
    # The stage writes there; the rank mounts it at spec.model.path (flags unchanged).
    sts = replica_on(A, 0, DA)[0]
    assert model_path(sts) == copy_dir(PATH, DA)
    engine = sts["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "model", "mountPath": PATH, "readOnly": True} in engine["volumeMounts"]
    assert sts["metadata"]["annotations"][DIGEST_KEY] == DA
    assert sts["spec"]["template"]["metadata"]["annotations"][DIGEST_KEY] == DA


def test_a_new_revision_stages_beside_the_old_copy_and_nobody_stops() -> None:
    start = world(A, [(DA, DA), (DA, DA)], DA)
    start = replace(start, staging=(*staged(0, DA), *staged(1, DA)))
    start, plan = settle(start)
    assert plan.status is not None
    assert condition(plan.status)["status"] == "True"
    # The source changes to B: A's Jobs go, B's downloads start on both groups at once.
    obs = replace(world(B, [(DA, DA), (DA, DA)], DA), staging=start.staging)
    obs = with_status(obs, plan.status)
    plan = run(obs)
    assert {r.name for r in plan.delete_jobs} == {j.name for j in start.staging}
    downloads = roles(plan.create_jobs, "stage")
    assert sorted(d["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/hostname"]
                  for d in downloads) == ["a0", "b0"]  # fmt: skip
    target = args_of(downloads[0]).target
    assert str(target) == copy_dir(PATH, DB)
    # Nobody held, no rank template changed: both replicas serve on A meanwhile.
    assert applied(plan, "StatefulSet") == []
    assert applied(plan, "Deployment") == []
    assert plan.status is not None
    assert [r["phase"] for r in plan.status["replicaStatuses"]] == ["Ready", "Ready"]
    assert condition(plan.status)["reason"] == "Staging"
    groups = plan.status["modelStaging"]["groups"]
    assert [(g["replica"], g["runningDigest"]) for g in groups] == [(0, DA), (1, DA)]
    assert plan.status["modelStaging"]["digest"] == DB


def _group_a_staged_with_b() -> tuple[Observation, Plan]:
    obs = world(B, [(DA, DA), (DA, DA)], DA)
    downloading = job(1, 0, DB, "running")
    obs = replace(obs, staging=(*staged(0, DB), downloading))
    return settle(obs)


def test_a_staged_group_flips_its_replica_to_the_new_copy_and_rolls_it_alone() -> None:
    _obs, plan = _group_a_staged_with_b()
    flipped = applied(plan, "StatefulSet")
    assert flipped
    assert {o["metadata"]["labels"]["sparkllm.io/replica"] for o in flipped} == {"0"}
    assert all(model_path(o) == copy_dir(PATH, DB) for o in flipped)
    assert all(o["metadata"]["annotations"][DIGEST_KEY] == DB for o in flipped)
    live_hash = replica_on(A, 0, DA)[0]["spec"]["template"]["metadata"]["annotations"]
    new_hash = flipped[0]["spec"]["template"]["metadata"]["annotations"]
    assert new_hash["sparkllm.io/spec-hash"] != live_hash["sparkllm.io/spec-hash"]
    # The existing rolling update drains replica 0 (replica 1 serves), naming the copies.
    rolling = [e.message for e in plan.events if e.reason is Reason.ROLLING_UPDATE]
    assert rolling == [
        f"replica 0: out of routing; restarts once its requests finish "
        f"(model staged: {DA} -> {DB} (rolling update))"
    ]
    assert plan.status is not None
    phases = [r["phase"] for r in plan.status["replicaStatuses"]]
    assert phases == ["Restarting", "Ready"]
    assert cause_class(f"model staged: {DA} -> {DB} (rolling update)") == "update"  # metric
    # The gateway waits for every group: it keeps A's copy.
    assert applied(plan, "Deployment") == []
    assert roles(plan.create_jobs, "clean") == []


def test_a_failed_new_revision_keeps_every_replica_serving_on_its_old_copy() -> None:
    obs = world(B, [(DA, DA), (DA, DA)], DA)
    failure = (
        '{"event": "failed", "stage": "Failed", "bytesDone": 0, "bytesTotal": 0, '
        '"rateBytesPerSecond": 0.0, "reason": "NotFound", "message": "prefix toy-b/: no objects"}'
    )
    record = read_record(failure)
    assert record is not None
    failed = (job(0, 0, DB, "failed", record=record), job(1, 0, DB, "failed", record=record))
    obs, plan = settle(replace(obs, staging=failed))
    assert plan.status is not None
    assert (condition(plan.status)["status"], condition(plan.status)["reason"]) == (
        "False", "NotFound"
    )  # fmt: skip
    assert "no objects" in condition(plan.status)["message"]
    assert [r["phase"] for r in plan.status["replicaStatuses"]] == ["Ready", "Ready"]
    assert applied(plan, "StatefulSet") == []
    assert plan.status["start"] == "StagingFailed:NotFound:a0"


def test_clean_jobs_only_once_both_replicas_and_the_gateway_run_the_new_copy() -> None:
    both = (*staged(0, DB), *staged(1, DB))
    # Every group staged, replica 1's pods still on A: the gateway moves to B, no clean.
    obs, plan = settle(replace(world(B, [(DB, DB), (DB, DA)], DA), staging=both))
    (gateway,) = applied(plan, "Deployment")
    assert model_path(gateway) == copy_dir(PATH, DB)
    assert gateway["metadata"]["annotations"][DIGEST_KEY] == DB
    assert roles(plan.create_jobs, "clean") == []
    # Both replicas on B and Ready, the gateway's rollout not done: still no clean.
    obs, plan = settle(replace(world(B, [(DB, DB), (DB, DB)], DB, rolled=False), staging=both))
    assert roles(plan.create_jobs, "clean") == []
    # The roll is complete: one clean Job per node of each group, on B's copy.
    obs, plan = settle(replace(world(B, [(DB, DB), (DB, DB)], DB), staging=both))
    clean = roles(plan.create_jobs, "clean")
    assert len(clean) == 6
    words = args_of(clean[0])
    assert (words.clean, words.keep_previous, str(words.target)) == (True, 1, copy_dir(PATH, DB))
    assert plan.retry_after == 2.0
    # They succeed: StagingCleaned once per group with the bytes, none made again.
    done = replace(obs, staging=(*both, *cleaned(0, DB, 1000), *cleaned(1, DB, 500)))
    plan = run(done)
    assert plan.create_jobs == ()
    messages = [e.message for e in plan.events if e.reason is Reason.STAGING_CLEANED]
    assert len(messages) == 2
    assert "(3000 bytes freed)" in messages[0]
    assert "(1500 bytes freed)" in messages[1]
    # A group that had nothing older (its first copy) is not told one was removed.
    first = run(replace(obs, staging=(*both, *cleaned(0, DB, 1000), *cleaned(1, DB, 0))))
    nothing = [e.message for e in first.events if e.reason is Reason.STAGING_CLEANED][1]
    assert nothing.startswith("replica 1: no older model copy to remove on "), nothing
    assert "bytes freed" not in nothing
    assert plan.status is not None
    groups = plan.status["modelStaging"]["groups"]
    assert [g["bytesFreed"] for g in groups] == [3000, 1500]
    # Next pass (status written; logs no longer read): no second Event, bytes kept.
    quiet = replace(
        with_status(done, plan.status), staging=(*both, *cleaned(0, DB, 0), *cleaned(1, DB, 0))
    )
    again = run(quiet)
    assert Reason.STAGING_CLEANED not in [e.reason for e in again.events]
    after = (again.status or plan.status)["modelStaging"]["groups"]
    assert [g["bytesFreed"] for g in after] == [3000, 1500]


def test_a_new_replica_without_a_copy_is_held_until_its_group_is_staged() -> None:
    obs = world(B, [(DA, DA)], DA)  # replica 1 has no StatefulSets yet
    plan = run(replace(obs, staging=(*staged(0, DB),)))  # its StatefulSets never applied here
    replicas = {
        o["metadata"]["labels"]["sparkllm.io/replica"]: o["spec"]["replicas"]
        for o in applied(plan, "StatefulSet")
    }
    assert replicas.get("1") == 0
    assert plan.status is not None
    assert plan.status["replicaStatuses"][1]["phase"] == "Pending"
    groups = {g["replica"]: g for g in plan.status["modelStaging"]["groups"]}
    assert "runningDigest" not in groups[1]


def test_a_copy_counts_only_on_its_group_and_at_its_path() -> None:
    """A replica moved to a spare group, or a changed spec.model.path, has no copy there:
    it is held until staged instead of starting on a directory that does not exist."""
    ic = validate_inference_cluster(B)
    live = replica_on(A, 0, DA)
    statefulsets = [o for o in live if o["kind"] == "StatefulSet"]
    assert statefulset_copies(ic, statefulsets, {0: "group-0"}) == {0: DA}
    assert statefulset_copies(ic, statefulsets, {0: "group-2"}) == {}  # a spare group
    moved = copy.deepcopy(B)
    moved["spec"]["model"]["path"] = "/models/other"
    assert statefulset_copies(validate_inference_cluster(moved), statefulsets, {0: "group-0"}) == {}
    # StatefulSets rendered while held (no copy staged) carry no digest: they never count.
    held = validate_inference_cluster(A)
    plan = ReplicaPlan(
        index=0, group_key="group-0", nodes=GROUPS[0], rank0_ip=IPS["a0"], generation=1,
        running=False,
    )  # fmt: skip
    unstaged = render_replica(held, plan=plan, engine_key=engine_key_ref(held))[:3]
    assert all(DIGEST_KEY not in (o["metadata"].get("annotations") or {}) for o in unstaged)
    assert statefulset_copies(held, unstaged, {0: "group-0"}) == {}


def test_the_gateway_of_a_source_object_follows_the_rank_pods_with_explicit_groups() -> None:
    """Groups listed without a replica are not staged: the gateway (and the Jobs) go where
    this object's rank pods run, not to any listed node."""
    ic = validate_inference_cluster(B)
    assert ic.spec.placement.node_groups is not None
    (deployment,) = [o for o in gateway_on(B, DB) if o["kind"] == "Deployment"]
    affinity = deployment["spec"]["template"]["spec"]["affinity"]
    assert list(affinity) == ["podAffinity"]
    plain = validate_inference_cluster(cluster(replicas=2, groups=2))
    assert list(model_node_affinity(plain) or {}) == ["nodeAffinity"]


def test_a_failed_clean_is_named_in_model_staged_and_made_again_once_deleted() -> None:
    both = (*staged(0, DB), *staged(1, DB))
    failed = job(0, 1, DB, "failed", role="clean", detail="stage-model: failed: permission")
    done = (*cleaned(0, DB, 10)[::2], failed, *cleaned(1, DB, 5))
    obs = replace(world(B, [(DB, DB), (DB, DB)], DB), staging=(*both, *done))
    plan = run(obs)
    assert plan.status is not None
    staged_now = condition(plan.status)
    assert staged_now["status"] == "True"
    assert (
        "removing the older copies failed on a1: stage-model: failed: permission"
        in (staged_now["message"])
    )
    assert plan.create_jobs == ()
    # Deleted by hand, it is made again (the roll is still complete).
    gone = replace(obs, staging=(*both, *cleaned(0, DB, 10)[::2], *cleaned(1, DB, 5)))
    (again,) = run(gone).create_jobs
    assert again["metadata"]["name"] == failed.name
