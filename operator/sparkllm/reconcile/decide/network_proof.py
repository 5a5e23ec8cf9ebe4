"""NetworkVerified and ``status.network`` from the ranks' preflight init containers.

Why its own module: the network preflight leaves two results in every rank pod, the
per-node findings of ``verify-network`` and, when the replica measures its bandwidth,
``verify-bandwidth``'s measurement (docs/network.md). Both are read here, from the
pods' termination messages, into one verdict: a node's error is final at once and named
(node, check, message, the measured Gb/s against the threshold); otherwise the verdict
waits for every rank the StatefulSets ask for. In gate mode a failed verdict is kept
like a model mismatch (proofs.py). Pure: pods in, condition and status out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from sparkllm.api import ConditionType, InferenceCluster, Reason
from sparkllm.api.network_status import MAX_FINDINGS
from sparkllm.keys import LABEL_REPLICA
from sparkllm.preflight.bandwidth import MIB, BandwidthResult, result_from_json
from sparkllm.preflight.findings import Check, Finding, Severity, failed, from_json, summarize
from sparkllm.reconcile.decide.proofs import init_container_result, keep_failed, rank_pods
from sparkllm.reconcile.decide.replicas import Observed
from sparkllm.reconcile.decide.status import condition
from sparkllm.render.network_preflight import BANDWIDTH_CONTAINER, NETWORK_CONTAINER

JSON = dict[str, Any]
_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


def _node(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or pod["metadata"]["name"])


def _unreadable(node: str, container: str, code: int | None, message: str) -> Finding:
    text = f"{container}: unreadable result (exit code {code}): {message[:200]}"
    if not message.strip():
        text = f"{container}: ended without a result (exit code {code})"
    return Finding(node, Check.PREFLIGHT, Severity.ERROR, text)


def preflight_findings(
    pod: Mapping[str, Any], container: str = NETWORK_CONTAINER
) -> list[Finding] | None:
    """The findings one rank pod's check container (verify-network by default; the memory
    preflight's too) left, on the pod's node; None while it has not ended."""
    node = _node(pod)
    message, code = init_container_result(pod, container)
    if not message and code in (None, 0):
        return None  # not ended, or ended without writing (kwok's stand-in status)
    message = message or ""
    try:
        return [replace(f, node=node) for f in from_json(message)]
    except (ValueError, KeyError, TypeError):
        return [_unreadable(node, container, code, message)]


def ordered_findings(findings: Sequence[Finding]) -> JSON:
    """A status's ``findings`` (errors first, bounded) and ``omittedFindings``."""
    ordered = sorted(findings, key=lambda f: _ORDER[f.severity])
    return {
        "findings": [
            {
                "node": f.node,
                "check": f.check.value,
                "severity": f.severity.value,
                "message": f.message[:1024],
            }
            for f in ordered[:MAX_FINDINGS]
        ],
        "omittedFindings": max(0, len(ordered) - MAX_FINDINGS),
    }


def _measures(pod: Mapping[str, Any]) -> bool:
    containers = (pod.get("spec") or {}).get("initContainers") or []
    return any(c.get("name") == BANDWIDTH_CONTAINER for c in containers)


def _bandwidth(pod: Mapping[str, Any]) -> BandwidthResult | Finding | None:
    """verify-bandwidth's result (findings on the pod's node), a finding when it left
    none, or None while it has not ended."""
    node = _node(pod)
    message, code = init_container_result(pod, BANDWIDTH_CONTAINER)
    if message is None and code is None:
        return None
    message = message or ""
    try:
        result = result_from_json(message)
    except (ValueError, KeyError, TypeError):
        return _unreadable(node, BANDWIDTH_CONTAINER, code, message)
    return replace(result, findings=tuple(replace(f, node=node) for f in result.findings))


@dataclass
class NetworkEvidence:
    """What the ranks' pods reported so far."""

    findings: list[Finding] = field(default_factory=list)
    reported: int = 0
    measurements: list[JSON] = field(default_factory=list)

    def add(self, pod: Mapping[str, Any]) -> None:
        found = preflight_findings(pod)
        if found is None:
            return
        self.findings.extend(found)
        if not _measures(pod) or failed(found):
            self.reported += 1  # a failed node's collective may never run (gate)
            return
        result = _bandwidth(pod)
        if result is None:
            return
        self.reported += 1
        if isinstance(result, Finding):
            self.findings.append(result)
            return
        self.findings.extend(result.findings)
        if result.rank == 0 and result.busbw_gbps is not None:
            self.measurements.append(_measurement(pod, result))


