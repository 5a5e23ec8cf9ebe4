"""Proof-of-service conditions: CapacityPlanned, ModelVerified, ConfigApplied.

"Not just HTTP 200" (SEEDS.md, acceptance): a replica that answers may still run with a
setting SGLang silently ignored, or with a model copy that differs from its peers'.
These conditions say so, all three pure: capacity from the spec, the model check from
the rank pods' status, the config check from rank 0's ``/get_server_info`` as the observe
step read it (``engines.ConfigProbe``: once per restart generation, secrets redacted),
compared with the spec in ``decide`` (``configcheck.compare_server_info``).

The rules every rank-pod proof shares live here too, and NetworkVerified
(network_proof.py) uses them: a rank pod's result is its init container's termination
message (``init_container_result``), the verdict waits for every rank the StatefulSets
ask for (``rank_pods``), and a failed verdict of this spec generation outlives the pods
that reported it (``keep_failed``; ``model_verdict``), so a stopped replica does not
start again on bad files or a failed network.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sparkllm.api import ConditionType, InferenceClusterSpec, Reason
from sparkllm.configcheck import Mismatch, describe_mismatches
from sparkllm.integrity import ModelSummary, compare_rank_summaries
from sparkllm.integrity.summary import SummaryError
from sparkllm.keys import LABEL_RANK
from sparkllm.plan import plan_capacity
from sparkllm.reconcile.decide.replicas import Observed, label
from sparkllm.reconcile.decide.status import condition
from sparkllm.render.ranks import VERIFY_CONTAINER

JSON = dict[str, Any]
ConfigResult = list[Mismatch] | str  # mismatches, or why the check could not run


def capacity_condition(spec: InferenceClusterSpec, *, generation: int) -> tuple[JSON, bool]:
    """CapacityPlanned, and whether the plan lets the replicas start."""
    if spec.model.weights_gb is None:
        return condition(
            ConditionType.CAPACITY_PLANNED,
            status=None,
            reason=Reason.CAPACITY_UNKNOWN,
            message="spec.model.weightsGB is not set: no memory plan before start",
            generation=generation,
        ), True
    plan = plan_capacity(spec, total_weight_gb=spec.model.weights_gb)
    return condition(
        ConditionType.CAPACITY_PLANNED,
        status=plan.fits,
        reason=plan.reason,
        message=plan.condition_message(),
        generation=generation,
    ), plan.fits


def init_container_result(
    pod: Mapping[str, Any], container: str = VERIFY_CONTAINER
) -> tuple[str | None, int | None]:
    """An init container's termination message and exit code, if it ended (verify-model's
    by default; network_proof.py reads the network preflight's the same way)."""
    for status in (pod.get("status") or {}).get("initContainerStatuses") or []:
        if status.get("name") != container:
            continue
        for state in (status.get("state") or {}, status.get("lastState") or {}):
            term = state.get("terminated")
            if term:
                return term.get("message"), term.get("exitCode")
    return None, None


def model_condition(
    pods: Sequence[Mapping[str, Any]], *, generation: int, expected: int = 0
) -> JSON:
    """ModelVerified from every rank pod's integrity summary, compared across nodes.

    ``expected`` is how many rank pods the StatefulSets ask for: those not made yet count
    as still checking, like the pods whose check has not ended.
    """
    summaries: dict[str, ModelSummary] = {}
    pending = max(0, expected - len(pods))  # ranks still checking, or not made yet
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName") or pod["metadata"]["name"]
        message, code = init_container_result(pod)
        if not message:
            pending += 1
            continue
        try:
            summaries[node] = ModelSummary.from_message(message)
        except SummaryError:
            detail = f"exit code {code}: {message[:200]}"
            summaries[node] = ModelSummary(ok=False, error=detail)
    problems = compare_rank_summaries(summaries) if summaries else []
    incomplete = any(not s.ok for s in summaries.values())
    # A failed check is one node's fact and is final at once; a difference waits for the
    # ranks still checking, so the message shows every node's copy (which side is odd).
    if problems and (incomplete or not pending):
        return condition(
            ConditionType.MODEL_VERIFIED,
            status=False,
            reason=Reason.MODEL_INCOMPLETE if incomplete else Reason.CHECKSUM_MISMATCH,
            message="; ".join(problems),
            generation=generation,
        )
    if pending or not summaries:
        return condition(
            ConditionType.MODEL_VERIFIED,
            status=None,
            reason=Reason.VERIFICATION_PENDING,
            message=f"{len(summaries)} of {len(summaries) + pending} ranks reported "
            "their model check",
            generation=generation,
        )
    first = next(iter(summaries.values()))
    return condition(
        ConditionType.MODEL_VERIFIED,
        status=True,
        reason=Reason.MODEL_FILES_VERIFIED,
        message=f"{len(summaries)} ranks agree: {first.files} files, "
        f"{first.total_bytes / 1e9:.2f} GB, {first.shards} shards ({first.mode})",
        generation=generation,
    )


