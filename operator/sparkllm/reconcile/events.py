"""Kubernetes Events for InferenceClusters: only on transitions and failures.

``decide`` lists a pass's Events in its plan (``PendingEvent``: a reason and the words,
pure) and ``execute`` posts them at the pass's end through ``KubeAPI`` (the one module that
talks to the API server), made here with the writer's clock and host name, so Events never
depend on kopf's per-handler context and a pass that decided nothing posts nothing.
Reasons come from ``api.Reason``; messages carry the specifics.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sparkllm.reconcile.decide.actions import PendingEvent

COMPONENT = "sparkllm-operator"


def event_manifest(obj: Mapping[str, Any], event: PendingEvent, *, now: datetime) -> dict[str, Any]:
    """A core/v1 Event about ``obj`` (the kind kubectl describe and field selectors read)."""
    meta = obj["metadata"]
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "type": "Warning" if event.warning else "Normal",
        "reason": event.reason.value,
        "message": event.message[:1024],
        "source": {"component": COMPONENT, "host": socket.gethostname()},
        "reportingComponent": COMPONENT,
        "reportingInstance": os.environ.get("HOSTNAME", socket.gethostname()),
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
