"""The launch check against the pinned SGLang 0.5.23 wheel's own parser, and its result.

The operator's program (``LAUNCH_CHECK_CODE``, what every rank's ``launch-check`` init
container runs in the engine image) is run here on the command lines the operator
renders for every rank of every sample in manifests/samples/, against SGLang 0.5.23's
own ``ServerArgs.add_cli_args`` and ``prepare_server_args`` (the dev venv's wheel, via
``sparkllm_dev.sim.launch_check``: one process for all of them, SGLang imported once).
Then what SGLang refuses — an unknown flag, a value outside its choices, a value of the
wrong type — comes back naming the flag, the value and the version, with exit code 1.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkllm.api import validate_inference_cluster
from sparkllm.render import EngineKeyRef
from sparkllm.render.engine import engine_env
from sparkllm.render.ranks import ReplicaPlan, render_rank_statefulset
from sparkllm.sglang_contract.command import engine_args
from sparkllm.sglang_contract.launch_check import (
    LAUNCH_CHECK_COMMAND,
    LAUNCH_CHECK_CONTAINER,
    LaunchResult,
    parse_result,
)

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted((ROOT / "manifests" / "samples").glob("*.yaml"))


def _sample(path: Path) -> Any:
    obj = yaml.safe_load(path.read_text())
    obj.setdefault("metadata", {}).setdefault("namespace", "llm")
    return validate_inference_cluster(obj)


def _check_many(argvs: list[list[str]], tmp_path: Path) -> list[tuple[int, dict[str, Any]]]:
    """The program on each command line, in one process of its own (stand-ins stay there)."""
    code = (
        "import json,sys;from pathlib import Path;"
        "from sparkllm_dev.sim.launch_check import check_many;"
        "print(json.dumps(check_many(json.loads(sys.argv[1]),scratch=Path(sys.argv[2]))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(argvs), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return [(c, r) for c, r in json.loads(done.stdout.strip().splitlines()[-1])]


BASE = ["--model-path", "/models/m", "--nnodes", "2", "--node-rank", "1", "--pp-size", "2"]
BASE += ["--dist-init-addr", "10.0.0.1:5000"]
REFUSED = [
    (["--no-such-flag", "7"], "--no-such-flag", "7", "unrecognized arguments"),
    (["--attention-backend", "nope"], "--attention-backend", "nope", "invalid choice"),
    (["--mem-fraction-static", "lots"], "--mem-fraction-static", "lots", "invalid float value"),
    (["--tool-call-parser", "deepseekv9"], "--tool-call-parser", "deepseekv9", "invalid choice"),
]


def test_sglang_0_5_23_accepts_every_rank_of_every_sample(tmp_path: Path) -> None:
    argvs, names = [], []
    for path in SAMPLES:
        ic = _sample(path)
        for rank in range(ic.spec.engine.nodes_per_replica):
            argvs.append(engine_args(ic.spec, rank=rank, rank0_ip="10.0.0.1"))
            names.append(f"{path.name} rank {rank}")
    assert len(SAMPLES) >= 2
    assert len(argvs) >= 5
    results = _check_many(argvs, tmp_path)
    for name, (code, result) in zip(names, results, strict=True):
        assert (code, result["ok"], result["checked"]) == (0, True, "server_args"), (name, result)
        assert result["version"] == "0.5.23", name


def test_refusals_name_the_flag_the_value_and_the_version(tmp_path: Path) -> None:
    results = _check_many([BASE + extra for extra, *_ in REFUSED], tmp_path)
    for (extra, flag, value, words), (code, result) in zip(REFUSED, results, strict=True):
        assert code == 1, extra
        assert (result["ok"], result["flag"], result["value"]) == (False, flag, value), result
        assert words in result["error"], result
        described = parse_result(json.dumps(result), code)
        assert described is not None
        assert described.describe(image="img:1").startswith(
            f"SGLang 0.5.23 in img:1 refuses {flag} {value}: "
        )


def test_the_simulated_image_reports_another_version(tmp_path: Path) -> None:
    env = {"SPARKLLM_SIM_SGLANG_VERSION": "0.5.22"}
    code = (
        "import json,sys;from pathlib import Path;"
        "from sparkllm_dev.sim.launch_check import check_many;"
        "print(json.dumps(check_many([sys.argv[1:]],scratch=Path('" + str(tmp_path) + "'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *BASE],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={**_environ(), **env},
    )
    [[status, result]] = json.loads(done.stdout.strip().splitlines()[-1])
    assert (status, result["ok"], result["version"]) == (0, True, "0.5.22")


def _environ() -> dict[str, str]:
    import os

    return dict(os.environ)


@pytest.mark.parametrize(
    ("message", "code", "want"),
    [
        (None, None, None),
        ('{"ok": true, "version": "0.5.23", "checked": "server_args"}', 0,
         LaunchResult(ok=True, version="0.5.23", checked="server_args")),
        ('{"ok": true, "version": "0.5.23"}', 1, LaunchResult(ok=False, version="0.5.23")),
        ("", 127, LaunchResult(ok=False, error="exit code 127: no termination message")),
        ("python3: not found", 127,
         LaunchResult(ok=False, error="exit code 127: python3: not found")),
    ],
)  # fmt: skip
def test_parse_result(message: str | None, code: int | None, want: LaunchResult | None) -> None:
    assert parse_result(message, code) == want


def test_every_rank_runs_the_check_in_the_engine_image_with_the_engine_args() -> None:
    ic = _sample(ROOT / "manifests" / "samples" / "deepseek-v4-flash.yaml")
    nodes = tuple(f"n{i}" for i in range(ic.spec.engine.nodes_per_replica))
    plan = ReplicaPlan(index=0, group_key="g", nodes=nodes, rank0_ip="10.0.0.1", generation=1)
    for rank in range(len(nodes)):
        sts = render_rank_statefulset(
            ic, plan=plan, rank=rank, engine_key=EngineKeyRef(secret="k", key="token")
        )
        pod = sts["spec"]["template"]["spec"]
        engine = pod["containers"][0]
        [check] = [c for c in pod["initContainers"] if c["name"] == LAUNCH_CHECK_CONTAINER]
        assert check["image"] == engine["image"] == ic.spec.engine.image
        assert check["command"] == list(LAUNCH_CHECK_COMMAND)
        assert check["args"] == engine["args"]
        assert check["env"] == engine_env(ic.spec)  # the engine's, never the engine key
        assert "volumeMounts" not in check
        assert check["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert pod["initContainers"][-1] is check  # after the model and network checks
