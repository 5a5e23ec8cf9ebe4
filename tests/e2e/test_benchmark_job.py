"""The benchmark on demand, end to end: annotation -> Job -> front door -> status.benchmark.

The real operator serves one replica (group a) of simulated engines; ``GatewayPods`` runs
the front door the operator created, and ``BenchJobs`` runs the benchmark Job's pod the
way a kubelet would: ``sparkllm bench`` against Service ``N`` (resolved to the local
admission layer) for alice, with the key the operator generated for its own Jobs (the
front door logs its requests as user ``sparkllm:bench``), its summary in the pod's
termination message. Shown: the summary lands in ``status.benchmark`` with positive TTFT
and TPOT, an Event says so, the request annotation is removed, the Job completes and
``kubectl logs job/<name>`` shows its Markdown report (kwok serves the file the harness
keeps) — and the passes after that write nothing.

The harness's pure helpers are pinned without a cluster in
harness/tests/unit/test_devcluster_bench_jobs.py.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from sparkllm_dev.devcluster import DevCluster, wait_until
from sparkllm_dev.devcluster.bench_jobs import (
    BenchJobs,
    gateway_service_resolver,
)
from sparkllm_dev.testing import OperatorProcess, quick_resync
from tests.e2e.serving import DEADLINE, serve

NAME = "bench"
GROUP = ["spark-a0", "spark-a1", "spark-a2"]
PASSES_AFTER = 3  # reconcile passes that must write nothing once the result is in
OPERATOR_AGENT = "sparkllm-operator"  # KubeAPI's user agent (kopf's own writes differ)


# --- the benchmark on the dev cluster ---------------------------------------------------


def _icl(cluster: DevCluster, namespace: str) -> dict[str, Any]:
    return cluster.kubectl_json("get", "icl", NAME, "-n", namespace)


def _items(cluster: DevCluster, namespace: str, *args: str) -> list[dict[str, Any]]:
    return list(cluster.kubectl_json("get", *args, "-n", namespace)["items"])


def _job_has(cluster: DevCluster, namespace: str, job: str, condition: str) -> bool:
    status = cluster.kubectl_json("get", "job", job, "-n", namespace).get("status") or {}
    return any(
        c["type"] == condition and c["status"] == "True" for c in status.get("conditions") or []
    )


def _operator_writes(cluster: DevCluster, namespace: str, since: datetime) -> list[str]:
    return [
        f"{e['verb']} {e['requestURI']}"
        for e in cluster.audit_writes(namespace=namespace)
        if e["userAgent"].startswith(OPERATOR_AGENT)
        and datetime.fromisoformat(e["requestReceivedTimestamp"].replace("Z", "+00:00")) >= since
    ]


@pytest.mark.cluster
@quick_resync  # several passes to watch once the result is in
def test_benchmark_on_demand_lands_in_status(
    devcluster: DevCluster,
    namespace: str,
    shared_operator: OperatorProcess,
    model_dir: Path,
    tmp_path: Path,
) -> None:
    with (
        serve(
            devcluster, namespace, name=NAME, model_dir=model_dir, groups=[GROUP],
            log_dir=tmp_path / "gw",
        ) as serving,
        BenchJobs(
            devcluster,
            resolve_service=gateway_service_resolver(serving.gateways),
            namespace=namespace,
            model_dir=model_dir,
            log_dir=tmp_path / "bench",
            serve_logs=True,  # kubectl logs, as the demo's `sparkllm-dev jobs` does
        ),
    ):  # fmt: skip
        devcluster.kubectl(
            "annotate", "icl", NAME, "-n", namespace,
            "sparkllm.io/benchmark=alice", "sparkllm.io/benchmark-scenarios=short-c1",
        )  # fmt: skip
        try:
            benchmark = wait_until(
                lambda: _finished_benchmark(devcluster, namespace),
                timeout=DEADLINE,
                what="status.benchmark with a result",
            )
        finally:
            for log in sorted((tmp_path / "bench").glob("*.log")):  # shown when the test fails
                print(
                    f"--- {log.name}\n" + log.read_text(errors="replace")[-4000:], file=sys.stderr
                )
        _the_result_is_in_status(benchmark)
        _the_request_is_answered(devcluster, namespace, benchmark)
        _kubectl_logs_shows_the_report(devcluster, namespace, benchmark)
        admission = (serving.gateway.log_dir / "admission.log").read_text(errors="replace")
        assert "route=/v1/chat/completions user=sparkllm:bench outcome=ok" in admission
        assert "user=alice" not in admission  # alice asked; the Job holds no key of hers
        # The needle check cannot pass on the simulator: `sparkllm bench` exits 1, the Job
        # fails, and the summary still lands, with what did not pass.
        devcluster.kubectl(
            "annotate", "icl", NAME, "-n", namespace, "--overwrite",
            "sparkllm.io/benchmark=alice", "sparkllm.io/benchmark-scenarios=niah",
        )  # fmt: skip
        failed = wait_until(
            lambda: _finished_benchmark(devcluster, namespace, other_than=benchmark["job"]),
            timeout=DEADLINE,
            what="status.benchmark of the needle run",
        )
        _a_failed_run_is_reported(devcluster, namespace, failed)
        _later_passes_write_nothing(devcluster, namespace, shared_operator, failed)


def _finished_benchmark(
    cluster: DevCluster, namespace: str, *, other_than: str = ""
) -> dict[str, Any] | None:
    benchmark = (_icl(cluster, namespace).get("status") or {}).get("benchmark") or {}
    done = benchmark.get("phase") in ("Succeeded", "Failed", "Cancelled")
    return benchmark if done and benchmark.get("job") != other_than else None


def _the_result_is_in_status(benchmark: dict[str, Any]) -> None:
    assert benchmark["phase"] == "Succeeded", benchmark.get("message")
    assert benchmark["succeeded"] is True
    assert benchmark["user"] == "alice"
    assert benchmark["job"].startswith(f"{NAME}-bench-")
    assert benchmark["requestedAt"] <= benchmark["completedAt"]
    summary = benchmark["summary"]
    assert summary["passed"] is True
    assert summary["tokenCounting"] == "tokenizer"  # the model's own tokenizer, mounted
    (scenario,) = summary["scenarios"]
    assert scenario["name"] == "short-c1"
    assert (scenario["inputTokens"], scenario["outputTokens"], scenario["concurrency"]) == (
        256, 128, 1,
    )  # fmt: skip
    assert scenario["completed"] == scenario["requests"] == 10
    assert scenario["errors"] == 0
    for metric in ("ttftMs", "tpotMs", "e2eMs"):
        numbers = scenario[metric]
        assert 0 < numbers["p50"] <= numbers["p95"] <= numbers["p99"], metric
    assert scenario["outputTokensPerSecond"] > 0


def _request_removed(cluster: DevCluster, namespace: str) -> dict[str, str]:
    """The object's annotations once the request annotation is gone: the operator removes
    it in a write of its own, which may follow the status write the caller saw."""

    def removed() -> dict[str, str] | None:
        annotations = _icl(cluster, namespace)["metadata"].get("annotations") or {}
        return None if "sparkllm.io/benchmark" in annotations else dict(annotations)

    return wait_until(removed, timeout=30, what="the request annotation removed")


def _the_request_is_answered(
    cluster: DevCluster, namespace: str, benchmark: dict[str, Any]
) -> None:
    annotations = _request_removed(cluster, namespace)
    assert annotations.get("sparkllm.io/benchmark-scenarios") == "short-c1"  # the user's own
    events = wait_until(
        lambda: _items(
            cluster, namespace, "events",
            f"--field-selector=involvedObject.name={NAME},reason=BenchmarkCompleted",
        ),
        timeout=30,
        what="the BenchmarkCompleted Event",
    )  # fmt: skip
    assert len(events) == 1
    assert events[0]["type"] == "Normal"
    assert "short-c1: 10/10 done" in events[0]["message"]
    (job,) = _items(cluster, namespace, "jobs", "-l", "app.kubernetes.io/component=benchmark")
    assert job["metadata"]["name"] == benchmark["job"]
    assert job["metadata"]["ownerReferences"][0]["name"] == NAME
    (bench,) = job["spec"]["template"]["spec"]["containers"]
    assert bench["image"] == "ghcr.io/sparkllm/sparkllm:0.1.0"  # the operator's own image
    wait_until(
        lambda: _job_has(cluster, namespace, benchmark["job"], "Complete"),
        timeout=60,
        what="the Job controller to mark the Job Complete",
    )
    (pod,) = _items(cluster, namespace, "pods", "-l", f"job-name={benchmark['job']}")
    (container,) = pod["status"]["containerStatuses"]
    terminated = container["state"]["terminated"]
    assert terminated["exitCode"] == 0
    assert json.loads(terminated["message"]) == benchmark["summary"]  # pod -> operator -> status


def _kubectl_logs_shows_the_report(
    cluster: DevCluster, namespace: str, benchmark: dict[str, Any]
) -> None:
    """kwok serves the Job pod's output: the API server reaches its node by InternalIP."""
    shown = cluster.kubectl("logs", f"job/{benchmark['job']}", "-n", namespace).stdout
    assert "| short-c1 |" in shown  # the Markdown report's row
    assert "benchmark pod" not in shown  # the harness's own header line is not the pod's


