"""Proof-of-service conditions from hand-built inputs: CapacityPlanned, ModelVerified,
ConfigApplied.

"Not just HTTP 200": each condition must say Unknown while evidence is missing, True
only when every rank agrees, and False with the reason and the node or field at fault.
Rank pods are written by hand with the verify-model init container's termination
message built by ``ModelSummary(...).to_message()``, exactly what the init container
writes.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkllm.api import InferenceClusterSpec, validate_inference_cluster
from sparkllm.configcheck import Mismatch
from sparkllm.integrity import ModelSummary
from sparkllm.reconcile.decide.proofs import capacity_condition, config_condition, model_condition

JSON = dict[str, Any]
ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "manifests" / "samples" / "deepseek-v4-flash.yaml"
NODES = ("spark-a0", "spark-a1", "spark-a2")
DIGEST = "ab" * 32
SHARD7 = "model-00007-of-00046.safetensors"
FINGERPRINTS = {"config.json": "1a2b3c4d", "model-00001-of-00046.safetensors": "5e6f7a8b"}


def sample_spec(**model: Any) -> InferenceClusterSpec:
    doc: JSON = copy.deepcopy(yaml.safe_load(SAMPLE.read_text()))
    for key, value in model.items():
        if value is None:
            doc["spec"]["model"].pop(key, None)
        else:
            doc["spec"]["model"][key] = value
    return validate_inference_cluster(doc).spec


def summary(**changes: Any) -> ModelSummary:
    fields: JSON = {
        "ok": True, "mode": "sha256", "files": 52, "total_bytes": 168_270_000_000,
        "shards": 46, "digest": DIGEST, "fingerprints": dict(FINGERPRINTS),
    }  # fmt: skip
    fields.update(changes)
    return ModelSummary(**fields)


def verify_status(message: str | None, *, code: int = 0, last: bool = False) -> JSON:
    term: JSON = {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}
    if message is not None:
        term["message"] = message
    if last:  # the container ran again since: its message is in lastState
        return {"name": "verify-model", "state": {"running": {}}, "lastState": {"terminated": term}}
    return {"name": "verify-model", "state": {"terminated": term}}


def rank_pod(node: str | None, *init: JSON, name: str = "llm-r0-rank0-0") -> JSON:
    obj: JSON = {"metadata": {"name": name}, "status": {"phase": "Running"}}
    if node is not None:
        obj["spec"] = {"nodeName": node}
    if init:
        obj["status"]["initContainerStatuses"] = list(init)
    return obj


def verified_pods(*summaries: ModelSummary) -> list[JSON]:
    return [
        rank_pod(node, verify_status(s.to_message()))
        for node, s in zip(NODES, summaries, strict=False)
    ]


def summary_of(c: JSON) -> tuple[str, str]:
    return c["status"], c["reason"]


# --- CapacityPlanned ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("weights", "status", "reason", "fits", "message"),
    [
        (None, "Unknown", "CapacityUnknown", True,
         "spec.model.weightsGB is not set: no memory plan before start"),
        (168.27, "True", "CapacityFits", True, "every rank fits: heaviest rank 2 holds 58.70 GB"),
        (400, "False", "CapacityExceeded", False,
         "rank 0: weights 130.23 GB do not fit the static budget 0.57 x 128 GB = 72.96 GB"),
    ],
)  # fmt: skip
def test_capacity_condition(
    weights: float | None, status: str, reason: str, fits: bool, message: str
) -> None:
    cond, start = capacity_condition(sample_spec(weightsGB=weights), generation=5)
    assert (cond["type"], cond["status"], cond["reason"]) == ("CapacityPlanned", status, reason)
    assert cond["observedGeneration"] == 5
    assert cond["message"].startswith(message)
    assert start is fits


def test_capacity_exceeded_names_every_rank() -> None:
    cond, _ = capacity_condition(sample_spec(weightsGB=400), generation=1)
    assert [part.split(":")[0] for part in cond["message"].split("; ")] == [
        "rank 0", "rank 1", "rank 2",
    ]  # fmt: skip


# --- ModelVerified ----------------------------------------------------------------------------


def test_no_pods_is_unknown() -> None:
    cond = model_condition([], generation=2)
    assert summary_of(cond) == ("Unknown", "VerificationPending")
    assert cond["message"] == "0 of 0 ranks reported their model check"
    assert cond["type"] == "ModelVerified"
    assert cond["observedGeneration"] == 2


@pytest.mark.parametrize(
    ("pods", "message"),
    [
        pytest.param([rank_pod(n) for n in NODES], "0 of 3 ranks", id="not-started"),
        pytest.param(
            [rank_pod(NODES[0], {"name": "verify-model", "state": {"running": {}}})],
            "0 of 1 ranks", id="verifying",
        ),
        pytest.param(
            [*verified_pods(summary(), summary()), rank_pod(NODES[2])],
            "2 of 3 ranks", id="two-agree-one-pending",
        ),
        pytest.param(
            [rank_pod(NODES[0], verify_status(None, code=137))], "0 of 1 ranks",
            id="killed-without-a-message",
        ),
        pytest.param(
            [rank_pod(NODES[0], {"name": "other-init", "state": {"terminated": {
                "exitCode": 0, "message": summary().to_message()}}})],
            "0 of 1 ranks", id="another-init-container-is-not-the-verifier",
        ),
    ],
)  # fmt: skip
def test_pending_verification_is_unknown(pods: list[JSON], message: str) -> None:
    cond = model_condition(pods, generation=1)
    assert summary_of(cond) == ("Unknown", "VerificationPending")
    assert cond["message"] == f"{message} reported their model check"


def test_all_ranks_agree() -> None:
    cond = model_condition(verified_pods(summary(), summary(), summary()), generation=4)
    assert summary_of(cond) == ("True", "ModelFilesVerified")
    assert cond["message"] == "3 ranks agree: 52 files, 168.27 GB, 46 shards (sha256)"
    assert cond["observedGeneration"] == 4


def test_a_message_in_last_state_counts() -> None:
    pods = [rank_pod(n, verify_status(summary().to_message(), last=True)) for n in NODES]
    assert summary_of(model_condition(pods, generation=1)) == ("True", "ModelFilesVerified")


def test_a_differing_digest_names_the_file_and_the_nodes() -> None:
    odd = summary(
        digest="cd" * 32,
        fingerprints={**FINGERPRINTS, "model-00001-of-00046.safetensors": "deadbeef"},
    )
    cond = model_condition(verified_pods(summary(), odd, summary()), generation=1)
    assert summary_of(cond) == ("False", "ChecksumMismatch")
    assert cond["message"] == (
        "model-00001-of-00046.safetensors differs between nodes: "
        "5e6f7a8b on spark-a0, spark-a2; deadbeef on spark-a1"
    )


def test_a_differing_digest_without_fingerprints_names_the_nodes() -> None:
    odd = summary(digest="cd" * 32, fingerprints=None)
    same = summary(fingerprints=None)
    cond = model_condition(verified_pods(same, same, odd), generation=1)
    assert summary_of(cond) == ("False", "ChecksumMismatch")
    assert "model directories differ between nodes" in cond["message"]
    assert "abababababab on spark-a0, spark-a1" in cond["message"]
    assert "cdcdcdcdcdcd on spark-a2" in cond["message"]


def test_a_difference_waits_for_the_ranks_still_checking() -> None:
    odd = summary(digest="cd" * 32, fingerprints=None)
    same = summary(fingerprints=None)
    pending = [*verified_pods(same, odd), rank_pod(NODES[2])]
    cond = model_condition(pending, generation=1)
    assert summary_of(cond) == ("Unknown", "VerificationPending")
    assert cond["message"] == "2 of 3 ranks reported their model check"
    cond = model_condition(verified_pods(same, odd, same), generation=1)
    assert summary_of(cond) == ("False", "ChecksumMismatch")
    assert "abababababab on spark-a0, spark-a2" in cond["message"]
    assert "cdcdcdcdcdcd on spark-a1" in cond["message"]


@pytest.mark.parametrize("second", ["agrees", "differs"])
def test_a_rank_pod_not_made_yet_is_still_checking(second: str) -> None:
    same = summary(fingerprints=None)
    other = same if second == "agrees" else summary(digest="cd" * 32, fingerprints=None)
    cond = model_condition(verified_pods(same, other), generation=1, expected=3)
    assert summary_of(cond) == ("Unknown", "VerificationPending")
    assert cond["message"] == "2 of 3 ranks reported their model check"
    cond = model_condition(verified_pods(same, other), generation=1, expected=2)
    assert cond["status"] == ("True" if second == "agrees" else "False")


@pytest.mark.parametrize(
    ("pods", "message"),
    [
        pytest.param(
            verified_pods(summary(), summary(ok=False, error=f"shard {SHARD7} is missing"),
                          summary()),
            f"node spark-a1: model verification failed: shard {SHARD7} is missing",
            id="failed-verification",
        ),
        pytest.param(
            [rank_pod(NODES[0],
                      verify_status(summary(ok=False, error="no tokenizer").to_message(), code=1)),
             rank_pod(NODES[1])],
            "node spark-a0: model verification failed: no tokenizer",
            id="failed-while-others-pending",
        ),
        pytest.param(
            [rank_pod(NODES[0], verify_status("Traceback: boom", code=1))],
            "node spark-a0: model verification failed: exit code 1: Traceback: boom",
            id="not-a-summary",
        ),
        pytest.param(
            [rank_pod(None, verify_status(summary(ok=False, error="x").to_message(), code=1),
                      name="llm-r0-rank2-0")],
            "node llm-r0-rank2-0: model verification failed: x",
            id="unscheduled-pod-named-by-pod",
        ),
    ],
)  # fmt: skip
def test_a_failed_verification_is_model_incomplete(pods: list[JSON], message: str) -> None:
    cond = model_condition(pods, generation=1)
    assert summary_of(cond) == ("False", "ModelIncomplete")
    assert cond["message"] == message


def test_failure_and_mismatch_together_are_model_incomplete() -> None:
    pods = verified_pods(
        summary(),
        summary(ok=False, error="index missing"),
        summary(digest="cd" * 32, fingerprints=None),
    )
    cond = model_condition(pods, generation=1)
    assert summary_of(cond) == ("False", "ModelIncomplete")
    assert cond["message"].startswith("node spark-a1: model verification failed: index missing; ")


# --- ConfigApplied ------------------------------------------------------------------------------

MEM = Mismatch(
    field="mem_fraction_static", source="spec.engine.memFractionStatic", wanted=0.57, actual=0.5
)
PARSER = Mismatch(
    field="tool_call_parser", source="spec.engine.toolCallParser", wanted="deepseekv4",
    actual=None, reported=False,
)  # fmt: skip
UNREACHABLE = "cannot read http://10.0.0.10:30000/get_server_info: ConnectError"


@pytest.mark.parametrize(
    ("results", "status", "reason", "message"),
    [
        pytest.param({}, "Unknown", "VerificationPending", "no replica serves yet", id="empty"),
        pytest.param(
            {0: []}, "True", "ConfigMatches",
            "rank 0 of 1 replica(s) runs with every setting the spec asks for", id="one-matches",
        ),
        pytest.param(
            {0: [], 1: []}, "True", "ConfigMatches",
            "rank 0 of 2 replica(s) runs with every setting the spec asks for", id="all-match",
        ),
        pytest.param(
            {0: [MEM]}, "False", "ConfigMismatch",
            "replica 0: rank 0 does not run with the spec's settings: mem_fraction_static: "
            "wanted 0.57 (spec.engine.memFractionStatic), engine reports 0.5",
            id="mismatch-names-the-field",
        ),
        pytest.param(
            {1: [PARSER], 0: [MEM]}, "False", "ConfigMismatch",
            "replica 0: rank 0 does not run with the spec's settings: mem_fraction_static: "
            "wanted 0.57 (spec.engine.memFractionStatic), engine reports 0.5; replica 1: rank 0 "
            "does not run with the spec's settings: tool_call_parser: wanted 'deepseekv4' "
            "(spec.engine.toolCallParser), engine does not report it",
            id="mismatches-in-replica-order",
        ),
        pytest.param(
            {0: [], 1: UNREACHABLE}, "Unknown", "VerificationPending",
            f"replica 1: {UNREACHABLE}", id="error-is-unknown",
        ),
        pytest.param(
            {0: UNREACHABLE, 1: [MEM]}, "False", "ConfigMismatch",
            "replica 1: rank 0 does not run with the spec's settings: mem_fraction_static: "
            "wanted 0.57 (spec.engine.memFractionStatic), engine reports 0.5",
            id="mismatch-beats-error",
        ),
    ],
)  # fmt: skip
def test_config_condition(
    results: dict[int, list[Mismatch] | str], status: str, reason: str, message: str
) -> None:
    cond = config_condition(results, generation=6)
    assert cond == {
        "type": "ConfigApplied",
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": 6,
    }
