"""The named checks of the docs' ``<!-- check: NAME -->`` blocks (docs/devcluster.md, "Docs
are tests"), and their own tests: each check must refuse a drifted block.

A check reads one block and compares it with what the code does: a spec fragment with the
API model, a status fragment with the CRD's schema, a quoted message with the pure
function that writes it, a table with the formatter that prints it, a chart command with
``helm template``. ``CHECKS`` maps the marker's NAME to its function; the blocks and the
marker grammar are tests/unit/test_docs_blocks.py's.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.test_docs_blocks import (
    JSON,
    ROOT,
    Block,
    blocks_of,
    commands_of,
    merged,
    of_kind,
    output_matches,
    parse_command,
    sample_manifest,
    squash,
    synopsis_words,
)

# --- the checks -----------------------------------------------------------------------------


def check_spec_fragment(block: Block) -> None:
    """A ``spec:`` fragment, merged into the sample, is a valid InferenceCluster."""
    from sparkllm.api import validate_inference_cluster

    fragment = yaml.safe_load(block.text)
    assert set(fragment) == {"spec"}, f"{block.where}: expected a spec: fragment"
    validate_inference_cluster(merged(sample_manifest(), fragment))


def _crd_schema() -> JSON:
    from sparkllm.api.crd import build_crd

    version = build_crd()["spec"]["versions"][0]
    schema: JSON = version["schema"]["openAPIV3Schema"]
    return schema


def unknown_keys(value: Any, schema: JSON, path: str) -> list[str]:
    """The keys of ``value`` its schema does not have. An open object (its fields kept as
    written) must name each of its keys in its description; the walk ends there, as it
    does at a map."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        described = set(re.findall(r"\w+", schema.get("description", "")))
        if not isinstance(value, dict):
            return []
        return [f"{path}.{key}" for key in value if key not in described]
    if isinstance(value, dict):
        properties = schema.get("properties")
        if properties is None:
            return []  # additionalProperties: a map
        missing = []
        for key, item in value.items():
            if key not in properties:
                missing.append(f"{path}.{key}")
            else:
                missing += unknown_keys(item, properties[key], f"{path}.{key}")
        return missing
    if isinstance(value, list) and "items" in schema:
        return [m for item in value for m in unknown_keys(item, schema["items"], f"{path}[]")]
    return []


def check_status_keys(block: Block) -> None:
    """Every field of a status fragment (``status:``, or fields of it such as ``engines:``)
    is a field of the CRD's status schema."""
    fragment = yaml.safe_load(block.text)
    if set(fragment) != {"status"}:
        fragment = {"status": fragment}
    missing = unknown_keys(fragment, _crd_schema(), "")
    assert not missing, f"{block.where}: not in the CRD's schema: {missing}"


def check_policy_configmap(block: Block) -> None:
    """A governance policy ConfigMap whose policy the gateway's parser accepts."""
    from sparkllm.gateway.governance.policy import Policy

    config_map = yaml.safe_load(block.text)
    assert config_map["kind"] == "ConfigMap"
    (text,) = config_map["data"].values()
    policy = Policy.parse(text)
    assert policy is not None


def check_python_api(block: Block) -> None:
    """The Python API example runs against the sample: ``manifest`` its dict, ``old`` and
    ``new`` the validated object."""
    from sparkllm.api import validate_inference_cluster

    sample = validate_inference_cluster(sample_manifest())
    namespace = {"manifest": sample_manifest(), "old": sample, "new": sample}
    exec(compile(block.text, block.where, "exec"), namespace)


