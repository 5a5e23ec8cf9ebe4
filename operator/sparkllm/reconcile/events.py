"""Kubernetes Events for InferenceClusters: only on transitions and failures.

Posted through kopf's event queue (batched, non-blocking, attributed to the operator).
Reasons come from ``api.Reason``; messages carry the specifics.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import kopf

from sparkllm.api import Reason


class EventSink(Protocol):
    def emit(
        self, obj: Mapping[str, Any], *, warning: bool, reason: Reason, message: str
    ) -> None: ...


class KopfEvents:
    """Post Events with kopf.event (requires a running kopf operator)."""

    def emit(self, obj: Mapping[str, Any], *, warning: bool, reason: Reason, message: str) -> None:
        ref = {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "metadata": {
                "name": obj["metadata"]["name"],
                "namespace": obj["metadata"].get("namespace"),
                "uid": obj["metadata"].get("uid"),
            },
        }
        kind = "Warning" if warning else "Normal"
        # kopf only reads apiVersion/kind/metadata from the body; a plain mapping will do.
        kopf.event(ref, type=kind, reason=reason.value, message=message)  # type: ignore[arg-type]


class RecordedEvents:
    """Collects events in memory (CLI one-shot passes, unit tests)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def emit(self, obj: Mapping[str, Any], *, warning: bool, reason: Reason, message: str) -> None:
        self.events.append(("Warning" if warning else "Normal", reason.value, message))
