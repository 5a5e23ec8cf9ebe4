"""The docs are tests: every fenced code block in README.md and docs/*.md is classified,
and every block that can be checked without a live demo is checked here.

A doc that drifts from the code fails CI instead of misleading a reader. The one line
directly above a block's opening fence says what it is (docs/devcluster.md, "Docs are
tests"):

* ``<!-- run -->`` — shell, run here with bash in a scratch directory (the checkout's
  ``manifests``, ``charts``, ``crds``, ``tests`` and ``.venv`` linked in, ``icl.yaml``/``ic.yaml``
  copies of the sample, ``.venv/bin`` and the built kube binaries first on ``PATH``). It
  must exit 0; when the next block is marked ``output-of-previous`` its stdout must
  match that block.
* ``<!-- demo -->`` — shell that needs the demo (its front door, a live InferenceCluster):
  run as written, its output compared, by tests/integration/test_docs_demo_journey.py on
  a dev cluster of its own (opt-in: the whole demo takes minutes and its node group).
* ``<!-- output-of-previous -->`` — what the ``run`` (or ``demo``) block before it prints, compared
  line by line after collapsing runs of blanks. Placeholders: a line ``...`` stands for
  any lines (none included), ``…`` inside a line for any text.
* ``<!-- parse -->`` — a command line (or a synopsis: ``[optional]`` brackets, ``a|b``
  choices, ``<placeholders>``) that needs something this machine has not (a gateway, a
  model, GPUs): each command is parsed by the real argument parser of the program it
  names, so a renamed or removed flag fails. Not run.
* ``<!-- check: NAME -->`` — checked by the function ``NAME`` in ``CHECKS`` below (a spec
  fragment validated by the API model, a status fragment against the CRD's schema, a
  source excerpt against the file, ...).
* ``<!-- tested-by: PATH -->`` — a test module that reads this very block from the doc
  and runs it (it must exist and name the doc).
* ``<!-- illustration -->`` or ``<!-- illustration: why -->`` — not checked: a diagram,
  the output of a run on the demo or on hardware, a recorded benchmark.

A block with no marker fails, naming ``file:line``. ``python -m tests.unit.test_docs_blocks``
prints the census (how many blocks of each kind).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import io
import json
import os
import re
import shlex
import subprocess
import sys
import types
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
SAMPLE = ROOT / "manifests" / "samples" / "deepseek-v4-flash.yaml"
KUBE_BIN = Path.home() / ".cache" / "sparkllm" / "bin" / "v1.35.4"
DIGEST = "sha256:" + "5e" * 32  # what `skopeo inspect` would print
JSON = dict[str, Any]

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
MARKER = re.compile(
    r"^<!--\s*(illustration|output-of-previous|run|demo|parse|check|tested-by)"
    r"(?:\s*:\s*(.*?))?\s*-->\s*$"
)


@dataclass(frozen=True)
class Block:
    """One fenced code block: where it opens, its info string, its text, its marker."""

    doc: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    kind: str | None  # the marker's kind, None when unmarked
    arg: str  # the marker's argument ("" when none)

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def blocks_of(doc: Path) -> list[Block]:
    """Every fenced block of ``doc``, in order, with the marker on the line above it."""
    lines = doc.read_text(encoding="utf-8").split("\n")
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        fence = opening.group(1)
        end = index + 1
        while end < len(lines) and not re.match(
            rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[end]
        ):
            end += 1
        marker = MARKER.match(lines[index - 1]) if index else None
        found.append(
            Block(
                doc=doc,
                line=index + 1,
                lang=opening.group(2).strip(),
                text="\n".join(lines[index + 1 : end]),
                kind=marker.group(1) if marker else None,
                arg=(marker.group(2) or "") if marker else "",
            )
        )
        index = end + 1
    return found


def all_blocks() -> list[Block]:
    return [block for doc in DOCS for block in blocks_of(doc)]


def following(block: Block) -> Block | None:
    """The block right after ``block`` in its doc, if any."""
    siblings = blocks_of(block.doc)
    position = [b.line for b in siblings].index(block.line)
    return siblings[position + 1] if position + 1 < len(siblings) else None


def census(blocks: list[Block]) -> Counter[str]:
    """How many blocks of each kind (None counted as ``unmarked``)."""
    return Counter(block.kind or "unmarked" for block in blocks)


# --- output matching ----------------------------------------------------------------------


def _squash(line: str) -> str:
    return " ".join(line.split())


def output_matches(shown: str, actual: str) -> bool:
    """``actual`` matches the doc's ``shown`` output: lines equal after collapsing blanks,
    a ``...`` line standing for any lines and ``…`` for any text within a line."""
    pattern = []
    for line in shown.strip("\n").split("\n"):
        squashed = _squash(line)
        if squashed == "...":
            pattern.append(r"(?:[^\n]*\n)*?")
        else:
            pattern.append(".*?".join(re.escape(part) for part in squashed.split("…")) + r"\n")
    text = "".join(_squash(line) + "\n" for line in actual.strip("\n").split("\n"))
    return re.fullmatch("".join(pattern), text, flags=re.DOTALL) is not None


def test_output_matching_honours_the_placeholders_and_nothing_else() -> None:
    actual = "head\nrank  a   b\n0     1   2\ntail one\ntail two\nverdict: FITS\n"
    assert output_matches("...\nrank a b\n0 1 2\n...\nverdict: FITS", actual)
    assert output_matches("head\nrank a b\n0 … 2\n...", actual)
    assert not output_matches("rank a b\n0 1 2\n...", actual)  # the head line is not shown
    assert not output_matches("...\n0 1 3\n...", actual)
    assert not output_matches("...\nverdict: FAILS", actual)


# --- running shell blocks -----------------------------------------------------------------


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working directory shaped like the checkout a reader types in."""
    directory = tmp_path_factory.mktemp("doc-blocks")
    for name in ("manifests", "charts", "crds", ".venv", "tests"):
        (directory / name).symlink_to(ROOT / name)
    for name in ("icl.yaml", "ic.yaml"):
        (directory / name).write_text(SAMPLE.read_text())
    return directory


