"""The dev cluster's launch check: which container it is, how it runs, what a node pulled."""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.test_render_ranks import pod_spec, sample, statefulsets

from sparkllm.sglang_contract.launch_check import (
    LAUNCH_CHECK_COMMAND,
    LAUNCH_CHECK_CONTAINER,
    TERMINATION_LOG_ENV,
)
from sparkllm_dev.devcluster import kubelet, launch_step
from sparkllm_dev.sim.launch_check import IMAGE_FACTS_PATH, SIM_VERSION_ENV

DIGEST = "sha256:" + "c" * 64


def _pod(node: str = "spark-a1") -> dict[str, object]:
    return {"metadata": {"name": "p", "namespace": "n"}, "spec": {"nodeName": node}}


def _container() -> dict[str, object]:
    return {
        "name": LAUNCH_CHECK_CONTAINER,
        "image": "nvcr.io/nvidia/sglang:26.07-py3",
        "command": list(LAUNCH_CHECK_COMMAND),
        "args": ["--model-path", "/models/m", "--port", "$(PORT)"],
    }


def test_only_the_operators_program_is_the_launch_check() -> None:
    assert launch_step.is_launch_check([*LAUNCH_CHECK_COMMAND, "--x"])
    assert not launch_step.is_launch_check(["python3", "-c", "print(1)"])
    assert not launch_step.is_launch_check(["sparkllm", "verify-model"])


def test_it_runs_the_harness_runner_with_the_nodes_version(tmp_path: Path) -> None:
    facts = tmp_path / "spark-a1" / IMAGE_FACTS_PATH
    facts.parent.mkdir(parents=True)
    facts.write_text(json.dumps({"version": "0.5.22", "digest": DIGEST}))
    step = launch_step.plan_step(
        _pod(), _container(), env={"PORT": "30000"}, scratch=tmp_path / "s",
        python="/venv/python", log_path=tmp_path / "log", hosts_root=tmp_path,
    )  # fmt: skip
    assert step is not None
    assert step.argv == (
        "/venv/python", "-m", "sparkllm_dev.sim.launch_check",
        "--model-path", "/models/m", "--port", "30000",
    )  # fmt: skip
    assert step.env[TERMINATION_LOG_ENV] == str(step.termination_file)
    assert step.env[SIM_VERSION_ENV] == "0.5.22"
    assert "LAUNCH_CHECK_CODE" in step.as_written  # the program itself is not logged
    pinned = {**_container(), "image": "nvcr.io/nvidia/sglang:26.07-py3@sha256:" + "e" * 64}
    by_digest = launch_step.plan_step(
        _pod(), pinned, env={"PORT": "1"}, scratch=tmp_path / "s", python="p",
        log_path=tmp_path / "log", hosts_root=tmp_path,
    )  # fmt: skip
    assert by_digest is not None
    assert SIM_VERSION_ENV not in by_digest.env  # a digest pull gets that build everywhere
    other = launch_step.plan_step(
        _pod("spark-a2"), _container(), env={}, scratch=tmp_path / "s", python="p",
        log_path=tmp_path / "log", hosts_root=tmp_path,
    )  # fmt: skip
    assert other is not None
    assert SIM_VERSION_ENV not in other.env


def test_image_ids() -> None:
    tag = "nvcr.io/nvidia/sglang:26.07-py3"
    same = kubelet.image_id(tag)
    assert same.startswith("nvcr.io/nvidia/sglang@sha256:")
    assert kubelet.image_id(tag) == same  # the registry's digest of the tag: stable
    assert kubelet.image_id(tag, node_digest=DIGEST) == f"nvcr.io/nvidia/sglang@{DIGEST}"
    assert kubelet.image_id("localhost:5000/sglang", node_digest=DIGEST) == (
        f"localhost:5000/sglang@{DIGEST}"
    )
    pinned = f"{tag}@sha256:" + "d" * 64
    assert kubelet.image_id(pinned, node_digest=DIGEST) == pinned  # a digest pulls itself


def test_the_rendered_launch_check_runs_the_engines_own_args(tmp_path: Path) -> None:
    spec = pod_spec(statefulsets(sample())[1])
    pod = {"metadata": {"name": "r1", "namespace": "n"}, "spec": {**spec, "nodeName": "a1"}}
    verify, check = spec["initContainers"]
    [engine] = spec["containers"]
    assert launch_step.plan_step(
        pod, verify, env={}, scratch=tmp_path, python="py", log_path=tmp_path / "l",
        hosts_root=tmp_path,
    ) is None  # fmt: skip
    step = launch_step.plan_step(
        pod, check, env={}, scratch=tmp_path, python="py", log_path=tmp_path / "l",
        hosts_root=tmp_path,
    )  # fmt: skip
    assert step is not None
    assert step.argv == ("py", "-m", "sparkllm_dev.sim.launch_check", *engine["args"])
