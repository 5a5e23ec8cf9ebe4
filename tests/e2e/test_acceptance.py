"""The acceptance checklist against the dev cluster: every row, and the report files.

The real operator serves one replica (group a) of simulated engines with DeepSeek V4's
reasoning and tool-call parsers; ``GatewayPods`` runs the front door the operator created
(admission + smg). First from the command line: ``sparkllm bench --accept`` runs as alice
against the admission layer, reads rank restarts from the InferenceCluster's status and
sets the accepted baseline on it; a second run reads that baseline back and compares.
Then on demand (``test_acceptance_on_demand``): the annotation makes the operator run the
same checklist as a Job (``BenchJobs`` plays the kubelet, as the Job's ServiceAccount),
whose summary lands in ``status.acceptance`` with an Event, whose log keeps both reports,
and from whose figures the operator sets the baseline. Without Prometheus the five node
rows say "not measured". The report files are kept in the test's directory. Last, one
run with three simulator faults, each breaking one functional check: the status and the
Warning name each check and why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from sparkllm.bench.accept.cli import JSON_MARKER
from sparkllm.keys import BASELINE_ANNOTATION
from sparkllm_dev.devcluster import DevCluster, wait_until
from sparkllm_dev.devcluster.bench_jobs import BenchJobs, gateway_service_resolver
from sparkllm_dev.devcluster.toymodel import train_tokenizer as train_v4_tokenizer
from sparkllm_dev.testing import OperatorProcess, quick_resync
from tests.e2e.serving import DEADLINE, serve
from tests.unit.gateway_fixtures import MODEL, write_model_dir

NAME = "accept"
GROUP = ["spark-a0", "spark-a1", "spark-a2"]
PARSERS = {"reasoningParser": "deepseek-v4", "toolCallParser": "deepseekv4"}
SMALL = [
    *("--scale8-requests", "8", "--scale8-concurrency", "4"),
    *("--arrival-requests", "6", "--arrival-rate", "4"),
    *("--soak-seconds", "3", "--input-tokens", "64", "--output-tokens", "8"),
]
FUNCTIONAL = (
    "deterministic answer",
    "streaming",
    "reasoning",
    "function call",
    "unsupported tool forms refused",
)
NODE_ROWS = ("memory pressure (PSI)", "swap", "OOM kills", "GPU XID errors", "RDMA port errors")


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """With V4's parsers the front door counts as SGLang's V4 encoder does, which needs
    DeepSeek V4's special tokens: the toy model's tokenizer has them."""
    return write_model_dir(tmp_path / "model", train_v4_tokenizer())


def accept(
    cluster: DevCluster, *, url: str, key: str, namespace: str, out: Path, extra: list[str]
) -> tuple[int, dict[str, Any]]:
    """Run the CLI as a user would; (exit status, the JSON report)."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "ALICE_KEY": key, "KUBECONFIG": str(cluster.paths.kubeconfig)}
    command = [
        sys.executable, "-m", "sparkllm.cli", "bench", "--accept",
        "--base-url", url, "--model", MODEL, "--api-key-env", "ALICE_KEY", "--timeout", "60",
        "--inference-cluster", f"{namespace}/{NAME}",
        "--output", str(out / "accept.json"), "--markdown", str(out / "accept.md"),
        "--status-summary", str(out / "summary.json"), *SMALL, *extra,
    ]  # fmt: skip
    done = subprocess.run(
        command, check=False, env=env, capture_output=True, text=True, timeout=300
    )
    print(done.stdout, done.stderr[-3000:], sep="\n", file=sys.stderr)
    return done.returncode, json.loads((out / "accept.json").read_text())


def verdicts(report: dict[str, Any]) -> dict[str, str]:
    return {f"{row['section']}/{row['name']}": row["verdict"] for row in report["rows"]}