def run_shell(text: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join((str(ROOT / ".venv" / "bin"), str(KUBE_BIN), env["PATH"]))
    env["DIGEST"] = DIGEST
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", text],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# --- parsing command lines ----------------------------------------------------------------


def commands_of(block: Block) -> list[str]:
    """The block's command lines: continuations joined, ``$ `` prompts and comments
    stripped; in a ``console`` block only the prompted lines (the rest is output)."""
    lines = block.text.split("\n")
    if block.lang == "console":
        kept, continued = [], False
        for line in lines:
            if line.startswith("$ ") or continued:
                kept.append(line.removeprefix("$ "))
                continued = line.rstrip().endswith("\\")
        lines = kept
    joined = "\n".join(lines).replace("\\\n", " ")
    return [line.strip() for line in joined.split("\n") if line.strip()]


def synopsis_words(command: str) -> list[str]:
    """A command line or synopsis as the words a parser would get."""
    command = re.sub(r"--<[^>]*>(\s+<[^>]*>)?(\s+\.\.\.)?", " ", command)  # --<opt> <v> ...
    command = re.sub(r"<[^>]*>", "X", command)  # <placeholders>
    words = shlex.split(command.replace("[", " ").replace("]", " "), comments=True)
    while words and re.match(r"^[A-Z_]+=", words[0]):  # VAR=value prefix
        words.pop(0)
    kept: list[str] = []
    for word in words:
        if word in ("...", "…") or re.fullmatch(r"[A-Z]{1,4}", word):  # a value's metavar
            takes_value = kept and kept[-1].startswith("--") and "=" not in kept[-1]
            kept += ["1"] if takes_value else []  # parses as a number and as a string
            continue
        kept.append(word.split("|")[0])  # a|b: the first choice
    return kept


def _no_abbreviations(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser`` and its subcommands' parsers taking only flags spelled out in full: a
    doc that writes ``--scenario`` for ``--scenarios`` works by luck, not by contract."""
    parser.allow_abbrev = False
    for action in parser._actions:  # argparse keeps its subparsers nowhere else
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _no_abbreviations(child)
    return parser


def _argparse(parser: argparse.ArgumentParser, words: list[str]) -> None:
    _no_abbreviations(parser)
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            parser.parse_args(words)
    except SystemExit as exc:
        raise AssertionError(f"{' '.join(words)}: {errors.getvalue().strip()}") from exc


def parse_command(words: list[str]) -> None:
    """Parse ``words`` with the real parser of the program it names (not run)."""
    program, rest = words[0], words[1:]
    if program.endswith("/python") or program in ("python", "python3"):
        assert rest[:1] == ["-m"], f"{' '.join(words)}: expected python -m MODULE"
        program, rest = rest[1], rest[2:]
    if program.rsplit("/", 1)[-1] in ("sparkllm", "sparkllm.cli"):
        from sparkllm.cli import build_parser

        _argparse(build_parser(), rest)
    elif program.rsplit("/", 1)[-1] == "sparkllm-dev":
        from sparkllm_dev.cli import build_parser as dev_parser

        _argparse(dev_parser(), rest)
    elif program == "sparkllm.gateway":
        from sparkllm.gateway.config import build_argument_parser

        _argparse(build_argument_parser(), rest)
    elif program == "sparkllm.preflight.bandwidth":
        from sparkllm.cli_args import add_options
        from sparkllm.preflight.bandwidth import BandwidthArgs

        parser = argparse.ArgumentParser(prog=program)
        add_options(parser, BandwidthArgs)
        _argparse(parser, rest)
    elif program == "sparkllm_dev.sim":
        from sparkllm.sglang_contract.flags import parse_sglang_argv
        from sparkllm_dev.sim.options import parse_sim_options, split_command

        sim_args, sglang_args = split_command(rest, {})
        parse_sim_options(sim_args)
        parse_sglang_argv(sglang_args)
    else:
        raise AssertionError(f"{' '.join(words)}: no parser known for {program!r}")


# --- the named checks ---------------------------------------------------------------------


def _sample() -> JSON:
    sample: JSON = yaml.safe_load(SAMPLE.read_text())
    return sample


def _merged(base: JSON, patch: JSON) -> JSON:
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def check_spec_fragment(block: Block) -> None:
    """A ``spec:`` fragment, merged into the sample, is a valid InferenceCluster."""
    from sparkllm.api import validate_inference_cluster

    fragment = yaml.safe_load(block.text)
    assert set(fragment) == {"spec"}, f"{block.where}: expected a spec: fragment"
    validate_inference_cluster(_merged(_sample(), fragment))


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
    """Every field of a ``status:`` fragment is a field of the CRD's status schema."""
    fragment = yaml.safe_load(block.text)
    assert set(fragment) == {"status"}, f"{block.where}: expected a status: fragment"
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

    sample = validate_inference_cluster(_sample())
    namespace = {"manifest": _sample(), "old": sample, "new": sample}
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

    manifest = _merged(_sample(), {"spec": {"monitoring": {"interval": "20s"}}})
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
    ic = validate_inference_cluster(_sample())
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
    sample = _sample()["spec"]
    tables = 0
    for index, line in enumerate(lines):
        if not line.startswith("NAME "):
            continue
        header = _squash(line)
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


# --- the tests ----------------------------------------------------------------------------

BLOCKS = all_blocks()


def _ids(blocks: list[Block]) -> list[str]:
    return [block.where for block in blocks]


def of_kind(kind: str) -> list[Block]:
    return [block for block in BLOCKS if block.kind == kind]


def test_every_block_is_marked() -> None:
    unmarked = [
        f"{b.where}: ```{b.lang} block with no marker above it ({b.text.split(chr(10))[0][:60]})"
        for b in BLOCKS
        if b.kind is None
    ]
    assert not unmarked, "mark or run these blocks (docs/devcluster.md):\n" + "\n".join(unmarked)


def test_every_marker_is_well_formed() -> None:
    problems = []
    for block in BLOCKS:
        if block.kind == "check" and block.arg not in CHECKS:
            problems.append(f"{block.where}: unknown check {block.arg!r}")
        if block.kind == "tested-by":
            module = ROOT / block.arg
            name = str(block.doc.relative_to(ROOT))
            if not module.is_file() or name not in module.read_text():
                problems.append(f"{block.where}: {block.arg} does not exist or name {name}")
        if block.kind == "output-of-previous":
            siblings = blocks_of(block.doc)
            before = [b for b in siblings if b.line < block.line]
            if not before or before[-1].kind not in ("run", "demo"):
                problems.append(f"{block.where}: output-of-previous not after a run block")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("block", of_kind("run"), ids=_ids(of_kind("run")))
def test_run_block(block: Block, scratch: Path) -> None:
    result = run_shell(block.text, scratch)
    assert result.returncode == 0, f"{block.where} exited {result.returncode}:\n{result.stderr}"
    output = following(block)
    if output is not None and output.kind == "output-of-previous":
        assert output_matches(output.text, result.stdout), (
            f"{block.where} printed what {output.where} does not show:\n{result.stdout}"
        )


@pytest.mark.parametrize("block", of_kind("parse"), ids=_ids(of_kind("parse")))
def test_parse_block(block: Block) -> None:
    commands = commands_of(block)
    assert commands, f"{block.where}: no command"
    for command in commands:
        if command.startswith("export "):
            continue
        parse_command(synopsis_words(command))


NEEDS_BINARY = {"helm", "kustomize"}  # the checks that run helm or kubectl (make binaries)


@pytest.mark.parametrize(
    "block",
    [
        pytest.param(b, marks=[pytest.mark.needs_binary] if b.arg in NEEDS_BINARY else [])
        for b in of_kind("check")
    ],
    ids=_ids(of_kind("check")),
)
def test_check_block(block: Block) -> None:
    CHECKS[block.arg](block)


def _fake(text: str, lang: str = "") -> Block:
    return Block(ROOT / "README.md", 1, lang, text, "check", "")


ICL_WIDE = (  # README's table, which check_demo_output passes
    "NAME REPLICAS READY PHASE MODEL PP AGE ENDPOINT REASON RESTARTS\n"
    "deepseek-v4-flash 1 1 Ready deepseek-v4-flash 3 15s http://x.llm.svc:8000 AllReplicasReady 0"
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


@pytest.mark.parametrize(
    "command",
    [
        "sparkllm plan -f icl.yaml --no-such-flag",
        "sparkllm bench --base-url http://x --model m --scenario short-c1",
        "python -m sparkllm.gateway --served-model-name m --upstream http://x",
        "python3 -m sparkllm.preflight.bandwidth --threshold 1",
        "sparkllm-dev --cluster nowhere status",
        "kubectl get icl",
    ],
)
def test_parse_refuses_a_flag_the_program_does_not_have(command: str) -> None:
    with pytest.raises(AssertionError):
        parse_command(synopsis_words(command))


def _parser_of(words: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The parser of the (sub)command ``words`` names, and the words after the command."""
    from sparkllm.cli import build_parser
    from sparkllm_dev.cli import build_parser as dev_parser

    parser = build_parser() if words[0] == "sparkllm" else dev_parser()
    rest = words[1:]
    while True:
        subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        takes_value = {o for a in parser._actions if a.nargs != 0 for o in a.option_strings}
        position = 0  # the first word that is neither an option nor an option's value
        while position < len(rest) and rest[position].startswith("-"):
            position += 2 if rest[position] in takes_value else 1
        command = rest[position] if position < len(rest) else None
        if not subparsers or command is None or command not in subparsers[0].choices:
            return parser, rest
        parser = subparsers[0].choices[command]
        rest = rest[position + 1 :]


def readme_command_rows() -> list[str]:
    """The commands of README's command tables (first cell, inline code)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Commands") : text.index("## Layout")]
    return [
        m.group(1).replace("\\|", "|")
        for m in re.finditer(r"^\| `((?:[^`]|\\\|)+)` \|", section, re.M)
    ]


def command_row_problems(rows: list[str]) -> list[str]:
    """What is wrong with command synopses: a subcommand or a flag the parser has not."""
    problems = []
    for row in rows:
        words = row.replace("[", " ").replace("]", " ").split()
        parser, rest = _parser_of(words)
        if parser.prog in ("sparkllm", "sparkllm-dev") and not row.startswith(
            ("sparkllm --version", "sparkllm-dev [--cluster")
        ):
            problems.append(f"{row}: no such subcommand")
        known = {o for a in parser._actions for o in a.option_strings}
        if parser.prog == "sparkllm-dev":  # up / status / down: the subcommands themselves
            sub = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            missing = [w for w in rest if w.isalpha() and w not in sub[0].choices]
            problems += [f"{row}: no subcommand {w}" for w in missing if w.islower()]
        flags = [w.split("=")[0] for w in rest if w.startswith("-")]
        problems += [f"{row}: {parser.prog} has no {f}" for f in flags if f not in known]
    return problems


def test_readme_command_tables_name_only_real_subcommands_and_flags() -> None:
    """README's tables of ``sparkllm`` and ``sparkllm-dev`` commands: every subcommand
    exists and every flag is one its parser has, spelled out in full."""
    rows = readme_command_rows()
    assert len(rows) >= 10, rows
    problems = command_row_problems(rows)
    assert not problems, "\n".join(problems)


def test_command_row_problems_sees_a_wrong_subcommand_or_flag() -> None:
    assert command_row_problems(["sparkllm plan -f x [--model-dir D]"]) == []
    assert "sparkllm plann -f x: no such subcommand" in command_row_problems(
        ["sparkllm plann -f x"]
    )
    assert command_row_problems(["sparkllm plan --modeldir D"]) == [
        "sparkllm plan --modeldir D: sparkllm plan has no --modeldir"
    ]
    row = "sparkllm-dev [--cluster demo] stat / down"
    assert command_row_problems([row]) == [f"{row}: no subcommand stat"]


def main() -> int:
    counts = census(BLOCKS)
    executed = counts["run"] + counts["check"] + counts["tested-by"]
    print(
        f"{len(BLOCKS)} blocks: {executed} executed (run {counts['run']}, check "
        f"{counts['check']}, tested-by {counts['tested-by']}), {counts['parse']} parsed, "
        f"{counts['demo']} run on the demo (opt-in), "
        f"{counts['output-of-previous']} output, {counts['illustration']} illustration, "
        f"{counts['unmarked']} unmarked"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
