"""A successor's copy waits for its server's ``serving`` line, and the operator looks again
soon: a pod's log line is no watch event, so without the step's poll the copy would start
only at the next resync (60 s by default; the demo's staging journey waited 50 s per link
before this). The cluster tests run with a 5 s resync and could not see it."""

from __future__ import annotations

from dataclasses import replace

from sparkllm.reconcile.decide.staging import POLL_SECONDS
from tests.unit.reconcile_fixtures import observation, with_status
from tests.unit.test_reconcile_staging import (
    TOTAL,
    _failed_copy,
    node_of,
    record,
    run,
    seen,
    staged_cluster,
)


def test_a_server_not_yet_serving_is_looked_at_again_soon() -> None:
    obs = observation(staged_cluster())
    download = run(obs).create_jobs[0]
    done = seen(download, "succeeded", log=record("Ready", TOTAL, event="done"))
    plan = run(replace(obs, staging=(done,)))
    (server,) = plan.create_jobs
    assert node_of(server) == "a0"
    # The server's pod runs, its log has no ``serving`` line yet: no copy, but a poll.
    starting = seen(server, log="")
    plan = run(with_status(replace(obs, staging=(done, starting)), plan.status))
    assert plan.create_jobs == ()
    assert plan.retry_after == POLL_SECONDS
    # Once it serves, the copy is made.
    serving = seen(server, log='{"event": "serving"}')
    plan = run(with_status(replace(obs, staging=(done, serving)), plan.status))
    (copy,) = plan.create_jobs
    assert node_of(copy) == "a1"


def test_a_failed_stage_is_retried_by_deleting_its_job_as_its_event_says() -> None:
    """The Warning names the one retry that touches nothing else: deleting the failed Job
    (``sparkllm.io/restart=now`` retries too, but also restarts replicas that serve on an
    older copy). The pass after the deletion makes the same Job again."""
    obs, failed, plan = _failed_copy()
    (warning,) = [e for e in plan.events if e.reason.value == "HashMismatch"]
    assert f"kubectl delete job {failed.name}" in warning.message
    without = replace(obs, staging=tuple(j for j in obs.staging if j.name != failed.name))
    again = run(with_status(without, plan.status))
    (copy,) = [j for j in again.create_jobs if j["metadata"]["name"] == failed.name]
    assert node_of(copy) == "a1"
