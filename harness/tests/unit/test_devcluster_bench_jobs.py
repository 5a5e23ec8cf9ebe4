"""The benchmark Job harness's pure helpers (``devcluster.bench_jobs``): a Service URL's
address, the Job pod's command with local paths, the status a kubelet writes when it ends,
and the gateway Service resolved to its Deployment's pod (from the running gateways, or from
the endpoints file another process keeps, as in the demo). No cluster: the benchmark on
demand end to end is tests/e2e/test_benchmark_job.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkllm_dev.devcluster.bench_jobs import (
    bench_argv,
    completed_status_patch,
    gateway_file_resolver,
    gateway_service_resolver,
    service_address,
    with_option,
)
from sparkllm_dev.devcluster.gateway_pods import GatewayInfo
from sparkllm_dev.devcluster.hostpaths import LocalMount
from sparkllm_dev.errors import DevClusterError


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://front.llm.svc:8000", ("llm", "front", 8000)),
        ("http://front.llm.svc.cluster.local:8000/v1", ("llm", "front", 8000)),
        ("http://front.llm.svc", ("llm", "front", 80)),
        ("https://front.llm.svc", ("llm", "front", 443)),
        ("http://127.0.0.1:8000", None),
        ("http://front.llm:8000", None),
        ("http://front.llm.svc.elsewhere:8000", None),
    ],
)
def test_service_address(url: str, expected: tuple[str, str, int] | None) -> None:
    assert service_address(url) == expected


def test_bench_argv_runs_our_cli_with_local_paths_and_url(tmp_path: Path) -> None:
    words = ["sparkllm", "bench", "--base-url", "http://n.ns.svc:8000", "--tokenizer", "/models/m",
             "--status-summary", "/dev/termination-log", "--output=/tmp/report.json"]  # fmt: skip
    mounts = [
        LocalMount("/models/m", tmp_path / "model", "hostPath"),
        LocalMount("/tmp", tmp_path / "tmp", "emptyDir"),
        LocalMount("/dev/termination-log", tmp_path / "termination-log", "file"),
    ]
    argv = bench_argv(words, python="py", mounts=mounts, base_url="http://127.0.0.1:4321")
    assert argv == [
        "py", "-m", "sparkllm.cli", "bench", "--base-url", "http://127.0.0.1:4321",
        "--tokenizer", str(tmp_path / "model"),
        "--status-summary", str(tmp_path / "termination-log"),
        f"--output={tmp_path / 'tmp'}/report.json",
    ]  # fmt: skip
    with pytest.raises(DevClusterError, match="not the sparkllm CLI"):
        bench_argv(["smg", "launch"], python="py", mounts=[], base_url=None)
    assert with_option(["--a", "1", "--a=2", "--b", "3"], "--a", "9") == [
        "--a", "9", "--a=9", "--b", "3",
    ]  # fmt: skip


def test_completed_status_patch_is_what_a_kubelet_writes() -> None:
    times = {"started_at": "2026-07-01T11:00:00Z", "finished_at": "2026-07-01T11:05:00Z"}
    ok = completed_status_patch(container="bench", image="i", exit_code=0, message="{}", **times)
    failed = completed_status_patch(container="bench", image="i", exit_code=1, message="", **times)
    assert ok["status"]["phase"] == "Succeeded"
    assert failed["status"]["phase"] == "Failed"
    (entry,) = ok["status"]["containerStatuses"]
    assert entry["state"] == {
        "running": None, "waiting": None,  # strategic merge: delete the running state
        "terminated": {"exitCode": 0, "reason": "Completed", "message": "{}",
                       "startedAt": times["started_at"], "finishedAt": times["finished_at"]},
    }  # fmt: skip
    (failed_entry,) = failed["status"]["containerStatuses"]
    assert failed_entry["state"]["terminated"]["reason"] == "Error"
    assert "message" not in failed_entry["state"]["terminated"]
    ready = {c["type"]: c for c in failed["status"]["conditions"]}
    assert ready["Ready"]["status"] == ready["ContainersReady"]["status"] == "False"
    assert ready["Ready"]["reason"] == "PodFailed"


class _Running:
    def __init__(self, *infos: GatewayInfo) -> None:
        self.infos = infos

    def gateways(self) -> tuple[GatewayInfo, ...]:
        return self.infos


def test_the_gateway_service_resolves_to_its_deployments_pod(tmp_path: Path) -> None:
    def info(namespace: str, pod: str, port: int) -> GatewayInfo:
        url = f"http://127.0.0.1:{port}"
        return GatewayInfo(namespace, pod, "uid", url, url, url, tmp_path, url)

    resolve = gateway_service_resolver(
        _Running(info("ns", "front-x-abc-7d9f8-qwzx5", 1), info("ns", "front-7d9f8-qwzx5", 2))
    )
    assert resolve("ns", "front", 8000) == "http://127.0.0.1:2"  # not front-x's pod
    assert resolve("other", "front", 8000) is None
    assert resolve("ns", "front", 9000) is None
    assert gateway_service_resolver(_Running())("ns", "front", 8000) is None


def test_the_demo_resolves_the_service_from_the_gateways_endpoints_file(tmp_path: Path) -> None:
    """The demo runs the gateway pods in another process: their endpoints file is read."""
    state = tmp_path / "gateways.json"
    resolve = gateway_file_resolver(state)
    assert resolve("ns", "front", 8000) is None  # not written yet: no endpoint yet
    state.write_text('{"ns/front-x-abc-7d9f8-qwzx5": "http://127.0.0.1:1",')
    assert resolve("ns", "front", 8000) is None  # half written
    urls = {"ns/front-x-abc-7d9f8-qwzx5": "http://127.0.0.1:1",
            "ns/front-7d9f8-qwzx5": "http://127.0.0.1:2"}  # fmt: skip
    state.write_text(json.dumps(urls))
    assert resolve("ns", "front", 8000) == "http://127.0.0.1:2"  # not front-x's pod
    assert resolve("other", "front", 8000) is None
    assert resolve("ns", "front", 9000) is None
