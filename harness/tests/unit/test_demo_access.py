"""Where the demo is, after `make demo` has scrolled away: what `sparkllm-dev status` and the
demo's last lines print (the kubectl to use, the front door, the key), and the dev
cluster's controller manager running without the endpoint controllers whose every sync
would be a Warning on loopback node addresses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sparkllm_dev import cli
from sparkllm_dev.demo import DemoAccess, access_lines, demo_access
from sparkllm_dev.devcluster import DevCluster
from sparkllm_dev.devcluster.cluster import CONTROLLERS, ENDPOINT_CONTROLLERS
from sparkllm_dev.devcluster.gateway_pods import metrics_file
from sparkllm_dev.devcluster.paths import DEMO, K8S_VERSION, PROFILE_ENV, DevPaths


def demo_cluster(root: Path) -> DevCluster:
    return DevCluster(DevPaths(root=root, profile=DEMO))


def test_the_front_door_is_the_demo_namespaces_gateway(tmp_path: Path) -> None:
    cluster = demo_cluster(tmp_path)
    assert demo_access(cluster, key="k").front_door is None  # no gateway harness running
    cluster.paths.state_dir.mkdir(parents=True)
    state = {
        "t-other/x-1": "http://127.0.0.1:1111",
        "llm/deepseek-v4-flash-5d8-abc": "http://127.0.0.1:2222",
    }
    (cluster.paths.state_dir / "gateways.json").write_text(json.dumps(state))
    access = demo_access(cluster, key="k")
    assert access == DemoAccess(
        kubeconfig=tmp_path / "devcluster" / "kubeconfig",
        kubectl=tmp_path / "bin" / K8S_VERSION / "kubectl",
        front_door="http://127.0.0.1:2222",
        key="k",
    )


def test_the_lines_name_kubectl_the_front_door_and_the_key() -> None:
    access = DemoAccess(
        kubeconfig=Path("/c/devcluster/kubeconfig"),
        kubectl=Path(f"/c/bin/{K8S_VERSION}/kubectl"),
        front_door="http://127.0.0.1:2222",
        key="k3y",
    )
    lines = access_lines(access)
    assert lines[0] == "export KUBECONFIG=/c/devcluster/kubeconfig"
    assert lines[1].startswith(f"export PATH=/c/bin/{K8S_VERSION}:$PATH   # kubectl {K8S_VERSION}")
    assert lines[2] == "# front door: http://127.0.0.1:2222 (user demo, API key k3y)"
    assert "curl -s http://127.0.0.1:2222/v1/chat/completions" in lines[3]
    assert "Authorization: Bearer k3y" in lines[3]
    # sparkllm bench by hand: the operator's Jobs' key, read from its Secret, not printed
    assert lines[5].endswith("(user sparkllm:bench)")
    assert "get secret deepseek-v4-flash-bench-key" in lines[6]
    assert lines[7].startswith(".venv/bin/sparkllm bench --base-url http://127.0.0.1:2222 ")
    assert "--api-key-env BENCH_KEY" in lines[7]
    # Without a running gateway only the kubectl lines: nothing points at a stale port.
    assert access_lines(DemoAccess(access.kubeconfig, access.kubectl, None, None)) == lines[:2]


def test_the_lines_name_the_front_doors_metrics_url(tmp_path: Path) -> None:
    """What a Prometheus here scrapes for the Governance panels: the admission layer's own
    metrics port, which the gateway harness writes beside its endpoints file."""
    cluster = demo_cluster(tmp_path)
    cluster.paths.state_dir.mkdir(parents=True)
    endpoints = cluster.paths.state_dir / "gateways.json"
    endpoints.write_text(json.dumps({"llm/g-1": "http://127.0.0.1:2222"}))
    assert metrics_file(endpoints) == cluster.paths.state_dir / "gateways-metrics.json"
    metrics_file(endpoints).write_text(
        json.dumps({"t-other/x-1": "http://127.0.0.1:1/metrics",
                    "llm/g-1": "http://127.0.0.1:3333/metrics"})
    )  # fmt: skip
    access = demo_access(cluster, key="k")
    assert access.metrics == "http://127.0.0.1:3333/metrics"
    assert access_lines(access)[-1] == (
        "# front door metrics (the Governance panels' sparkllm_gateway_*): "
        "http://127.0.0.1:3333/metrics"
    )


def test_status_names_the_kubectl_even_when_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SPARKLLM_CACHE", str(tmp_path))
    monkeypatch.setenv(PROFILE_ENV, "demo")  # restored after: the command exports it
    assert cli.main(["--cluster", "demo", "status"]) == 3
    out = capsys.readouterr().out
    assert f"kubectl:     {tmp_path}/bin/{K8S_VERSION}/kubectl\n" in out
    assert "front door" not in out  # nothing runs


def test_the_controller_manager_runs_without_the_endpoint_controllers(tmp_path: Path) -> None:
    assert CONTROLLERS == (
        "*,-endpoints-controller,-endpointslice-controller,-endpointslice-mirroring-controller"
    )
    cluster = demo_cluster(tmp_path)
    cluster._write_config()
    config = next(yaml.safe_load_all(cluster.paths.kwokctl_config.read_text()))
    patches = {p["name"]: p["extraArgs"] for p in config["componentsPatches"]}
    assert patches["kube-controller-manager"] == [{"key": "controllers", "value": CONTROLLERS}]
    assert len(ENDPOINT_CONTROLLERS) == 3
