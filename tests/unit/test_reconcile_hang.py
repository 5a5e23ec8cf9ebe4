"""A hung pipeline read from rank 0's pod (hang.py), and the drain of planned restarts
as rank 0's pod carries it (drain.restart_drain, mark_patch, draining_replicas)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sparkllm.keys import ANNOTATION_DRAIN_REASON, ANNOTATION_DRAIN_STARTED, LABEL_SERVING
from sparkllm.reconcile.decide.drain import draining_replicas, mark_patch, restart_drain
from sparkllm.reconcile.decide.hang import HUNG_AFTER, hung_cause, unready_since
from sparkllm.reconcile.decide.replicas import Observed, cause_class
from sparkllm.reconcile.decide.restarts import FORCE_CAUSE, DrainFacts

STARTED = "2026-03-01T11:00:00Z"
NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def pod(
    *,
    ready: str = "False",
    since: str = "2026-03-01T11:58:00Z",
    started: str | None = STARTED,
    restarts: int = 0,
    deleting: bool = False,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    state = {"running": {"startedAt": started}} if started else {"waiting": {"reason": "X"}}
    meta: dict[str, Any] = {
        "name": "llm-r0-rank0-0",
        "namespace": "ns",
        "labels": {"sparkllm.io/rank": "0", "sparkllm.io/replica": "0", **(labels or {})},
        "annotations": dict(annotations or {}),
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-03-01T11:59:00Z"
    return {
        "metadata": meta,
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": since}],
            "containerStatuses": [{"name": "engine", "state": state, "restartCount": restarts}],
        },
    }


@pytest.mark.parametrize(
    ("situation", "the_pod", "expected"),
    [
        ("unready after it served", pod(), datetime(2026, 3, 1, 11, 58, tzinfo=UTC)),
        ("ready", pod(ready="True"), None),
        ("never ready since its start", pod(since="2026-03-01T10:59:59Z"), None),
        ("unready in the second it started", pod(since=STARTED), None),
        ("container restarted: a crash, not a hang", pod(restarts=1), None),
        ("container not running", pod(started=None), None),
        ("being deleted", pod(deleting=True), None),
        ("no pod", None, None),
    ],
)
def test_unready_since(
    situation: str, the_pod: dict[str, Any] | None, expected: datetime | None
) -> None:
    assert unready_since(the_pod) == expected, situation


def test_the_hung_cause_is_its_own_metric_class() -> None:
    cause = hung_cause(NOW - HUNG_AFTER)
    assert cause.startswith("pipeline hung: rank 0 alive but not Ready since 11:59:00")
    assert cause_class(cause) == "pipeline_hung"
    assert cause_class("rank 1 container exited (code 137, OOMKilled)") == "container_exit"


def test_mark_patch_takes_rank_0_out_of_routing_with_the_reason() -> None:
    patch = mark_patch(pod(), now=NOW, reason=FORCE_CAUSE)
    assert (patch.name, patch.namespace) == ("llm-r0-rank0-0", "ns")
    assert patch.patch == {
        "metadata": {
            "labels": {LABEL_SERVING: "false"},
            "annotations": {
                ANNOTATION_DRAIN_STARTED: "2026-03-01T12:00:00Z",
                ANNOTATION_DRAIN_REASON: FORCE_CAUSE,
            },
        }
    }


def marked(seconds_ago: float) -> dict[str, Any]:
    stamp = (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return pod(
        ready="True",
        labels={LABEL_SERVING: "false"},
        annotations={ANNOTATION_DRAIN_STARTED: stamp, ANNOTATION_DRAIN_REASON: FORCE_CAUSE},
    )


@pytest.mark.parametrize(
    ("the_pod", "running", "expected"),
    [
        (None, None, DrainFacts()),
        (
            pod(ready="True", labels={LABEL_SERVING: "true"}),
            3,
            DrainFacts(mark=True, done=False, retry_after=6.0, running=3),
        ),
        (
            marked(3),
            0,
            DrainFacts(reason=FORCE_CAUSE, mark=False, done=False, retry_after=3.0, running=0),
        ),
        (
            marked(10),
            2,
            DrainFacts(reason=FORCE_CAUSE, mark=False, done=False, retry_after=2.0, running=2),
        ),
        (marked(10), 0, DrainFacts(reason=FORCE_CAUSE, mark=False, done=True, running=0)),
        (marked(301), 5, DrainFacts(reason=FORCE_CAUSE, mark=False, done=True, running=5)),
        (marked(30), None, DrainFacts(reason=FORCE_CAUSE, mark=False, retry_after=2.0)),
    ],
)
def test_restart_drain(
    the_pod: dict[str, Any] | None, running: int | None, expected: DrainFacts
) -> None:
    assert restart_drain(the_pod, running=running, now=NOW) == expected


def test_draining_replicas_reads_restart_drains_and_removed_replicas() -> None:
    stamped = marked(5)
    other = pod(ready="True")
    other["metadata"]["labels"]["sparkllm.io/replica"] = "1"
    sts = {"metadata": {"name": "llm-r2-rank0", "labels": {"sparkllm.io/replica": "2"}}}
    observed = Observed(
        nodes={}, pods=[stamped, other], owned={"StatefulSet": [sts], "Service": []}
    )
    assert draining_replicas(observed, replicas=2) == [0, 2]
