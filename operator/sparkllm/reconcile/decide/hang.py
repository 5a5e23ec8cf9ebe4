"""A hung pipeline, told apart from a slow one: pure, from rank 0's pod status.

Why the operator decides this and not a liveness probe: when one stage of an SGLang
pipeline stalls (an NCCL wait between stages is the classic case) every process stays
alive; only rank 0's ``/health`` notices, because it answers 503 once SGLang's 20 s
window passed without any output. A kubelet liveness kill would restart rank 0 alone —
the survivors keep waiting — and the operator would record "container exited". Instead
rank 0's readiness probe turns the 503s into NotReady (after 6 failed 20 s windows:
2 minutes without a single token; a normal 8K prefill of ~44 s fails at most 2), and
this module reads that: rank 0 became NotReady AFTER it had been Ready in its
container's current run (so not start-up) while its container keeps running. Past
``HUNG_AFTER`` more the replica is restarted as a whole, cause "pipeline hung",
counted in the restart budget. The reasoning with the numbers is in docs/operator.md,
"Probes and hung pipelines".
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from sparkllm.render.ranks import READINESS_FAILURE_THRESHOLD, SGLANG_HEALTH_WINDOW_SECONDS

HUNG_AFTER: Final = timedelta(seconds=60)
# Rank 0 turns NotReady after this long without one token (6 failed 20 s /health windows).
SILENT_BEFORE_UNREADY: Final = READINESS_FAILURE_THRESHOLD * SGLANG_HEALTH_WINDOW_SECONDS
HUNG_CAUSE: Final = "pipeline hung"


def _parse(stamp: Any) -> datetime | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def unready_since(pod: Mapping[str, Any] | None) -> datetime | None:
    """When rank 0 lost readiness after being Ready in this run of its container.

    None when it is Ready, was never Ready since its container started, its container
    does not run (or restarted: a crash, not a hang), or the pod is being deleted.
    """
    if pod is None or pod["metadata"].get("deletionTimestamp"):
        return None
    status = pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    if not statuses or any((cs.get("restartCount") or 0) > 0 for cs in statuses):
        return None
    started = [
        _parse(((cs.get("state") or {}).get("running") or {}).get("startedAt")) for cs in statuses
    ]
    if any(s is None for s in started):
        return None
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    if ready is None or ready.get("status") == "True":
        return None
    since = _parse(ready.get("lastTransitionTime"))
    latest_start = max(s for s in started if s is not None)
    # Ready flips only on a change: a False newer than the container's start follows a True.
    return since if since is not None and since > latest_start else None


def hung_cause(since: datetime) -> str:
    """The restart cause, in words for the status, the Event and the metric's class."""
    return (
        f"{HUNG_CAUSE}: rank 0 alive but not Ready since {since:%H:%M:%S} (its /health saw "
        f"no output for {SILENT_BEFORE_UNREADY} s, then {int(HUNG_AFTER.total_seconds())} s more)"
    )
