"""The core/v1 Event the reconciler posts about an InferenceCluster, field by field.

``kubectl describe icl`` and ``kubectl get events --field-selector
involvedObject.name=...,reason=GangRestart`` read these fields, so each is pinned; the
message is cut to 1024 characters (what events.k8s.io allows for a note).
"""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from typing import Any

import pytest

from sparkllm.api import Reason
from sparkllm.reconcile.decide.actions import PendingEvent
from sparkllm.reconcile.events import COMPONENT, event_manifest

JSON = dict[str, Any]
NOW = datetime(2026, 3, 1, 12, 34, 56, 789000, tzinfo=UTC)
CLUSTER: JSON = {
    "apiVersion": "sparkllm.io/v1alpha1",
    "kind": "InferenceCluster",
    "metadata": {
        "name": "deepseek-v4-flash",
        "namespace": "llm",
        "uid": "00000000-0000-0000-0000-000000000001",
        "resourceVersion": "4242",
        "generation": 3,
    },
    "spec": {},
}


@pytest.mark.parametrize(
    ("warning", "reason", "kind"),
    [
        (True, Reason.GANG_RESTART, "Warning"),
        (True, Reason.RESTART_BUDGET_EXHAUSTED, "Warning"),
        (False, Reason.REPLICA_READY, "Normal"),
        (False, Reason.SCALING_UP, "Normal"),
    ],
)
def test_event_manifest_fields(
    monkeypatch: pytest.MonkeyPatch, warning: bool, reason: Reason, kind: str
) -> None:
    monkeypatch.setenv("HOSTNAME", "sparkllm-operator-7d9f-abcde")
    event = PendingEvent(warning=warning, reason=reason, message="replica 0: rank 1 pod deleted")
    assert event_manifest(CLUSTER, event, now=NOW) == {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": "deepseek-v4-flash.", "namespace": "llm"},
        "involvedObject": {
            "apiVersion": "sparkllm.io/v1alpha1",
            "kind": "InferenceCluster",
            "name": "deepseek-v4-flash",
            "namespace": "llm",
            "uid": "00000000-0000-0000-0000-000000000001",
            "resourceVersion": "4242",
        },
        "type": kind,
        "reason": reason.value,
        "message": "replica 0: rank 1 pod deleted",
        "source": {"component": COMPONENT, "host": socket.gethostname()},
        "reportingComponent": "sparkllm-operator",
        "reportingInstance": "sparkllm-operator-7d9f-abcde",
        "firstTimestamp": "2026-03-01T12:34:56Z",
        "lastTimestamp": "2026-03-01T12:34:56Z",
        "count": 1,
    }


def test_reporting_instance_falls_back_to_the_host_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOSTNAME", raising=False)
    event = PendingEvent(warning=False, reason=Reason.REPLICA_READY, message="m")
    manifest = event_manifest(CLUSTER, event, now=NOW)
    assert manifest["reportingInstance"] == socket.gethostname()


def test_an_object_without_uid_or_resource_version() -> None:
    bare = {
        "apiVersion": "sparkllm.io/v1alpha1",
        "kind": "InferenceCluster",
        "metadata": {"name": "x", "namespace": "default"},
    }
    event = PendingEvent(warning=True, reason=Reason.INVALID_SPEC, message="bad")
    involved = event_manifest(bare, event, now=NOW)["involvedObject"]
    assert involved["uid"] is None
    assert involved["resourceVersion"] is None
    assert involved["name"] == "x"


@pytest.mark.parametrize(
    ("length", "kept"),
    [(0, 0), (1, 1), (1023, 1023), (1024, 1024), (1025, 1024), (5000, 1024)],
)
def test_message_is_cut_to_1024_characters(length: int, kept: int) -> None:
    message = "".join(chr(ord("a") + i % 26) for i in range(length))
    event = PendingEvent(warning=True, reason=Reason.GANG_RESTART, message=message)
    text = event_manifest(CLUSTER, event, now=NOW)["message"]
    assert len(text) == kept
    assert text == message[:kept]


def test_event_manifest_does_not_touch_the_object() -> None:
    before = {**CLUSTER, "metadata": dict(CLUSTER["metadata"])}
    event = PendingEvent(warning=True, reason=Reason.GANG_RESTART, message="m")
    manifest = event_manifest(CLUSTER, event, now=NOW)
    manifest["involvedObject"]["name"] = "changed"
    manifest["metadata"]["namespace"] = "changed"
    assert before == CLUSTER
