"""The gateway pod harness's pure helpers (``devcluster.gateway_io``): the router's ports
moved to free loopback ones, a Secret volume in the kubelet's layout that follows changes,
and the ServiceAccount kubeconfig smg discovers with. No cluster: the front door end to end
is tests/e2e/test_front_door.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sparkllm_dev.devcluster.gateway_io import (
    localize_router_args,
    service_account_kubeconfig,
    write_atomic_volume,
)
from sparkllm_dev.errors import DevClusterError


def test_router_args_are_moved_to_free_loopback_ports() -> None:
    args = ["--host", "127.0.0.1", "--port", "30080", "--prometheus-host", "0.0.0.0",
            "--prometheus-port", "29000", "--service-discovery-port", "30000"]  # fmt: skip
    ports = {"--port": 41000, "--prometheus-port": 41001, "--health-check-port": 41002}
    assert localize_router_args(args, ports=ports) == [
        "--host", "127.0.0.1", "--port", "41000", "--prometheus-host", "127.0.0.1",
        "--prometheus-port", "41001", "--service-discovery-port", "30000",
    ]  # fmt: skip
    with pytest.raises(DevClusterError, match="--health-check-port"):
        localize_router_args(["--health-check-port", "1"], ports={})


def test_secret_volume_has_the_kubelet_layout_and_follows_changes(tmp_path: Path) -> None:
    volume = tmp_path / "keys"
    write_atomic_volume(volume, {"alice": b"k1", "bob": b"k2"})
    first_payload = os.readlink(volume / "..data")
    assert sorted(p.name for p in volume.iterdir() if not p.name.startswith("..")) == [
        "alice", "bob",
    ]  # fmt: skip
    assert os.readlink(volume / "alice") == "..data/alice"
    assert (volume / "bob").read_bytes() == b"k2"
    write_atomic_volume(volume, {"alice": b"k3"})
    assert (volume / "alice").read_bytes() == b"k3"
    assert not (volume / "bob").exists()
    assert os.readlink(volume / "..data") != first_payload
    assert not (volume / first_payload).exists()  # the old payload is gone


def test_service_account_kubeconfig_keeps_the_server_and_swaps_the_user() -> None:
    dev = {
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "admin"}}],
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "admin", "user": {"client-key": "/admin.key"}}],
    }
    config = service_account_kubeconfig(dev, token="t0k")
    assert config["clusters"][0]["cluster"] == {"server": "https://127.0.0.1:6443"}
    assert config["users"] == [{"name": "gateway", "user": {"token": "t0k"}}]
    assert "admin" not in json.dumps(config)
    with pytest.raises(DevClusterError):
        service_account_kubeconfig({"current-context": "missing"}, token="t")