def rank_pods(observed: Observed) -> tuple[list[JSON], int]:
    """The engine pods seen, and how many rank pods the StatefulSets ask for."""
    engine_pods = [p for p in observed.pods if label(p, LABEL_RANK) is not None]
    expected = sum(
        int(s["spec"].get("replicas", 1))
        for s in observed.statefulsets
        if label(s, LABEL_RANK) is not None
    )
    return engine_pods, expected


def keep_failed(
    now: JSON,
    previous_status: Mapping[str, Any],
    kind: ConditionType,
    *,
    generation: int,
    force: bool,
) -> JSON:
    """``now``, unless it is Unknown and this generation's previous verdict was False."""
    previous = previous_condition(previous_status, kind)
    if (
        now["status"] == "Unknown"
        and previous is not None
        and previous.get("status") == "False"
        and previous.get("observedGeneration") == generation
        and not force
    ):
        return kept(previous)
    return now


def previous_condition(previous_status: Mapping[str, Any], kind: ConditionType) -> JSON | None:
    """The last status's condition of ``kind`` (None when it had none)."""
    return next(
        (c for c in previous_status.get("conditions") or [] if c.get("type") == kind.value),
        None,
    )


def kept(previous: Mapping[str, Any]) -> JSON:
    """A previous verdict carried into this pass, as the condition it was."""
    keys = ("type", "status", "reason", "message", "observedGeneration")
    return {k: previous[k] for k in keys}


def model_verdict(
    observed: Observed, previous_status: Mapping[str, Any], *, generation: int, force: bool
) -> JSON:
    """ModelVerified now; a failed verdict of this spec generation outlives its pods.

    When the ranks' copies disagree the replica is stopped, and the init containers'
    messages go with the pods; the verdict is kept until the spec changes or a restart
    is requested, so the replica does not start again on bad files.
    """
    engine_pods, expected = rank_pods(observed)
    model = model_condition(engine_pods, generation=generation, expected=expected)
    return keep_failed(
        model, previous_status, ConditionType.MODEL_VERIFIED, generation=generation, force=force
    )


def config_condition(results: Mapping[int, ConfigResult], *, generation: int) -> JSON:
    """ConfigApplied from the per-replica checks of serving replicas."""
    if not results:
        return condition(
            ConditionType.CONFIG_APPLIED,
            status=None,
            reason=Reason.VERIFICATION_PENDING,
            message="no replica serves yet",
            generation=generation,
        )
    mismatched = {i: r for i, r in results.items() if isinstance(r, list) and r}
    if mismatched:
        text = "; ".join(
            f"replica {i}: {describe_mismatches(r)}" for i, r in sorted(mismatched.items())
        )
        return condition(
            ConditionType.CONFIG_APPLIED,
            status=False,
            reason=Reason.CONFIG_MISMATCH,
            message=text,
            generation=generation,
        )
    failed = {i: r for i, r in results.items() if isinstance(r, str)}
    if failed:
        return condition(
            ConditionType.CONFIG_APPLIED,
            status=None,
            reason=Reason.VERIFICATION_PENDING,
            message="; ".join(f"replica {i}: {r}" for i, r in sorted(failed.items())),
            generation=generation,
        )
    return condition(
        ConditionType.CONFIG_APPLIED,
        status=True,
        reason=Reason.CONFIG_MATCHES,
        message=f"rank 0 of {len(results)} replica(s) runs with every setting the spec asks for",
        generation=generation,
    )
