"""Model staging as a reconcile step (decide/staging.py, render/model_staging.py), pure.

A group of three (a0, a1, a2) staged as the plan orders it, pass by pass: the download
Job first, a serve Job once a node is Ready, the next node's copy once its server says
``serving``, servers deleted once their successors are staged; the ranks held until the
whole group is Ready; status bytes, the Start column, ModelStaged and the Events once
each; a failure's reason, and the two retries (``sparkllm.io/restart=now``, a new
source). The Jobs are read back through ``staging_seen.staging_job`` as observe reads them
(Job conditions, the pod's log tail), so the reader is tested with the step.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sparkllm.api import Reason
from sparkllm.cli_args import parse_args
from sparkllm.reconcile.decide import decide
from sparkllm.reconcile.decide.actions import Plan
from sparkllm.reconcile.decide.observation import Observation
from sparkllm.reconcile.decide.staging import decide_staging
from sparkllm.reconcile.decide.staging_report import FAILURE_REASONS, failure_reason
from sparkllm.reconcile.decide.staging_seen import StagingJob, blocked_reason, staging_job
from sparkllm.render.model_staging import STAGING_CONTAINER
from sparkllm.staging.args import StageModelArgs
from sparkllm.staging.plan import StageReason
from tests.unit.reconcile_fixtures import (
    GATEWAY_IMAGE,
    cluster,
    observation,
    with_obj,
    with_status,
)

JSON = dict[str, Any]
S3 = {"endpoint": "https://s3.corp.example", "bucket": "models", "prefix": "toy/"}
TOTAL = 3_000_000


def staged_cluster(**model: Any) -> JSON:
    source = {"s3": dict(S3), **model}
    return cluster(replicas=1, groups=1, model={"source": source})


def run(obs: Observation) -> Plan:
    return decide(obs, gateway_image=GATEWAY_IMAGE)


def record(stage: str, done: int, *, event: str = "progress", **extra: Any) -> str:
    line = {
        "event": event, "stage": stage, "bytesDone": done, "bytesTotal": TOTAL,
        "rateBytesPerSecond": 1_000_000.0, "etaSeconds": (TOTAL - done) / 1e6, "time": 1.0,
        **extra,
    }  # fmt: skip
    return json.dumps(line)


def seen(
    job: JSON, outcome: str = "running", *, log: str = "", waiting: JSON | None = None
) -> StagingJob:
    """The Job as observe reads it: its conditions, one pod, the tail of the pod's log
    (``waiting``: its container's waiting state, as a kubelet writes it)."""
    live = json.loads(json.dumps(job))
    live["metadata"]["uid"] = f"uid-{job['metadata']['name']}"
    conditions = {"succeeded": "Complete", "failed": "Failed"}
    if outcome in conditions:
        live["status"] = {"conditions": [{"type": conditions[outcome], "status": "True"}]}
    phase = {"running": "Running", "succeeded": "Succeeded", "failed": "Failed"}[outcome]
    pod = {
        "metadata": {"name": f"{job['metadata']['name']}-x", "creationTimestamp": "t"},
        "status": {
            "phase": phase,
            "containerStatuses": [
                {"name": STAGING_CONTAINER, **({"state": {"waiting": waiting}} if waiting else {})}
            ],
        },
    }
    fact = staging_job(live, [pod], log=log)
    assert fact is not None
    return fact


def args_of(job: JSON) -> StageModelArgs:
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["sparkllm"]
    words = container["args"]
    assert words[0] == "stage-model"
    return parse_args(StageModelArgs, words[1:])


def node_of(job: JSON) -> str:
    selector: dict[str, str] = job["spec"]["template"]["spec"]["nodeSelector"]
    return selector["kubernetes.io/hostname"]


def by_role(jobs: Sequence[JSON], role: str) -> list[JSON]:
    return [j for j in jobs if j["metadata"]["labels"]["sparkllm.io/staging-role"] == role]


def rank_replicas(plan: Plan) -> list[int]:
    return [o["spec"]["replicas"] for o in plan.apply if o["kind"] == "StatefulSet"]


def condition(status: JSON, kind: str = "ModelStaged") -> JSON:
    return next(c for c in status["conditions"] if c["type"] == kind)


def reasons(plan: Plan) -> list[str]:
    return [e.reason.value for e in plan.events]


def test_without_a_source_nothing_changes() -> None:
    obj = cluster(replicas=1, groups=1)
    plan = run(observation(obj))
    assert plan.create_jobs == ()
    assert plan.status is not None
    assert "modelStaging" not in plan.status
    assert "ModelStaged" not in [c["type"] for c in plan.status["conditions"]]
    assert rank_replicas(plan) == [1, 1, 1]


def test_a_group_is_staged_in_the_plans_order_and_its_ranks_wait() -> None:
    obs = observation(staged_cluster())
    # Pass 1: only the downloader's Job, with the source; the ranks are held at 0.
    plan = run(obs)
    (download,) = plan.create_jobs
    assert node_of(download) == "a0"
    args = args_of(download)
    assert args.source is not None
    assert json.loads(args.source)["s3"]["bucket"] == "models"
    assert args.peer is None
    assert args.expected_shards == 46
    pod = download["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    assert pod["volumes"][0]["hostPath"] == {"path": "/models", "type": "DirectoryOrCreate"}
    assert rank_replicas(plan) == [0, 0, 0]
    assert reasons(plan) == [Reason.STAGING_STARTED.value]
    assert plan.retry_after == 2.0
    assert plan.status is not None
    assert condition(plan.status)["reason"] == "Staging"
    assert plan.status["start"] == "Staging:0/3"
    # Waiting for its copy is Pending, not a failure: nothing Degraded, nothing counted.
    (replica,) = plan.status["replicaStatuses"]
    assert (plan.status["phase"], replica["phase"]) == ("Pending", "Pending")
    assert replica.get("restarts", 0) == 0
    # Pass 2: downloading, half done: bytes, rate and ETA in status; no second Job.
    obs = with_status(
        replace(obs, staging=(seen(download, log=record("Downloading", TOTAL // 2)),)), plan.status
    )
    plan = run(obs)
    assert plan.create_jobs == ()
    assert plan.status is not None
    (entry, *_) = plan.status["modelStaging"]["groups"][0]["nodes"]
    assert (entry["stage"], entry["bytesDone"], entry["bytesTotal"]) == (
        "Downloading",
        TOTAL // 2,
        TOTAL,
    )
    assert entry["etaSeconds"] == 1.5
    assert plan.status["modelStaging"]["summary"] == "0/3 nodes, 16%"
    assert plan.status["start"] == "Staging:0/3:16%"
    assert StagingEvents.none(plan)


def test_each_node_copies_from_the_one_before_once_it_serves_then_the_ranks_run() -> None:
    obs = observation(staged_cluster())
    download = run(obs).create_jobs[0]
    # Pass 3: a0 staged: its server starts; a1 waits for it to serve.
    done = seen(download, "succeeded", log=record("Ready", TOTAL, event="done"))
    obs = replace(obs, staging=(done,))
    plan = run(obs)
    (server,) = plan.create_jobs
    serve = args_of(server)
    assert (serve.serve, serve.listen, node_of(server)) == (True, "10.0.0.10:8390", "a0")
    assert server["spec"]["template"]["spec"]["containers"][0]["env"] == []
    # Pass 4: a0 serves: a1 copies from a0's address, leaving from its own.
    serving = seen(server, log='{"event": "serving", "address": "10.0.0.10:8390", "files": 4}')
    obs = with_status(replace(obs, staging=(done, serving)), plan.status)
    plan = run(obs)
    (copy1,) = plan.create_jobs
    copy_args = args_of(copy1)
    assert node_of(copy1) == "a1"
    assert (copy_args.source, copy_args.peer) == (None, "http://10.0.0.10:8390")
    assert copy_args.local_address == "10.0.0.11"
    assert rank_replicas(plan) == [0, 0, 0]
    # Pass 5: a1 staged: a0's server is deleted, a1's starts.
    a1 = seen(copy1, "succeeded", log=record("Ready", TOTAL, event="done"))
    obs = with_status(replace(obs, staging=(done, serving, a1)), plan.status)
    plan = run(obs)
    assert [r.name for r in plan.delete_jobs] == [server["metadata"]["name"]]
    (server1,) = plan.create_jobs
    assert node_of(server1) == "a1"
    # Pass 6: a1 serves (a0's server gone): a2 copies from a1.
    serving1 = seen(server1, log='{"event": "serving"}')
    obs = with_status(replace(obs, staging=(done, a1, serving1)), plan.status)
    plan = run(obs)
    (copy2,) = plan.create_jobs
    assert (node_of(copy2), args_of(copy2).peer) == ("a2", "http://10.0.0.11:8390")
    # Pass 7: the group is staged: the last server goes, the ranks run, Staged once.
    a2 = seen(copy2, "succeeded", log=record("Ready", TOTAL, event="done"))
    obs = with_status(replace(obs, staging=(done, a1, serving1, a2)), plan.status)
    plan = run(obs)
    assert [r.name for r in plan.delete_jobs] == [server1["metadata"]["name"]]
    assert rank_replicas(plan) == [1, 1, 1]
    assert Reason.STAGED.value in reasons(plan)
    assert plan.status is not None
    assert condition(plan.status)["status"] == "True"
    assert plan.status["modelStaging"]["summary"] == "3/3 nodes"
    # Next pass: nothing more to do, no second Staged Event.
    obs = with_status(replace(obs, staging=(done, a1, a2)), plan.status)
    plan = run(obs)
    assert plan.create_jobs == ()
    assert plan.delete_jobs == ()
    assert Reason.STAGED.value not in reasons(plan)
    _a_settled_pass_keeps_the_bytes_without_the_logs(obs, plan, (download, copy1, copy2))


def _a_settled_pass_keeps_the_bytes_without_the_logs(
    obs: Observation, plan: Plan, jobs: Sequence[JSON]
) -> None:
    """Observe no longer reads the staged nodes' logs (their bytes are in status), and a
    pass without those records keeps status.modelStaging as it is."""
    if plan.status is not None:
        obs = with_status(obs, plan.status)
    assert obs.obj is not None
    before = obs.obj["status"]["modelStaging"]
    quiet = run(replace(obs, staging=tuple(seen(job, "succeeded") for job in jobs)))
    assert (quiet.status or obs.obj["status"])["modelStaging"] == before
    assert before["groups"][0]["nodes"][2]["bytesDone"] == TOTAL
    assert quiet.create_jobs == quiet.delete_jobs == ()


class StagingEvents:
    @staticmethod
    def none(plan: Plan) -> bool:
        staging = {"StagingStarted", "Staged", "HashMismatch", "NotFound"}
        return not staging & set(reasons(plan))


def _failed_copy() -> tuple[Observation, StagingJob, Plan]:
    """a0 staged and serving, a1's copy failed with HashMismatch."""
    obs = observation(staged_cluster())
    download = run(obs).create_jobs[0]
    done = seen(download, "succeeded", log=record("Ready", TOTAL, event="done"))
    server = run(replace(obs, staging=(done,))).create_jobs[0]
    serving = seen(server, log='{"event": "serving"}')
    copy1 = run(replace(obs, staging=(done, serving))).create_jobs[0]
    failure = record(
        "Failed", 1000, event="failed", reason="HashMismatch",
        message="model-00001-of-00002.safetensors: sha256 5d1c, expected 9f2a (after a re-fetch)",
    ) + "\nstage-model: failed: HashMismatch: ..."  # fmt: skip
    failed = seen(copy1, "failed", log=failure)
    obs = replace(obs, staging=(done, serving, failed))
    return obs, failed, run(obs)


def test_a_failed_stage_holds_the_replica_says_why_once_and_retries_on_restart() -> None:
    obs, failed, plan = _failed_copy()
    assert reasons(plan).count("HashMismatch") == 1
    assert plan.status is not None
    assert condition(plan.status)["reason"] == "HashMismatch"
    entry = plan.status["modelStaging"]["groups"][0]["nodes"][1]
    assert (entry["node"], entry["stage"], entry["reason"]) == ("a1", "Failed", "HashMismatch")
    assert "sha256 5d1c" in entry["message"]
    assert plan.status["start"] == "StagingFailed:HashMismatch:a1"
    (replica,) = plan.status["replicaStatuses"]
    assert replica["phase"] == "Degraded"
    assert "sparkllm.io/restart=now" in replica["message"]
    assert rank_replicas(plan) == [0, 0, 0]
    assert plan.create_jobs == ()  # a2 never starts from a failed copy
    # a0's server has no one left to serve (its successor failed) and is deleted.
    server = next(j for j in obs.staging if j.role == "serve")
    assert [r.name for r in plan.delete_jobs] == [server.name]
    # The next pass (status written) posts no second Event and retries nothing.
    again = run(with_status(obs, plan.status))
    assert "HashMismatch" not in reasons(again)
    assert failed.name not in [r.name for r in again.delete_jobs]
    # sparkllm.io/restart=now: the failed Job is deleted (made anew the pass after).
    assert obs.obj is not None
    restart = {"sparkllm.io/restart": "now"}
    asked = dict(obs.obj, metadata={**obs.obj["metadata"], "annotations": restart})
    retry = run(with_obj(with_status(obs, plan.status), asked))
    assert failed.name in [r.name for r in retry.delete_jobs]


def test_a_new_source_deletes_the_old_jobs_and_starts_again() -> None:
    obs, failed, plan = _failed_copy()
    changed = staged_cluster()
    changed["spec"]["model"]["source"]["s3"]["prefix"] = "toy-v2/"
    plan = run(with_obj(with_status(obs, plan.status), changed))
    deleted = {r.name for r in plan.delete_jobs}
    assert failed.name in deleted
    assert len(deleted) == 3  # the old download, server and copy
    (download,) = plan.create_jobs
    assert download["metadata"]["name"] != failed.name
    assert json.loads(args_of(download).source or "{}")["s3"]["prefix"] == "toy-v2/"


def test_credentials_come_from_the_spec_secrets_as_env_never_arguments() -> None:
    obj = staged_cluster()
    obj["spec"]["model"]["source"]["s3"]["credentialsSecretRef"] = {"name": "s3-creds"}
    (download,) = run(observation(obj)).create_jobs
    env = download["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env == [
        {"name": "AWS_ACCESS_KEY_ID",
         "valueFrom": {"secretKeyRef": {"name": "s3-creds", "key": "accessKeyId"}}},
        {"name": "AWS_SECRET_ACCESS_KEY",
         "valueFrom": {"secretKeyRef": {"name": "s3-creds", "key": "secretAccessKey"}}},
    ]  # fmt: skip
    source = json.loads(args_of(download).source or "{}")
    assert source["s3"]["bucket"] == "models"
    assert "credentialsSecretRef" not in source["s3"]  # the command reads its env


def test_a_missing_bucket_reads_as_not_found_from_the_termination_message() -> None:
    """The log unreadable: the termination message (the log's tail on a failure)."""
    obs = observation(staged_cluster())
    download = run(obs).create_jobs[0]
    live = json.loads(json.dumps(download))
    live["metadata"]["uid"] = "u1"
    live["status"] = {"conditions": [{"type": "Failed", "status": "True"}]}
    message = record(
        "Failed", 0, event="failed", reason="NotFound", message="bucket models: NoSuchBucket"
    )
    pod = {
        "metadata": {"name": "p", "creationTimestamp": "t"},
        "status": {"phase": "Failed", "containerStatuses": [{
            "name": STAGING_CONTAINER, "state": {"terminated": {"exitCode": 1, "message": message}},
        }]},
    }  # fmt: skip
    fact = staging_job(live, [pod], log=None)
    assert fact is not None
    plan = run(replace(obs, staging=(fact,)))
    assert plan.status is not None
    assert condition(plan.status)["reason"] == "NotFound"
    assert "NoSuchBucket" in condition(plan.status)["message"]
    assert reasons(plan) == ["NotFound"]


def test_a_removed_source_leaves_no_stale_condition_and_no_jobs() -> None:
    obs, failed, plan = _failed_copy()
    plain = cluster(replicas=1, groups=1, status=plan.status)
    after = run(with_obj(obs, plain))
    assert after.status is not None
    assert "modelStaging" not in after.status
    assert condition(after.status)["status"] == "True"
    assert after.create_jobs == ()
    assert len(after.delete_jobs) == 3  # the download, the server, the failed copy
    assert failed.name in {r.name for r in after.delete_jobs}


def test_every_stage_failure_reason_is_a_condition_and_event_reason() -> None:
    assert set(FAILURE_REASONS) == set(StageReason)
    assert all(FAILURE_REASONS[r].value == r.value for r in StageReason)
    assert failure_reason(None) is Reason.STAGE_FAILED


def test_a_replica_on_another_group_stages_its_new_nodes_and_drops_the_old_jobs() -> None:
    """A failover to a spare group: the old group's Jobs are not taken for the new nodes'."""
    obs, _, _ = _failed_copy()
    assert obs.ic is not None
    addresses = {"b0": "10.0.1.10", "b1": "10.0.1.11", "b2": "10.0.1.12"}
    outcome = decide_staging(
        obs.ic, groups={0: ("b0", "b1", "b2")}, addresses=addresses,
        jobs=obs.staging, previous=None, force=False, image=GATEWAY_IMAGE, generation=1,
    )  # fmt: skip
    assert {r.name for r in outcome.delete_jobs} == {j.name for j in obs.staging}
    (download,) = outcome.create_jobs
    assert node_of(download) == "b0"
    assert download["metadata"]["name"] not in {j.name for j in obs.staging}
    assert outcome.waits == {0: "model staging: 0/3 nodes"}


def test_with_no_replica_placed_nothing_is_said_to_be_staged() -> None:
    """Scaled to 0 (or no group placed: NodeGroupInUse) with a source: ModelStaged is
    Unknown, not True over zero nodes, and no Job is made."""
    obj = cluster(replicas=0, groups=1, model={"source": {"s3": dict(S3)}})
    plan = run(observation(obj))
    assert plan.create_jobs == ()
    assert plan.status is not None
    staged = condition(plan.status)
    assert (staged["status"], staged["reason"]) == ("Unknown", "VerificationPending")
    assert staged["message"] == "no replica is placed on a node group: nothing is staged yet"


def test_a_stage_pod_that_cannot_start_is_named_not_waited_on_silently() -> None:
    """The credentials Secret is missing: the kubelet keeps the download pod's container
    waiting (CreateContainerConfigError). The node's status and ModelStaged say so, the
    ranks stay held, nothing is called failed (the Job starts once the Secret exists)."""
    obs = observation(staged_cluster())
    plan = run(obs)
    (download,) = plan.create_jobs
    missing = {"reason": "CreateContainerConfigError", "message": 'secret "s3-creds" not found'}
    stuck = seen(download, waiting=missing)
    assert stuck.blocked == 'CreateContainerConfigError: secret "s3-creds" not found'
    plan = run(with_status(replace(obs, staging=(stuck,)), plan.status))
    assert plan.create_jobs == ()
    assert plan.status is not None
    (entry, *_) = plan.status["modelStaging"]["groups"][0]["nodes"]
    expected = (
        'the staging pod cannot start: CreateContainerConfigError: secret "s3-creds" not found'
    )
    assert (entry["node"], entry["message"]) == ("a0", expected)
    staged = condition(plan.status)
    assert (staged["status"], staged["reason"]) == ("False", "Staging")
    assert staged["message"] == f"replica 0: model staging: 0/3 nodes; node a0: {expected}"
    assert rank_replicas(plan) == [0, 0, 0]
    assert StagingEvents.none(plan)
    # A container on its way (being created) is no such thing.
    creating = seen(download, waiting={"reason": "ContainerCreating"})
    assert creating.blocked == ""


def test_an_unschedulable_stage_pod_is_named_too() -> None:
    pod = {
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/6 nodes are available: 1 node(s) had untolerated taint",
                }
            ],
        }
    }
    assert blocked_reason(pod) == (
        "Unschedulable: 0/6 nodes are available: 1 node(s) had untolerated taint"
    )
    assert blocked_reason({"status": {"phase": "Pending"}}) == ""
