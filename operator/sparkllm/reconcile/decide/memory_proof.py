"""MemoryVerified and ``status.memory`` from the ranks' ``verify-memory`` init containers.

Why: the memory preflight (preflight/memory.py) leaves each node's findings in its rank
pod's termination message, as the network preflight does; this turns them into one
verdict the same way (network_proof.py): a node's error is final at once and named
(node, check, message); otherwise the verdict waits for every rank the StatefulSets ask
for. In gate mode a failed verdict is kept like a model mismatch, until the spec changes
or a restart is requested, which runs the check again. Pure: pods in, condition out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sparkllm.api import ConditionType, InferenceCluster, Reason
from sparkllm.preflight.findings import Finding, Severity, failed
from sparkllm.reconcile.decide.network_proof import (
    kept_report,
    ordered_findings,
    preflight_findings,
    preflight_verdict,
)
from sparkllm.reconcile.decide.proofs import rank_pods
from sparkllm.reconcile.decide.replicas import Observed
from sparkllm.reconcile.decide.status import condition
from sparkllm.render.memory_preflight import MEMORY_CONTAINER

JSON = dict[str, Any]


def _collect(pods: Sequence[Mapping[str, Any]]) -> tuple[list[Finding], int]:
    """Every finding the ranks reported, and how many ranks reported."""
    findings: list[Finding] = []
    reported = 0
    for pod in pods:
        found = preflight_findings(pod, MEMORY_CONTAINER)
        if found is not None:
            findings += found
            reported += 1
    return findings, reported


def _summary(findings: Sequence[Finding], *, limit: int = 5) -> str:
    errors = failed(findings)
    warnings = [f for f in findings if f.severity is Severity.WARNING]
    parts = [f.line() for f in errors[:limit]]
    if len(errors) > limit:
        parts.append(f"and {len(errors) - limit} more errors")
    parts += [f.line() for f in warnings[: max(0, limit - len(parts))]]
    return "; ".join(parts) or "no finding"


def memory_condition(
    pods: Sequence[Mapping[str, Any]], *, generation: int, expected: int = 0
) -> JSON:
    """MemoryVerified from every rank pod's memory findings (docs/monitoring.md)."""
    findings, reported = _collect(pods)
    total = max(expected, len(pods))
    if failed(findings):
        status, reason, message = False, Reason.MEMORY_CHECK_FAILED, _summary(findings)
    elif reported < total or not reported:
        status, reason = None, Reason.VERIFICATION_PENDING
        message = f"{reported} of {total} ranks reported their memory check"
    else:
        status, reason = True, Reason.MEMORY_AVAILABLE
        message = f"{reported} ranks had the memory their plan needs free"
        warned = [f for f in findings if f.severity is Severity.WARNING]
        if warned:
            message += f"; {_summary(warned)}"
    return condition(
        ConditionType.MEMORY_VERIFIED,
        status=status,
        reason=reason,
        message=message,
        generation=generation,
    )


def memory_verdict(
    ic: InferenceCluster,
    observed: Observed,
    previous_status: Mapping[str, Any],
    *,
    generation: int,
    force: bool,
) -> JSON | None:
    """MemoryVerified, or None when spec.memoryPreflight.mode is off (no condition)."""
    return preflight_verdict(
        ic.spec.memory_preflight.mode,
        observed,
        previous_status,
        ConditionType.MEMORY_VERIFIED,
        memory_condition,
        generation=generation,
        force=force,
    )


def memory_report(
    ic: InferenceCluster, observed: Observed, previous_status: Mapping[str, Any], verdict: JSON
) -> JSON | None:
    """``status.memory`` beside MemoryVerified (None when off); a kept gate-mode failure
    keeps the findings that made it (its pods are gone with their messages)."""
    if ic.spec.memory_preflight.mode == "off":
        return None
    pods, _ = rank_pods(observed)
    findings, _ = _collect(pods)
    return kept_report(verdict, ordered_findings(findings), previous_status.get("memory"))