def _a_failed_run_is_reported(
    cluster: DevCluster, namespace: str, benchmark: dict[str, Any]
) -> None:
    assert benchmark["phase"] == "Failed"
    assert benchmark["succeeded"] is False
    (scenario,) = benchmark["summary"]["scenarios"]
    assert (scenario["name"], scenario["needlesFound"]) == ("niah", "0/6")
    assert scenario["completed"] == scenario["requests"] == 6  # every request was answered
    assert benchmark["message"].startswith("not passed: niah: needles found 0/6; exit code 1")
    _request_removed(cluster, namespace)
    (event,) = wait_until(
        lambda: _items(
            cluster, namespace, "events",
            f"--field-selector=involvedObject.name={NAME},reason=BenchmarkFailed",
        ),
        timeout=30,
        what="the BenchmarkFailed Event",
    )  # fmt: skip
    assert event["type"] == "Warning"
    assert "niah: needles found 0/6" in event["message"]
    wait_until(
        lambda: _job_has(cluster, namespace, benchmark["job"], "Failed"),
        timeout=60,
        what="the Job controller to mark the Job Failed",
    )


def _later_passes_write_nothing(
    cluster: DevCluster, namespace: str, operator: OperatorProcess, benchmark: dict[str, Any]
) -> None:
    since = datetime.now(UTC)
    passes = operator.log().count("reconciled ")
    wait_until(
        lambda: operator.log().count("reconciled ") >= passes + PASSES_AFTER,
        timeout=60,
        what=f"{PASSES_AFTER} more reconcile passes",
    )
    assert _operator_writes(cluster, namespace, since) == []
    assert (_icl(cluster, namespace).get("status") or {}).get("benchmark") == benchmark
    jobs = _items(cluster, namespace, "jobs", "-l", "app.kubernetes.io/component=benchmark")
    assert len(jobs) == 2  # one per request; finished Jobs stay until their TTL