@pytest.mark.cluster
def test_every_row_through_the_front_door(
    devcluster: DevCluster,
    namespace: str,
    shared_operator: OperatorProcess,
    model_dir: Path,
    tmp_path: Path,
) -> None:
    with serve(
        devcluster, namespace, name=NAME, model_dir=model_dir, groups=[GROUP],
        log_dir=tmp_path / "gw", engine=PARSERS,
    ) as serving:  # fmt: skip
        url, key = serving.gateway.admission_url, serving.alice
        status, first = accept(
            devcluster, url=url, key=key, namespace=namespace, out=tmp_path / "first",
            extra=["--set-baseline", "--tokenizer", str(model_dir)],
        )  # fmt: skip
        assert status == 0
        assert first["sizes"]["tokens"]["inputCounting"].startswith("tokenizer (")
        passing = [f"functional/{name}" for name in FUNCTIONAL] + [
            *("stress/Scale8", "stress/Arrival", "soak/soak errors"),
            *("soak/rank restarts during the soak", "resources/rank restarts"),
        ]
        unmeasured = [f"regression/{name} vs baseline" for name in ("scale8", "arrival")]
        unmeasured += [f"resources/{row}" for row in NODE_ROWS]
        assert verdicts(first) == {
            **dict.fromkeys(passing, "pass"),
            **dict.fromkeys(unmeasured, "not measured"),
        }
        assert (tmp_path / "first" / "accept.md").read_text().startswith("# Acceptance: ")
        summary = json.loads((tmp_path / "first" / "summary.json").read_text())
        assert (summary["pass"], summary["fail"], summary["notMeasured"]) == (10, 0, 7)
        annotations = devcluster.kubectl_json("get", "icl", NAME, "-n", namespace)["metadata"][
            "annotations"
        ]
        baseline = json.loads(annotations[BASELINE_ANNOTATION])
        assert set(baseline["scenarios"]) == {"scale8", "arrival"}
        # A later run is compared with the accepted baseline read from the cluster.
        loose = "ttftP95Ms=10,tpotP95Ms=10,e2eP95Ms=10,outputTokensPerS=0.95"
        status, second = accept(
            devcluster, url=url, key=key, namespace=namespace, out=tmp_path / "second",
            extra=["--sections", "stress,regression", "--tolerance", loose],
        )  # fmt: skip
        assert status == 0
        compared = ["stress/Scale8", "stress/Arrival", *unmeasured[:2]]
        assert verdicts(second) == dict.fromkeys(compared, "pass")
        assert all(baseline["setAt"] in row["basis"] for row in second["rows"][2:])


# --- on demand: annotation -> Job -> status.acceptance + Event -------------------------

ACCEPTANCE = "sparkllm.io/acceptance"
OPTIONS = "sparkllm.io/acceptance-options"
SET_BASELINE = "sparkllm.io/acceptance-set-baseline"
SMALL_OPTIONS = " ".join(f"{SMALL[i][2:]}={SMALL[i + 1]}" for i in range(0, len(SMALL), 2))
TERMINAL = ("Succeeded", "Failed", "Cancelled")


def _icl(cluster: DevCluster, namespace: str) -> dict[str, Any]:
    return dict(cluster.kubectl_json("get", "icl", NAME, "-n", namespace))


def _events(cluster: DevCluster, namespace: str, reason: str) -> list[dict[str, Any]]:
    selector = f"--field-selector=involvedObject.name={NAME},reason={reason}"
    return list(cluster.kubectl_json("get", "events", "-n", namespace, selector)["items"])


@contextmanager
def on_demand(cluster: DevCluster, namespace: str, *, model_dir: Path, out: Path) -> Iterator[None]:
    """Serve ``NAME`` and run its Jobs' pods here (the test's operator re-checks every 5 s,
    ``quick_resync``, so a Job's end is seen within seconds)."""
    with (
        serve(
            cluster, namespace, name=NAME, model_dir=model_dir, groups=[GROUP],
            log_dir=out / "gw", engine=PARSERS,
        ) as serving,
        BenchJobs(
            cluster, resolve_service=gateway_service_resolver(serving.gateways),
            namespace=namespace, log_dir=out / "jobs", model_dir=model_dir,
        ),
    ):  # fmt: skip
        yield


def run_on_demand(
    cluster: DevCluster, namespace: str, *, annotations: list[str], seen: list[str]
) -> dict[str, Any]:
    """Annotate, then poll ``status.acceptance`` (phases seen go to ``seen``) to its end."""
    before = ((_icl(cluster, namespace).get("status") or {}).get("acceptance") or {}).get("job")
    cluster.kubectl("annotate", "icl", NAME, "-n", namespace, "--overwrite", *annotations)

    def finished() -> dict[str, Any] | None:
        acceptance = (_icl(cluster, namespace).get("status") or {}).get("acceptance") or {}
        if acceptance.get("job") != before and acceptance.get("phase"):
            seen.append(acceptance["phase"])
        done = acceptance.get("phase") in TERMINAL and acceptance.get("job") != before
        return acceptance if done else None

    result = wait_until(finished, timeout=DEADLINE, what="status.acceptance")
    assert result is not None
    return result