def _measurement(pod: Mapping[str, Any], result: BandwidthResult) -> JSON:
    replica = (pod["metadata"].get("labels") or {}).get(LABEL_REPLICA, "0")
    return {
        "replica": int(replica) if str(replica).isdigit() else 0,
        "node": _node(pod),
        "op": result.op,
        "ranks": result.ranks,
        "sizeMiB": result.nbytes // MIB,
        "busBandwidthGbps": result.busbw_gbps,
        "thresholdGbps": result.threshold_gbps,
    }


def collect(pods: Sequence[Mapping[str, Any]]) -> NetworkEvidence:
    evidence = NetworkEvidence()
    for pod in pods:
        evidence.add(pod)
    evidence.measurements.sort(key=lambda m: int(m["replica"]))
    return evidence


def network_condition(
    pods: Sequence[Mapping[str, Any]], *, generation: int, expected: int = 0
) -> JSON:
    """NetworkVerified from every rank pod's preflight results (docs/network.md).

    A node's error is final at once (it names the node and the check); otherwise the
    condition waits, like ModelVerified, for every rank the StatefulSets ask for.
    """
    evidence = collect(pods)
    findings = evidence.findings
    total = max(expected, len(pods))
    if failed(findings):
        status, reason = False, Reason.NETWORK_CHECK_FAILED
        message = summarize(findings)
    elif evidence.reported < total or not evidence.reported:
        status, reason = None, Reason.VERIFICATION_PENDING
        message = f"{evidence.reported} of {total} ranks reported their network check"
    else:
        status, reason = True, Reason.NETWORK_CHECKS_PASSED
        message = f"{evidence.reported} ranks passed the network checks; {summarize(findings)}"
        for m in evidence.measurements:
            message += (
                f"; replica {m['replica']}: {m['op']} bus bandwidth "
                f"{m['busBandwidthGbps']:.1f} Gb/s (threshold {m['thresholdGbps']:g})"
            )
    return condition(
        ConditionType.NETWORK_VERIFIED,
        status=status,
        reason=reason,
        message=message,
        generation=generation,
    )


def network_status(pods: Sequence[Mapping[str, Any]]) -> JSON:
    """``status.network``: every finding (errors first, bounded) and the measurements."""
    evidence = collect(pods)
    return {**ordered_findings(evidence.findings), "bandwidth": evidence.measurements}


def network_verdict(
    ic: InferenceCluster,
    observed: Observed,
    previous_status: Mapping[str, Any],
    *,
    generation: int,
    force: bool,
) -> JSON | None:
    """NetworkVerified, or None when spec.network.preflight.mode is off (no condition).

    In gate mode a failure stops the replica (its pods and their messages go), so, like
    a model mismatch, it is kept until the spec changes or a restart is requested, which
    runs the check again.
    """
    return preflight_verdict(
        ic.spec.network.preflight.mode,
        observed,
        previous_status,
        ConditionType.NETWORK_VERIFIED,
        network_condition,
        generation=generation,
        force=force,
    )


class Judge(Protocol):
    """A preflight's condition from the rank pods (network_condition, memory_condition)."""

    def __call__(
        self, pods: Sequence[Mapping[str, Any]], *, generation: int, expected: int = 0
    ) -> JSON: ...


def preflight_verdict(
    mode: str,
    observed: Observed,
    previous_status: Mapping[str, Any],
    kind: ConditionType,
    judge: Judge,
    *,
    generation: int,
    force: bool,
) -> JSON | None:
    """A preflight's condition in its mode: None when off; otherwise a failure is kept
    until the spec changes or a restart: in gate mode the stop takes the pods and their
    messages; in warn mode a pass that sees the rank pods without their results (a pod
    being replaced, a status not yet written) would make it Unknown and then False again,
    and each return to False was one more identical Warning Event."""
    if mode == "off":
        return None
    engine_pods, expected = rank_pods(observed)
    verdict = judge(engine_pods, generation=generation, expected=expected)
    return keep_failed(verdict, previous_status, kind, generation=generation, force=force)


def kept_report(verdict: JSON, report: JSON, previous: Mapping[str, Any] | None) -> JSON:
    """A preflight's status part; while a failed verdict is kept, so are its findings."""
    if verdict["status"] == "False" and not report["findings"] and previous:
        return dict(previous)
    return report


def network_report(
    ic: InferenceCluster, observed: Observed, previous_status: Mapping[str, Any], verdict: JSON
) -> JSON | None:
    """``status.network`` beside NetworkVerified (None when the preflight is off).

    A gate-mode failure stops the replica and its pods go with their results: while the
    failed verdict is kept, so are the findings that made it.
    """
    if ic.spec.network.preflight.mode == "off":
        return None
    engine_pods, _ = rank_pods(observed)
    return kept_report(verdict, network_status(engine_pods), previous_status.get("network"))
