"""The dev cluster's verify-bandwidth: the rendered init container as a local command.

The pod is what the operator renders (warn mode, the sample on three nodes); the step
must run the very module verify-network copied into the pod's emptyDir, with the torch
venv's interpreter, Gloo over loopback, and a rendezvous port shared by the replica's
ranks but not by another replica or generation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.unit.test_preflight_render import _plan
from tests.unit.test_render_ranks import pod_spec, sample, statefulsets

from sparkllm.render.network_preflight import BANDWIDTH_CONTAINER, CODE_DIR
from sparkllm_dev.devcluster import hostpaths, kubelet
from sparkllm_dev.devcluster.bandwidth_step import (
    is_bandwidth,
    plan_init_step,
    rendezvous_port,
)
from sparkllm_dev.gloo_bandwidth import torch_venv

JSON = dict[str, Any]


def _pod(rank: int, *, replica: str = "0", generation: str = "1") -> JSON:
    ic = sample(network={"preflight": {"mode": "warn"}})
    spec = pod_spec(statefulsets(ic, _plan())[rank])
    labels = {"sparkllm.io/cluster": "c", "sparkllm.io/replica": replica,
              "sparkllm.io/restart-generation": generation}  # fmt: skip
    meta = {"name": f"r{rank}", "namespace": "ns", "uid": "u", "labels": labels}
    return {"metadata": meta, "spec": {**spec, "nodeName": f"spark-{rank}"}}


def _container(pod: JSON) -> JSON:
    found: JSON = next(c for c in pod["spec"]["initContainers"] if c["name"] == BANDWIDTH_CONTAINER)
    return found


def test_recognises_the_module_only() -> None:
    assert is_bandwidth(["python3", "-m", "sparkllm.preflight.bandwidth", "--backend", "nccl"])
    assert is_bandwidth(["/usr/bin/python3.12", "-m", "sparkllm.preflight.bandwidth"])
    assert not is_bandwidth(["sparkllm", "verify-network"])
    assert not is_bandwidth(["python3", "-m", "sglang.launch_server"])


def test_one_port_per_replica_generation() -> None:
    ports = {rendezvous_port(_pod(rank), master_addr="127.0.0.2") for rank in range(3)}
    assert len(ports) == 1
    [port] = ports
    assert 41000 <= port < 49000
    assert rendezvous_port(_pod(0, replica="1"), master_addr="127.0.0.2") != port
    assert rendezvous_port(_pod(0, generation="2"), master_addr="127.0.0.2") != port


def _plan_step(pod: JSON, tmp_path: Path) -> tuple[hostpaths.InitStep | None, str]:
    container = _container(pod)
    env = kubelet.container_env(pod, container, values={})
    mounts = hostpaths.plan_mounts(
        pod, container, hosts_root=tmp_path / "hosts", scratch=tmp_path / "s", config_maps={}
    )
    return plan_init_step(
        pod, container, env=env, mounts=mounts, scratch=tmp_path / "s", python="py",
        log_path=tmp_path / "log",
    )  # fmt: skip


def test_runs_the_copied_module_under_gloo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKLLM_CACHE", str(tmp_path / "cache"))
    pod = _pod(1)
    step, why = _plan_step(pod, tmp_path)
    assert step is None
    assert "hack/setup-torch.sh" in why  # no torch venv: not run, and says how to get one
    venv = torch_venv()
    venv.mkdir(parents=True)
    (venv / ".complete").touch()
    step, why = _plan_step(pod, tmp_path)
    assert step is not None
    assert step.argv[:3] == (str(venv / "bin" / "python"), "-m", "sparkllm.preflight.bandwidth")
    assert step.argv[-2:] == ("--backend", "gloo")  # argparse: the last --backend wins
    log = step.argv[step.argv.index("--termination-log") + 1]
    assert log == str(step.termination_file)
    # The emptyDir verify-network filled, not the repo's copy.
    assert step.env["PYTHONPATH"] == str(tmp_path / "s" / "volumes" / "preflight-code")
    assert CODE_DIR not in step.env["PYTHONPATH"]
    assert (step.env["RANK"], step.env["WORLD_SIZE"]) == ("1", "3")
    assert step.env["GLOO_SOCKET_IFNAME"] == "lo"
    port = rendezvous_port(pod, master_addr=step.env["MASTER_ADDR"])
    assert step.env["MASTER_PORT"] == str(port)
    assert step.as_written.startswith("python3 -m sparkllm.preflight.bandwidth --backend nccl")
