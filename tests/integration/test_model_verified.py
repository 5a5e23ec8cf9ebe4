"""ModelVerified end to end: every rank's init container checks ITS node's model copy.

The engine harness runs each rank's ``verify-model`` init container for real, on the
files under ``<hosts root>/<node>/`` (this test's temporary directory), so the three
nodes of group b can hold different copies of one tiny but real model (safetensors
shards, index, config, tokenizer). The operator reads the summaries the init containers
leave in their termination messages and compares them across nodes.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from sparkllm.integrity import ModelSummary
from sparkllm.render.ranks import VERIFY_CONTAINER
from sparkllm_dev.devcluster import DevCluster, wait_until
from sparkllm_dev.devcluster.engines import EngineHarness
from sparkllm_dev.testing import OperatorProcess, SharedOperatorView, quick_resync
from tests.integration.test_reconcile import NAME, apply, condition, icl, pods, sample, user_keys
from tests.unit.test_integrity_fixtures import make_model_dir, shard_name

pytestmark = pytest.mark.cluster
GROUP_B = ["spark-b0", "spark-b1", "spark-b2"]
MODEL_PATH = "/models/tiny-pp3"
LAYERS, SHARDS = 6, 3
MODEL_FILES = SHARDS + 4  # index, config.json, tokenizer.json, tokenizer_config.json
DEADLINE = 120  # seconds; generous, the machine is busy


@dataclass
class Stack:
    """The operator and an engine harness whose simulated nodes keep files in ``hosts``."""

    hosts: Path
    harness: EngineHarness
    operator: OperatorProcess

    def model_dir(self, node: str) -> Path:
        return self.hosts / node / MODEL_PATH.lstrip("/")


@pytest.fixture
def stack(shared_operator: SharedOperatorView, tmp_path: Path) -> Stack:
    """The shared operator and this test's engine harness, whose simulated nodes keep their
    files under ``tmp_path / "hosts"``."""
    assert shared_operator.engines is not None
    engines = shared_operator.engines
    return Stack(hosts=tmp_path / "hosts", harness=engines, operator=shared_operator)


def write_model(root: Path) -> Path:
    """A tiny real model: safetensors shards + index, config and a loadable tokenizer."""
    make_model_dir(root, layers=LAYERS, shards=SHARDS)
    vocabulary = {"[UNK]": 0, "hello": 1, "world": 2}
    tokenizer = Tokenizer(WordLevel(vocabulary, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    (root / "tokenizer.json").write_text(tokenizer.to_str())
    return root


def copy_to_nodes(master: Path, stack: Stack) -> None:
    for node in GROUP_B:
        shutil.copytree(master, stack.model_dir(node))


def tiny_cluster() -> dict[str, Any]:
    """The sample, pointed at the tiny model on group b."""
    doc = sample(GROUP_B)
    model = doc["spec"]["model"]
    model.update(path=MODEL_PATH, numLayers=LAYERS, expectedShards=SHARDS)
    del model["weightsGB"]  # the documents' 168.27 GB is not this model's size
    doc["spec"]["engine"]["layerPartition"] = [2, 2, 2]
    return doc


def verdict(cluster: DevCluster, namespace: str, status: str) -> dict[str, Any] | None:
    """The InferenceCluster once ModelVerified has ``status``."""
    obj = icl(cluster, namespace)
    cond = condition(obj, "ModelVerified")
    return obj if cond is not None and cond["status"] == status else None


def rank_summaries(cluster: DevCluster, namespace: str) -> dict[str, ModelSummary]:
    """Each rank's own verify-model summary, by node, from the pods' init statuses."""
    summaries = {}
    for pod in pods(cluster, namespace):
        # verify-model's own status (the launch check is another init container)
        [status] = [
            s for s in pod["status"]["initContainerStatuses"] if s["name"] == "verify-model"
        ]
        terminated = status["state"]["terminated"]
        assert (status["name"], terminated["reason"], terminated["exitCode"]) == (
            "verify-model",
            "Completed",
            0,
        )
        summaries[pod["spec"]["nodeName"]] = ModelSummary.from_message(terminated["message"])
    return summaries


@quick_resync  # the restart annotation read within 5 s
def test_identical_copies_verify_and_one_changed_byte_is_named_with_its_node(
    devcluster: DevCluster, namespace: str, stack: Stack, tmp_path: Path
) -> None:
    copy_to_nodes(write_model(tmp_path / "model"), stack)
    user_keys(devcluster, namespace)
    apply(devcluster, namespace, tiny_cluster())

    def verified_and_ready() -> dict[str, Any] | None:
        obj = verdict(devcluster, namespace, "True")
        ready = condition(obj or {}, "Ready")
        return obj if ready is not None and ready["status"] == "True" else None

    obj = wait_until(verified_and_ready, timeout=DEADLINE, what="ModelVerified True and Ready")
    model = condition(obj, "ModelVerified")
    assert model is not None
    assert model["reason"] == "ModelFilesVerified"
    assert model["message"].startswith(f"3 ranks agree: {MODEL_FILES} files")
    assert obj["status"]["replicaStatuses"][0]["phase"] == "Ready"
    summaries = rank_summaries(devcluster, namespace)
    assert sorted(summaries) == GROUP_B
    assert len({summary.digest for summary in summaries.values()}) == 1
    assert {(run.node, run.exit_code) for run in stack.harness.init_runs()} == {
        (node, 0) for node in GROUP_B
    }

    # One byte of one shard changes on spark-b2 only; the header stays valid, the size too.
    shard = stack.model_dir("spark-b2") / shard_name(1, SHARDS)
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF
    shard.write_bytes(bytes(data))
    devcluster.kubectl(
        "annotate", "icl", NAME, "-n", namespace, "sparkllm.io/restart=now", "--overwrite"
    )
    obj = wait_until(
        lambda: verdict(devcluster, namespace, "False"),
        timeout=DEADLINE,
        what="ModelVerified False after the restart",
    )
    model = condition(obj, "ModelVerified")
    assert model is not None
    assert model["reason"] == "ChecksumMismatch"
    message = model["message"]
    assert message.startswith(f"{shard.name} differs between nodes"), message
    assert re.search(r"\b[0-9a-f]{8} on spark-b0, spark-b1\b", message), message
    assert re.search(r"\b[0-9a-f]{8} on spark-b2\b", message), message
    assert "config.json" not in message
    # spark-b2's last verify-model run: a later init container (the launch check) may have
    # ended since, as a replayed launch check takes a fraction of a second.
    changed = [
        run
        for run in stack.harness.init_runs()
        if run.node == "spark-b2" and run.container == VERIFY_CONTAINER
    ][-1]
    assert changed.exit_code == 0  # its copy is whole: only the comparison tells it apart
    assert ModelSummary.from_message(changed.message).digest != summaries["spark-b2"].digest


def test_a_missing_shard_fails_its_init_container_and_its_engine_never_starts(
    devcluster: DevCluster, namespace: str, stack: Stack, tmp_path: Path
) -> None:
    copy_to_nodes(write_model(tmp_path / "model"), stack)
    missing = shard_name(2, SHARDS)
    (stack.model_dir("spark-b1") / missing).unlink()
    user_keys(devcluster, namespace)
    apply(devcluster, namespace, tiny_cluster())

    obj = wait_until(
        lambda: verdict(devcluster, namespace, "False"), timeout=DEADLINE, what="ModelVerified"
    )
    model = condition(obj, "ModelVerified")
    assert model is not None
    assert model["reason"] == "ModelIncomplete"
    assert model["message"].startswith("node spark-b1: model verification failed:"), model
    assert f"shard {missing}" in model["message"]
    assert "spark-b0" not in model["message"]
    assert "spark-b2" not in model["message"]
    ready = condition(obj, "Ready")
    assert ready is not None
    assert ready["status"] != "True"

    failed = [run for run in stack.harness.init_runs() if run.node == "spark-b1"]
    assert failed
    assert {run.exit_code for run in failed} == {1}
    assert ModelSummary.from_message(failed[0].message).ok is False
    for run in failed:  # a simulator log would exist had the engine ever started
        engine_log = stack.harness.log_dir / f"{namespace}_{run.pod}_{run.uid}.log"
        assert not engine_log.exists(), f"the engine of {run.pod} ran: {engine_log}"
