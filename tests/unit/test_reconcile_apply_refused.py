"""A rendered object the API server refuses (422) is InvalidSpec, not a 5 s retry loop.

Issue 25: a spec the API accepted (``engine.env`` with ``PYTHONPATH`` under the gate
preflight) rendered a container whose env held a name twice; every pass's apply failed
with ``duplicate entries``, the status stayed empty and no Event said why. The API now
refuses such specs and render refuses what slips through, but any other refusal of a
rendered object must end the same way: the pass reports it in status and stops.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Mapping
from typing import Any, cast

import pytest

from sparkllm.errors import ClusterAPIError
from sparkllm.kube.client import KubeAPI
from sparkllm.kube.kinds import JSON
from sparkllm.reconcile.reconciler import ClusterReconciler
from tests.unit.reconcile_fixtures import GATEWAY_IMAGE, NOW, cluster
from tests.unit.test_reconcile_shell import RecordingAPI

REFUSAL = (
    'apply StatefulSet llm/llm-r0-rank0: 422 StatefulSet.apps "llm-r0-rank0" is invalid: '
    "spec.template.spec.initContainers[1].env[9]: Duplicate value: map[string]interface "
    '{}{"name":"PYTHONPATH"}'
)


class RefusingAPI(RecordingAPI):
    """Applies of StatefulSets fail with ``status``."""

    def __init__(self, objects: list[JSON], *, status: int) -> None:
        super().__init__(objects)
        self.refusal_status = status

    async def apply(self, obj: Mapping[str, Any]) -> JSON:
        if obj["kind"] == "StatefulSet":
            self.calls.append(("apply", f"{obj['kind']}/{obj['metadata']['name']}"))
            raise ClusterAPIError(REFUSAL, status=self.refusal_status)
        return await super().apply(obj)


def _fresh() -> list[JSON]:
    key = {"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": "llm-engine-key", "namespace": "llm"},
           "data": {"token": base64.b64encode(b"k").decode()}}  # fmt: skip
    return [cluster(), key]


def test_a_refused_apply_becomes_invalid_spec_with_one_event() -> None:
    api = RefusingAPI(_fresh(), status=422)
    reconciler = ClusterReconciler(
        cast(KubeAPI, api), gateway_image=GATEWAY_IMAGE, clock=lambda: NOW
    )
    outcome = asyncio.run(reconciler.reconcile(("llm", "llm")))
    assert outcome.retry_after is None  # no retry of the same write
    assert api.status is not None
    assert api.status["phase"] == "Failed"
    ready = next(c for c in api.status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert ready["message"] == f"the API server refused an object made from this spec: {REFUSAL}"
    events = [o for o in api.created if o["kind"] == "Event"]
    assert [(e["type"], e["reason"]) for e in events] == [("Warning", "InvalidSpec")]
    # the next pass (a spec change, the resync) tries once more and is refused the same
    # way: the same status, no second Event, and again no retry of its own
    api.objects[0]["status"] = api.status
    again = asyncio.run(reconciler.reconcile(("llm", "llm")))
    assert again.retry_after is None
    assert api.status["phase"] == "Failed"
    assert len([o for o in api.created if o["kind"] == "Event"]) == 1


def test_other_api_failures_still_fail_the_pass() -> None:
    """A 500 or a lost connection is the cluster's trouble, not the spec's: retried."""
    api = RefusingAPI(_fresh(), status=500)
    reconciler = ClusterReconciler(
        cast(KubeAPI, api), gateway_image=GATEWAY_IMAGE, clock=lambda: NOW
    )
    with pytest.raises(ClusterAPIError):
        asyncio.run(reconciler.reconcile(("llm", "llm")))