def keep_reports(log_dir: Path, job: str, out: Path) -> tuple[str, dict[str, Any]]:
    """The Markdown and JSON reports from the Job's log, written to ``out`` and printed."""
    (log,) = [p for p in log_dir.glob(f"*_{job}-*.log")]
    text = log.read_text(errors="replace")
    markdown = text[text.index("# Acceptance: ") : text.index(JSON_MARKER)]
    report = json.loads(text[text.index(JSON_MARKER) + len(JSON_MARKER) :])
    out.mkdir(parents=True, exist_ok=True)
    (out / "acceptance.md").write_text(markdown)
    (out / "acceptance.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"--- {job}: the Job's log (tail)\n{text[-6000:]}", file=sys.stderr)
    return markdown, report


@pytest.mark.cluster
@quick_resync
def test_acceptance_on_demand(
    devcluster: DevCluster,
    namespace: str,
    shared_operator: OperatorProcess,
    model_dir: Path,
    tmp_path: Path,
) -> None:
    with on_demand(devcluster, namespace, model_dir=model_dir, out=tmp_path):
        phases: list[str] = []
        acceptance = run_on_demand(
            devcluster, namespace, seen=phases,
            annotations=[f"{ACCEPTANCE}=alice", f"{OPTIONS}={SMALL_OPTIONS} timeout=60",
                         f"{SET_BASELINE}=true"],
        )  # fmt: skip
        assert acceptance["phase"] == "Succeeded", acceptance.get("message")
        assert "Running" in phases  # a run in progress shows in status
        assert acceptance["job"].startswith(f"{NAME}-accept-")
        assert acceptance["user"] == "alice"
        assert acceptance["requestedAt"] <= acceptance["completedAt"]
        summary = acceptance["summary"]
        assert (summary["pass"], summary["fail"], summary["notMeasured"]) == (10, 0, 7)
        passing = [f"functional/{name}" for name in FUNCTIONAL] + [
            *("stress/Scale8", "stress/Arrival", "soak/soak errors"),
            *("soak/rank restarts during the soak", "resources/rank restarts"),
        ]  # restarts read by the Job, as its ServiceAccount, from the status
        unmeasured = [f"regression/{name} vs baseline" for name in ("scale8", "arrival")]
        unmeasured += [f"resources/{row}" for row in NODE_ROWS]
        assert summary["verdicts"] == {
            **dict.fromkeys(passing, "pass"),
            **dict.fromkeys(unmeasured, "not measured"),
        }
        (event,) = _events(devcluster, namespace, "AcceptancePassed")
        assert event["type"] == "Normal"
        assert (
            "passed: 10 pass, 0 fail, 7 not measured (not measured is not a pass"
            in (event["message"])
        )
        # The request is answered; the user's options stay; the operator set the baseline.
        annotations = _icl(devcluster, namespace)["metadata"]["annotations"]
        assert ACCEPTANCE not in annotations
        assert SET_BASELINE not in annotations
        assert annotations[OPTIONS].startswith("scale8-requests=8")
        baseline = json.loads(annotations[BASELINE_ANNOTATION])
        assert baseline == {"setAt": acceptance["completedAt"], "scenarios": summary["figures"]}
        assert acceptance["baseline"] == f"set {baseline['setAt']}"
        markdown, report = keep_reports(tmp_path / "jobs", acceptance["job"], tmp_path / "first")
        assert "Result: **PASSED** — 10 pass, 0 fail, 7 not measured" in markdown
        assert {f"{r['section']}/{r['name']}": r["verdict"] for r in report["rows"]} == (
            summary["verdicts"]
        )
        assert "Poisson arrivals at 4 req/s" in verdict_basis(report, "Arrival")
        # Issue 19: the Job mounts the model and sizes the load in its tokens.
        tokens = "input: 64 tokens of user text by the model's tokenizer"
        assert tokens in verdict_basis(report, "Scale8")
        assert report["sizes"]["tokens"]["inputCounting"].startswith("tokenizer (")
        assert "- Prompt lengths: tokenizer (" in markdown
        # Again, compared with the baseline the operator wrote; re-running replaces status.
        loose = "ttftP95Ms=10,tpotP95Ms=10,e2eP95Ms=10,outputTokensPerS=0.95"
        second = run_on_demand(
            devcluster, namespace, seen=[],
            annotations=[f"{ACCEPTANCE}=alice",
                         f"{OPTIONS}={SMALL_OPTIONS} sections=stress,regression tolerance={loose}"],
        )  # fmt: skip
        assert second["phase"] == "Succeeded", second.get("message")
        assert second["job"] != acceptance["job"]
        assert "baseline" not in second  # not asked for this time
        assert second["summary"]["verdicts"] == dict.fromkeys(
            ["stress/Scale8", "stress/Arrival", *unmeasured[:2]], "pass"
        )
        _, again = keep_reports(tmp_path / "jobs", second["job"], tmp_path / "second")
        assert all(baseline["setAt"] in row["basis"] for row in again["rows"][2:])
        assert len(_events(devcluster, namespace, "AcceptancePassed")) == 2


def verdict_basis(report: dict[str, Any], name: str) -> str:
    (row,) = [row for row in report["rows"] if row["name"] == name]
    return str(row["basis"])


# The check each simulator fault breaks, and what its failure says. One stack runs them
# at once, each breaking its own check only; broken-stream is not among them, as it would
# break the reasoning check's stream too (so that check would fail for another reason).
# tests/unit/test_accept_functional.py pins every fault alone, broken-stream included.
BROKEN = {
    "deterministic answer": ("nondeterministic", "the two answers differ"),
    "reasoning": ("no-reasoning", "reasoning content absent although thinking was on"),
    "function call": ("malformed-tool-call", "no tool_calls in the answer"),
}


@pytest.mark.cluster
@quick_resync
@pytest.mark.sim_args(*(f"--sim-fault={fault}" for fault, _ in BROKEN.values()))
def test_simulator_faults_fail_their_checks_on_demand(
    namespace: str, shared_operator: OperatorProcess, model_dir: Path, tmp_path: Path
) -> None:
    """Three faults, one run: each fails its own functional check (streaming and the front
    door's refusals still pass), and the status and the one Warning name each with why."""
    devcluster = shared_operator.cluster
    with on_demand(devcluster, namespace, model_dir=model_dir, out=tmp_path):
        acceptance = run_on_demand(
            devcluster, namespace, seen=[],
            annotations=[f"{ACCEPTANCE}=alice", f"{OPTIONS}=sections=functional timeout=60"],
        )  # fmt: skip
        keep_reports(tmp_path / "jobs", acceptance["job"], tmp_path / "report")
    assert acceptance["phase"] == "Failed"
    assert acceptance["summary"]["verdicts"] == {
        **{f"functional/{check}": "fail" for check in BROKEN},
        "functional/streaming": "pass",
        "functional/unsupported tool forms refused": "pass",
    }
    assert acceptance["message"].startswith("not passed: functional/deterministic answer: ")
    (event,) = _events(devcluster, namespace, "AcceptanceFailed")
    assert event["type"] == "Warning"
    for check, (_, why) in BROKEN.items():
        assert f"functional/{check}: {why}" in acceptance["message"]
        assert f"functional/{check}: {why}" in event["message"]


# --- one run at a time: a benchmark and an acceptance never overlap (issue 19) ----------

BENCHMARK = "sparkllm.io/benchmark"


def _runs(cluster: DevCluster, namespace: str) -> tuple[dict[str, Any], dict[str, Any]]:
    status = _icl(cluster, namespace).get("status") or {}
    return dict(status.get("benchmark") or {}), dict(status.get("acceptance") or {})


@pytest.mark.cluster
@quick_resync
def test_an_acceptance_asked_with_a_benchmark_waits_for_it(
    devcluster: DevCluster,
    namespace: str,
    shared_operator: OperatorProcess,
    model_dir: Path,
    tmp_path: Path,
) -> None:
    """Both asked for in one annotate: the benchmark runs first, the acceptance says it
    waits (status + one Normal Event, naming the benchmark's Job), then starts by itself
    once the benchmark ended — its Job created after the benchmark's completion."""
    with on_demand(devcluster, namespace, model_dir=model_dir, out=tmp_path):
        devcluster.kubectl(
            "annotate", "icl", NAME, "-n", namespace, "--overwrite",
            f"{BENCHMARK}=alice", f"{BENCHMARK}-scenarios=short-c1",
            f"{ACCEPTANCE}=alice", f"{OPTIONS}=sections=functional timeout=60",
        )  # fmt: skip
        seen: list[tuple[str, str, str]] = []

        def both_done() -> tuple[dict[str, Any], dict[str, Any]] | None:
            benchmark, acceptance = _runs(devcluster, namespace)
            snapshot = (
                str(benchmark.get("phase")),
                str(acceptance.get("phase")),
                str(acceptance.get("message", "")),
            )
            if not seen or seen[-1] != snapshot:
                seen.append(snapshot)
                print(f"benchmark {snapshot[0]}, acceptance {snapshot[1]}: {snapshot[2]}")
            ended = benchmark.get("phase") in TERMINAL and acceptance.get("phase") in TERMINAL
            return (benchmark, acceptance) if ended else None

        result = wait_until(both_done, timeout=3 * DEADLINE, what="both runs to finish")
        assert result is not None
        benchmark, acceptance = result
    assert benchmark["phase"] == "Succeeded", benchmark.get("message")
    assert acceptance["phase"] == "Succeeded", acceptance.get("message")
    waiting = (
        f"waiting for the benchmark Job {benchmark['job']} (user alice) to finish: two runs "
        "at once would measure each other; this one starts when that one ends"
    )
    assert ("Running", "Waiting", waiting) in seen  # the wait, while the benchmark ran
    assert all(not (b == "Running" and a == "Running") for b, a, _ in seen)  # never both
    assert acceptance["requestedAt"] >= benchmark["completedAt"]  # its Job came after
    (event,) = _events(devcluster, namespace, "AcceptanceWaiting")
    assert event["type"] == "Normal"
    assert f"waits for the benchmark Job {benchmark['job']} (user alice)" in event["message"]
    assert not _events(devcluster, namespace, "BenchmarkWaiting")