def check_layout(block: Block) -> None:
    """Every directory and file the README's layout names exists in the checkout."""
    skipped = {".git", ".venv", "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
    paths = set()
    for directory, subdirectories, files in os.walk(ROOT):
        subdirectories[:] = [d for d in subdirectories if d not in skipped]
        relative = Path(directory).relative_to(ROOT).as_posix()
        here = "" if relative == "." else f"/{relative}"
        paths |= {f"{here}/{d}/" for d in subdirectories} | {f"{here}/{f}" for f in files}
    missing = [
        word
        for word in re.findall(r"[\w.-]+(?:/[\w.-]+)*(?:/|\.py|\.toml)(?=[\s),`]|$)", block.text)
        if not any(path.endswith(f"/{word}") for path in paths)
    ]
    assert not missing, f"{block.where}: the layout names what does not exist: {missing}"


def check_crd_messages(block: Block) -> None:
    """Each API server message quoted is one of the CRD's own CEL messages."""
    crd = json.dumps(_crd_schema())
    for line in block.text.split("\n"):
        field, reason, rest = line.split(": ", 2)
        assert field.startswith("spec."), line
        assert reason == "Forbidden", line
        message = rest.rsplit(": ", 1)[0]
        assert json.dumps(message)[1:-1] in crd, f"{block.where}: not a CRD message: {message}"


def check_error_shape(block: Block) -> None:
    """The error body shown has exactly the keys and constants the gateway sends."""
    from sparkllm.gateway import replies

    shown = json.loads(block.text)
    real = json.loads(replies.invalid_request("…", param="max_tokens").body())
    assert shown["error"].keys() == real["error"].keys()
    assert shown["error"]["type"] == real["error"]["type"]
    assert shown["error"]["code"] == replies.CODE_INVALID_TYPE


def check_engine_launcher_code(block: Block) -> None:
    from sparkllm.sglang_contract.command import ENGINE_LAUNCHER_CODE

    assert block.text == ENGINE_LAUNCHER_CODE, f"{block.where}: drifted from ENGINE_LAUNCHER_CODE"


WORKED_RULE = "sparkllm.gateway.rules.stop_sequences"


def _load_worked_rule(text: str) -> types.ModuleType:
    module = types.ModuleType(WORKED_RULE)
    exec(compile(text, WORKED_RULE, "exec"), module.__dict__)
    return module


def check_worked_rule(block: Block) -> None:
    """gateway.md's worked example: the rule refuses five stop sequences, naming ``stop``."""
    module = _load_worked_rule(block.text)
    from tests.unit.gateway_fixtures import payload_draft

    assert module.stop_sequences(payload_draft({"stop": ["a"] * 4})) is None
    reply = module.stop_sequences(payload_draft({"stop": ["a"] * 5}))
    assert (reply.status, reply.param, reply.code) == (400, "stop", "invalid_value")


def check_worked_rule_test(block: Block) -> None:
    """The worked example's test passes against the rule shown before it."""
    siblings = blocks_of(block.doc)
    (rule,) = [b for b in siblings if b.kind == "check" and b.arg == "worked-rule"]
    sys.modules[WORKED_RULE] = _load_worked_rule(rule.text)
    try:
        namespace: JSON = {}
        exec(compile(block.text, block.where, "exec"), namespace)
        tests = [f for name, f in namespace.items() if name.startswith("test_")]
        assert tests, f"{block.where}: no test function"
        for test in tests:
            test()
    finally:
        del sys.modules[WORKED_RULE]


def check_worked_rule_pipeline(block: Block) -> None:
    """The worked example's place in PAYLOAD_RULES: without its one new line, the lines
    shown are consecutive lines of rules/pipeline.py."""
    pipeline = ROOT / "operator" / "sparkllm" / "gateway" / "rules" / "pipeline.py"
    shown = [line for line in block.text.split("\n") if "stop_sequences" not in line]
    assert len(shown) == len(block.text.split("\n")) - 1, f"{block.where}: one new line"
    text = "\n" + pipeline.read_text() + "\n"
    assert "\n" + "\n".join(shown) + "\n" in text, f"{block.where}: not in {pipeline.name}"


def check_integrity_summary(block: Block) -> None:
    """The termination message shown (values elided: ``<...>``, ``, ...``) has the keys and
    constants of a real one: ``verify-model`` of the harness's toy model (46 shards)."""
    import tempfile

    from sparkllm.integrity.verify import VerifyRequest, verify_model
    from sparkllm_dev.devcluster.toymodel import write_toy_model

    shown = json.loads(re.sub(r",\s*\.\.\.\s*}", "}", block.text))
    with tempfile.TemporaryDirectory() as tmp:
        model = write_toy_model(Path(tmp) / "m", layers=43, shards=46)
        summary = verify_model(VerifyRequest(model_dir=model, expected_shards=46))
    real = json.loads(summary.to_message())
    assert shown.keys() == real.keys(), f"{block.where}: {sorted(shown)} != {sorted(real)}"
    same = ("v", "ok", "shards")
    assert {k: shown[k] for k in same} == {k: real[k] for k in same}, f"{block.where}: {real}"
    # sampled for large shards; the toy model's small files are hashed whole (sha256)
    assert shown["mode"] in ("sampled", "sha256", "mixed"), f"{block.where}: {shown['mode']}"
    assert set(shown["fp"]) <= set(real["fp"]), f"{block.where}: fp names {set(shown['fp'])}"


def _same_words(shown: str, real: str) -> bool:
    return shown.split() == real.split()


def check_exposed_condition(block: Block) -> None:
    """The Exposed condition quoted is what the operator writes when the cluster lacks the
    HTTPRoute API (decide/cluster.py ``exposed_condition``, pure)."""
    from sparkllm.reconcile.decide.cluster import exposed_condition

    absent = frozenset({("gateway.networking.k8s.io/v1", "HTTPRoute")})
    (cond,) = exposed_condition(absent, {}, generation=1)
    real = f"{cond['type']}={cond['status']} reason {cond['reason']}\nmessage: {cond['message']}"
    assert _same_words(block.text, real), f"{block.where}: the operator writes\n{real}"


def check_monitored_condition(block: Block) -> None:
    """The two Monitored conditions quoted (PodMonitor list forbidden; applied at 20s) are
    what decide/monitoring.py writes for the sample in namespace ``<ns>``."""
    from sparkllm.api import validate_inference_cluster
    from sparkllm.reconcile.decide.monitoring import decide_monitors
    from sparkllm.reconcile.decide.replicas import Observed

    manifest = merged(sample_manifest(), {"spec": {"monitoring": {"interval": "20s"}}})
    manifest["metadata"]["namespace"] = "ns"
    ic = validate_inference_cluster(manifest)
    real = []
    for forbidden in (frozenset({"PodMonitor"}), frozenset()):
        observed = Observed(nodes={}, pods=[], owned={}, forbidden=forbidden)
        decision = decide_monitors(ic, observed, served=True, previous={}, generation=1)
        (cond,) = decision.conditions
        real.append(f"{cond['type']}={cond['status']} {cond['reason']}: {cond['message']}")
    shown = block.text.replace("namespace <ns>", "namespace ns").split("\n")
    assert shown == real, f"{block.where}: the operator writes\n" + "\n".join(real)


def check_secret_lane(block: Block) -> None:
    """The refusal quoted for an unmarked engine-key Secret is ``lane_problem``'s words."""
    from sparkllm.api.secret_refs import SecretReference, SecretUse, lane_problem

    ref = SecretReference("spec.engine.apiKeySecretRef", "billing-db", SecretUse.ENGINE_API_KEY)
    real = lane_problem(ref, {})
    assert block.text == real, f"{block.where}: the operator says\n{real}"


def check_usage_console(block: Block) -> None:
    """A ``sparkllm usage`` session: each command parses (as ``parse`` blocks do) and the
    table shown is what ``usage.table`` prints for its rows, the store's note one of the
    notes the gateway sends."""
    from sparkllm.gateway.governance.usage import STORE_NOTE, table

    for command in commands_of(dataclasses.replace(block, lang="console")):
        if not command.startswith("export "):
            parse_command(synopsis_words(command))
    shown = [line for line in block.text.split("\n") if not line.startswith(("$ ", "    "))]
    _header, *rows, note = shown
    assert note.removeprefix("store: ") in STORE_NOTE.values(), f"{block.where}: {note}"
    data = []
    for row in rows:
        day, user, requests, ok, inputs, outputs = row.split()
        data.append(
            {"day": day, "user": user, "requests": int(requests), "outcomes": {"ok": int(ok)},
             "input_tokens": int(inputs), "output_tokens": int(outputs)}
        )  # fmt: skip
    report = {"data": data, "store": {"note": note.removeprefix("store: ")}}
    assert "\n".join(shown) == table(report), f"{block.where}: usage prints\n{table(report)}"


@dataclasses.dataclass(frozen=True)
class _Request:
    user: str


def check_rival_wait(block: Block) -> None:
    """The Waiting message quoted is what the benchmark's plan writes while an acceptance
    Job of user demo has not finished (run_exclusion.rival_wait, plan_benchmark: pure)."""
    from datetime import UTC, datetime

    from sparkllm.api import validate_inference_cluster
    from sparkllm.reconcile.decide.benchmark import BENCHMARK_STEP
    from sparkllm.reconcile.decide.benchmark_plan import BENCHMARK, plan_benchmark
    from sparkllm.reconcile.decide.job_result import JobResult
    from sparkllm.reconcile.decide.run_exclusion import rival_wait

    shown = yaml.safe_load(block.text)["message"]
    (job,) = re.findall(r"deepseek-v4-flash-accept-[0-9a-f]+", shown)
    running = JobResult(name=job, uid="u", user="demo", requested_at=None)
    ic = validate_inference_cluster(sample_manifest())
    wait = rival_wait(BENCHMARK_STEP.rivals, ic=ic, obj={}, jobs={"acceptance": {job: running}})
    plan = plan_benchmark(
        request=_Request("demo"), wanted="deepseek-v4-flash-bench-0", jobs={}, previous=None,
        ready=True, key_problem=None, now=datetime.now(UTC), kind=BENCHMARK, wait_for=wait,
    )  # fmt: skip
    assert plan.status is not None
    assert plan.status["message"] == shown, f"{block.where}: {plan.status['message']}"


def check_epp_metrics(block: Block) -> None:
    """The SGLang metric names the EPP is told to read are ones rank 0 serves (the
    simulator's metrics mirror SGLang 0.5.23's names)."""
    from prometheus_client import generate_latest

    from sparkllm_dev.sim.metrics import EngineMetrics

    rank0 = EngineMetrics(model_name="m", pp_rank=0, max_total_num_tokens=1000)
    served = set(re.findall(r"^(sglang:\w+)[{ ]", generate_latest(rank0.registry).decode(), re.M))
    names = re.findall(r"sglang:\w+", block.text)
    assert names, f"{block.where}: no metric named"
    missing = [name for name in names if name not in served]
    assert not missing, f"{block.where}: rank 0 serves no {missing}"


def check_helm(block: Block) -> None:
    """Each ``helm install``/``upgrade --install`` renders (as ``helm template``) with its
    flags; the block's other lines are kubectl against a cluster (tests/integration)."""
    from tests.unit.test_chart_render import ROOT as CHART_ROOT
    from tests.unit.test_chart_render import run_helm

    rendered = 0
    for command in commands_of(block):
        words = shlex.split(command, comments=True)
        if words[:1] != ["helm"]:
            continue
        args = words[2:] if words[1] == "install" else words[3:]
        assert words[1] == "install" or words[1:3] == ["upgrade", "--install"], command
        args = [str(CHART_ROOT / a) if a.startswith("charts/") else a for a in args]
        run_helm("template", *args)
        rendered += 1
    assert rendered, f"{block.where}: no helm install in the block"


def icl_header(*, wide: bool) -> str:
    """``kubectl get icl`` 's header: NAME and the CRD's printer columns (``-o wide``: all)."""
    from sparkllm.api.crd import build_crd

    columns = build_crd()["spec"]["versions"][0]["additionalPrinterColumns"]
    names = [c["name"].upper() for c in columns if wide or not c.get("priority")]
    return " ".join(["NAME", *names])


def check_icl_tables(lines: list[str], where: str) -> int:
    """Each ``kubectl get icl`` table in ``lines``: the header the CRD's printer columns
    make, a row per object with one value per column (the sample's name, replicas, model
    and pipeline stages); returns how many tables."""
    sample = sample_manifest()["spec"]
    tables = 0
    for index, line in enumerate(lines):
        if not line.startswith("NAME "):
            continue
        header = squash(line)
        wide = "ENDPOINT" in header
        assert header == icl_header(wide=wide), f"{where}: {header!r} != {icl_header(wide=wide)!r}"
        row = dict(zip(header.split(), lines[index + 1].split(), strict=True))
        assert row["NAME"] == "deepseek-v4-flash", f"{where}: {row}"
        assert row["MODEL"] == sample["model"]["servedName"], f"{where}: {row}"
        assert row["PP"] == str(sample["engine"].get("pipelineParallel", 3)), f"{where}: {row}"
        assert row["REPLICAS"] == str(sample.get("replicas", 1)), f"{where}: {row}"
        tables += 1
    return tables


def check_icl_table(block: Block) -> None:
    """The ``kubectl get icl`` tables of a console block match the CRD's printer columns."""
    assert check_icl_tables(block.text.split("\n"), block.where), f"{block.where}: no table"


def check_demo_output(block: Block) -> None:
    """README's ``make demo`` excerpt is what the demo prints: its progress lines' formats,
    the icl table, and the closing lines (``access_lines`` with the demo profile's paths,
    the front door's port and key as ``PORT``/``KEY``, the stop line)."""
    from sparkllm_dev.demo import DemoAccess, access_lines
    from sparkllm_dev.devcluster.paths import DEMO, DevPaths

    paths = DevPaths(root=Path("~/.cache/sparkllm"), profile=DEMO)
    access = DemoAccess(
        kubeconfig=paths.kubeconfig,
        kubectl=paths.binary("kubectl"),
        front_door="http://127.0.0.1:PORT",
        key="KEY",
    )
    printed = [*access_lines(access), f"{'make demo-down':<51} # stop everything"]
    phases = _crd_schema()["properties"]["status"]["properties"]["phase"]["enum"]
    lines = block.text.split("\n")
    assert check_icl_tables(lines, block.where) == 1, f"{block.where}: expected one icl table"
    for index, line in enumerate(lines):
        if line.startswith("[demo] phase: "):
            phase = line.removeprefix("[demo] phase: ")
            assert phase in phases, f"{block.where}: no phase {phase!r}"
        elif line.startswith("[demo] Ready in "):
            assert re.fullmatch(r"\[demo\] Ready in \d+\.\d s", line), line
        elif line.startswith(("export ", "# ", "curl ", "make ")):
            assert any(output_matches(line, real) for real in printed), (
                f"{block.where}: the demo prints no line like {line!r}; it prints:\n"
                + "\n".join(printed)
            )
        elif line.strip() and line != "..." and not lines[index - 1].startswith("NAME "):
            assert line.startswith("NAME "), f"{block.where}: unchecked line {line!r}"


def check_kustomize(block: Block) -> None:
    """Each ``kubectl apply -k DIR`` builds (``kubectl kustomize DIR``, offline); applying
    it is tests/integration/test_kustomize.py's."""
    from tests.unit.test_chart_render import require_binary

    kubectl = require_binary("kubectl")
    built = 0
    for command in commands_of(block):
        words = shlex.split(command, comments=True)
        assert words[:2] == ["kubectl", "apply"], command
        assert "-k" in words, command
        directory = words[words.index("-k") + 1]
        result = subprocess.run(
            [str(kubectl), "kustomize", str(ROOT / directory)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, f"{block.where}: {command}:\n{result.stderr}"
        assert "kind: StatefulSet" in result.stdout, f"{directory} renders no operator"
        built += 1
    assert built, f"{block.where}: no kubectl apply -k"


CHECKS: dict[str, Callable[[Block], None]] = {
    "demo-output": check_demo_output,
    "icl-table": check_icl_table,
    "kustomize": check_kustomize,
    "spec-fragment": check_spec_fragment,
    "status-keys": check_status_keys,
    "policy-configmap": check_policy_configmap,
    "python-api": check_python_api,
    "layout": check_layout,
    "crd-messages": check_crd_messages,
    "error-shape": check_error_shape,
    "engine-launcher-code": check_engine_launcher_code,
    "worked-rule": check_worked_rule,
    "worked-rule-test": check_worked_rule_test,
    "worked-rule-pipeline": check_worked_rule_pipeline,
    "integrity-summary": check_integrity_summary,
    "exposed-condition": check_exposed_condition,
    "monitored-condition": check_monitored_condition,
    "epp-metrics": check_epp_metrics,
    "secret-lane": check_secret_lane,
    "usage-console": check_usage_console,
    "rival-wait": check_rival_wait,
    "helm": check_helm,
}


NEEDS_BINARY = {"helm", "kustomize"}  # the checks that run helm or kubectl (make binaries)


@pytest.mark.parametrize(
    "block",
    [
        pytest.param(b, marks=[pytest.mark.needs_binary] if b.arg in NEEDS_BINARY else [])
        for b in of_kind("check")
    ],
    ids=[b.where for b in of_kind("check")],
)
def test_check_block(block: Block) -> None:
    CHECKS[block.arg](block)


def _fake(text: str, lang: str = "") -> Block:
    return Block(ROOT / "README.md", 1, lang, text, "check", "")


ICL_WIDE = (  # README's table, which check_demo_output passes
    "NAME REPLICAS READY PHASE START MODEL PP AGE ENDPOINT REASON RESTARTS\n"
    "deepseek-v4-flash 1 1 Ready Ready:15s deepseek-v4-flash 3 15s http://x.llm.svc:8000 "
    "AllReplicasReady 0"
)


USAGE_COMMAND = "$ sparkllm usage --redis r:1 --cluster a/b"
USAGE_HEADER = "DAY         USER  REQUESTS  OK  INPUT TOKENS  OUTPUT TOKENS"
USAGE_ROW = "2026-12-01  bob   1         1   11            7"
USAGE_NOTE = "store: state in a shared store: kept across restarts and replicas"


def test_check_usage_console_passes_a_table_as_printed() -> None:
    check_usage_console(_fake(f"{USAGE_COMMAND}\n{USAGE_HEADER}\n{USAGE_ROW}\n{USAGE_NOTE}"))


def test_check_demo_output_passes_the_readme_table() -> None:
    check_demo_output(_fake(ICL_WIDE))


@pytest.mark.parametrize(
    ("check", "text"),
    [
        (check_spec_fragment, "spec:\n  monitoring:\n    serviceMonitors: true"),  # a typo
        (check_spec_fragment, "spec:\n  network:\n    roceMTU: 100"),  # out of bounds
        (check_status_keys, "status:\n  benchmark:\n    jobName: x"),
        (check_status_keys, "engines:\n- replica: 0\n  pinned: x"),
        (check_status_keys, "phases: [Ready]"),
        (check_layout, "operator/sparkllm/   api/ nowhere/"),
        (check_engine_launcher_code, "import os"),
        (check_crd_messages, "spec.engine.env: Forbidden: env must not be pretty: X"),
        (check_icl_table, "NAME REPLICAS READY PHASE MODEL PP AGE\nx 1 1 Ready m 3 2d"),
        (check_usage_console, f"{USAGE_COMMAND}\n{USAGE_HEADER}\n{USAGE_ROW}\nstore: kept"),
        (check_usage_console, f"{USAGE_COMMAND}\nDAY USER\n{USAGE_ROW}\n{USAGE_NOTE}"),
        (
            check_usage_console,
            f"$ sparkllm usage --redis r:1 --day 1\n{USAGE_HEADER}\n{USAGE_NOTE}",
        ),
        (check_icl_table, "NAME READY PHASE MODEL PP AGE\ndeepseek-v4-flash 1 Ready m 3 2d"),
        (check_demo_output, f"{ICL_WIDE}\nexport KUBECONFIG=~/.kube/config"),
        (check_demo_output, f"{ICL_WIDE}\n[demo] phase: Serving"),
        (check_demo_output, f"{ICL_WIDE}\nmake demo down   # stop everything"),
    ],
)
def test_the_checks_refuse_a_drifted_block(check: Callable[[Block], None], text: str) -> None:
    from sparkllm.errors import SparkllmError

    with pytest.raises((AssertionError, SparkllmError)):
        check(_fake(text))


def test_every_check_marker_names_a_check() -> None:
    unknown = [f"{b.where}: {b.arg!r}" for b in of_kind("check") if b.arg not in CHECKS]
    assert not unknown, f"no such check (CHECKS): {unknown}"
