"""The acceptance checklist against the dev cluster: every row, and the report files.

The real operator serves one replica (group a) of simulated engines with DeepSeek V4's
reasoning and tool-call parsers; ``GatewayPods`` runs the front door the operator created
(admission + smg). ``sparkllm bench --accept`` runs as alice against the admission layer,
reads rank restarts from the InferenceCluster's status and sets the accepted baseline on
it; a second run reads that baseline back and compares. Without Prometheus the five node
rows say "not measured". The report files are kept in the test's directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sparkllm.bench.accept.regression import BASELINE_ANNOTATION
from sparkllm_dev.devcluster import DevCluster
from sparkllm_dev.devcluster.toymodel import train_tokenizer as train_v4_tokenizer
from sparkllm_dev.testing import OperatorProcess
from tests.e2e.serving import serve
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
    operator: OperatorProcess,
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
            extra=["--set-baseline"],
        )  # fmt: skip
        assert status == 0
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
