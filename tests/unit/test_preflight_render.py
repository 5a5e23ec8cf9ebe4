"""spec.network.preflight in the rank pods: no trace when off, verify-network before
verify-model when on, --gate only in gate mode, SGLANG_HOST_IP from the node's address."""

from __future__ import annotations

from typing import Any

import pytest

from sparkllm.render.ranks import NETWORK_CONTAINER, VERIFY_CONTAINER
from tests.unit.test_render_ranks import pod_spec, sample, statefulsets

JSON = dict[str, Any]
HOST_IP = {"name": "SGLANG_HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}


def _pods(mode: str, **network: Any) -> list[JSON]:
    ic = sample(network={"preflight": {"mode": mode}, **network})
    return [pod_spec(sts) for sts in statefulsets(ic)]


def test_off_adds_nothing() -> None:
    for pod in _pods("off"):
        assert [c["name"] for c in pod["initContainers"]] == [VERIFY_CONTAINER]
        assert HOST_IP not in pod["containers"][0]["env"]
        assert not [v for v in pod["volumes"] if v["name"].startswith("host-")]


@pytest.mark.parametrize("mode", ["warn", "gate"])
def test_on_checks_the_network_first(mode: str) -> None:
    for pod in _pods(mode, socketMTU=1500):
        check, verify = pod["initContainers"]
        assert (check["name"], verify["name"]) == (NETWORK_CONTAINER, VERIFY_CONTAINER)
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
        assert all(m["readOnly"] for m in check["volumeMounts"])
        assert HOST_IP in check["env"]
        assert HOST_IP in pod["containers"][0]["env"]
        names = [e["name"] for e in check["env"]]
        assert "NODE_NAME" in names
        assert "NCCL_IB_HCA" in names
        assert not [e for e in check["env"] if "secretKeyRef" in (e.get("valueFrom") or {})]
