"""spec.network.preflight in the rank pods: no trace when off; when on, verify-network,
then verify-bandwidth (the collective, in the engine image), then verify-model; --gate
only in gate mode, SGLANG_HOST_IP from the node's address, every rank's address in the
pod template (a change of any re-runs the checks)."""

from __future__ import annotations

from typing import Any

import pytest

from sparkllm.render import ReplicaPlan
from sparkllm.render.network_preflight import (
    BANDWIDTH_CONTAINER,
    BANDWIDTH_PORT,
    CODE_DIR,
    NETWORK_CONTAINER,
    RANK_ADDRESSES_ENV,
)
from sparkllm.render.ranks import VERIFY_CONTAINER, pod_template_hash
from sparkllm.sglang_contract.launch_check import LAUNCH_CHECK_CONTAINER
from tests.unit.test_render_ranks import NODES, RANK0_IP, pod_spec, sample, statefulsets

JSON = dict[str, Any]
HOST_IP = {"name": "SGLANG_HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}


IPS = (RANK0_IP, "10.0.0.12", "10.0.0.13")


def _plan(ips: tuple[str, ...] = IPS) -> ReplicaPlan:
    return ReplicaPlan(
        index=0, group_key="group-0", nodes=NODES, rank0_ip=ips[0], generation=1, node_ips=ips
    )


def _pods(mode: str, *, ips: tuple[str, ...] = IPS, **network: Any) -> list[JSON]:
    preflight = {"mode": mode, **network.pop("preflight", {})}
    ic = sample(network={"preflight": preflight, **network})
    return [pod_spec(sts) for sts in statefulsets(ic, _plan(ips))]


def _env(container: JSON) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_off_adds_nothing() -> None:
    for pod in _pods("off"):
        assert [c["name"] for c in pod["initContainers"]] == [
            VERIFY_CONTAINER,
            LAUNCH_CHECK_CONTAINER,
        ]
        assert HOST_IP not in pod["containers"][0]["env"]
        assert not [v for v in pod["volumes"] if v["name"].startswith("host-")]


@pytest.mark.parametrize("mode", ["warn", "gate"])
def test_on_checks_the_network_first(mode: str) -> None:
    for pod in _pods(mode, socketMTU=1500):
        check, measure, verify, _launch = pod["initContainers"]
        names = (check["name"], measure["name"], verify["name"])
        assert names == (NETWORK_CONTAINER, BANDWIDTH_CONTAINER, VERIFY_CONTAINER)
        args = check["args"]
        assert args[:3] == ["verify-network", "--socket-interface", "enP7s7"]
        assert args[3:7] == ["--gid-index", "3", "--roce-mtu", "9000"]
        assert [args[i + 1] for i, a in enumerate(args) if a == "--ib-hca"] == [
            "rocep1s0f0", "rocep1s0f1", "roceP2p1s0f0", "roceP2p1s0f1"
        ]  # fmt: skip
        assert "--socket-mtu" in args
        assert ("--gate" in args) is (mode == "gate")
        for part in ("sys", "proc", "etc"):
            assert args[args.index(f"--{part}-dir") + 1] == f"/host/{part}"
            assert {
                "name": f"host-{part}",
                "hostPath": {"path": f"/{part}", "type": "Directory"},
            } in pod["volumes"]
        host_mounts = [m for m in check["volumeMounts"] if m["name"].startswith("host-")]
        assert len(host_mounts) == 3
        assert all(m["readOnly"] for m in host_mounts)
        assert HOST_IP in check["env"]
        assert HOST_IP in pod["containers"][0]["env"]
        names = [e["name"] for e in check["env"]]
        assert "NODE_NAME" in names
        assert "NCCL_IB_HCA" in names
        assert not [e for e in check["env"] if "secretKeyRef" in (e.get("valueFrom") or {})]


@pytest.mark.parametrize("mode", ["warn", "gate"])
def test_the_collective_runs_in_the_engine_image_at_rank_0(mode: str) -> None:
    pods = _pods(mode, preflight={"minBusBandwidthGbps": 180.5})
    for rank, pod in enumerate(pods):
        check, measure = pod["initContainers"][:2]
        # verify-network copies the module into the emptyDir verify-bandwidth imports from.
        assert check["args"][check["args"].index("--copy-bandwidth-module") + 1] == CODE_DIR
        code = next(v for v in pod["volumes"] if v["name"] == "preflight-code")
        assert "emptyDir" in code
        assert {"name": "preflight-code", "mountPath": CODE_DIR} in check["volumeMounts"]
        assert measure["image"] == pod["containers"][0]["image"]  # the engine image's NCCL
        assert measure["command"] == ["python3", "-m", "sparkllm.preflight.bandwidth"]
        args = measure["args"]
        assert args[:4] == ["--backend", "nccl", "--op", "all_reduce"]
        assert args[args.index("--threshold-gbps") + 1] == "180.5"
        assert ("--gate" in args) is (mode == "gate")
        env = _env(measure)
        assert (env["RANK"], env["WORLD_SIZE"]) == (str(rank), "3")
        assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == (RANK0_IP, str(BANDWIDTH_PORT))
        assert env["PYTHONPATH"] == CODE_DIR
        assert env["NCCL_IB_HCA"] == "rocep1s0f0,rocep1s0f1,roceP2p1s0f0,roceP2p1s0f1"
        assert measure["resources"]["limits"] == {"nvidia.com/gpu": "1"}
        assert measure["terminationMessagePolicy"] == "FallbackToLogsOnError"
        assert _env(check)[RANK_ADDRESSES_ENV] == ",".join(IPS)
        assert BANDWIDTH_PORT not in (5000, 30000)  # not SGLang's distInitPort nor its API


def test_threshold_zero_runs_no_collective() -> None:
    for pod in _pods("warn", preflight={"minBusBandwidthGbps": 0}):
        assert [c["name"] for c in pod["initContainers"]] == [
                NETWORK_CONTAINER, VERIFY_CONTAINER, LAUNCH_CHECK_CONTAINER,
            ]  # fmt: skip
        assert "--copy-bandwidth-module" not in pod["initContainers"][0]["args"]
        assert not [v for v in pod["volumes"] if v["name"] == "preflight-code"]


def test_any_rank_address_change_rolls_the_replica() -> None:
    ic = sample(network={"preflight": {"mode": "warn"}})
    before = [pod_template_hash(s) for s in statefulsets(ic, _plan())]
    moved = [pod_template_hash(s) for s in statefulsets(ic, _plan((*IPS[:2], "10.0.0.99")))]
    assert all(a != b for a, b in zip(before, moved, strict=True))  # rank 2's node moved
    off = sample(network={"preflight": {"mode": "off"}})
    assert [pod_template_hash(s) for s in statefulsets(off, _plan())] == [
        pod_template_hash(s) for s in statefulsets(off, _plan((*IPS[:2], "10.0.0.99")))
    ]  # off: pods exactly as before the preflight existed
