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
* ``<!-- check: NAME -->`` — checked by ``CHECKS[NAME]`` in tests/unit/test_docs_checks.py (a spec
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
import io
import os
import re
import shlex
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkllm_dev.devcluster.paths import K8S_VERSION

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
SAMPLE = ROOT / "manifests" / "samples" / "deepseek-v4-flash.yaml"
KUBE_BIN = Path.home() / ".cache" / "sparkllm" / "bin" / K8S_VERSION
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


def squash(line: str) -> str:
    """``line`` with runs of blanks collapsed (how outputs are compared)."""
    return " ".join(line.split())


def output_matches(shown: str, actual: str) -> bool:
    """``actual`` matches the doc's ``shown`` output: lines equal after collapsing blanks,
    a ``...`` line standing for any lines and ``…`` for any text within a line."""
    pattern = []
    for line in shown.strip("\n").split("\n"):
        squashed = squash(line)
        if squashed == "...":
            pattern.append(r"(?:[^\n]*\n)*?")
        else:
            pattern.append(".*?".join(re.escape(part) for part in squashed.split("…")) + r"\n")
    text = "".join(squash(line) + "\n" for line in actual.strip("\n").split("\n"))
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


# --- the sample, as blocks use it -----------------------------------------------------------


def sample_manifest() -> JSON:
    """The sample InferenceCluster as a dict (a fresh copy each call)."""
    sample: JSON = yaml.safe_load(SAMPLE.read_text())
    return sample


def merged(base: JSON, patch: JSON) -> JSON:
    """``patch`` merged into a copy of ``base``, mappings key by key."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


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


REQUEST = re.compile(r"annotate icl/\S+ sparkllm\.io/(benchmark|acceptance)=")


def unanswered_requests(text: str) -> list[str]:
    """The run requests (benchmark, acceptance annotations) a shell text makes without
    waiting for their answer: the operator removes the annotation once status has it, so a
    reader's next line reads this run's result, not an earlier run's or "Running"."""
    return [
        kind
        for kind in dict.fromkeys(REQUEST.findall(text))
        if f'until [ -z "$(kubectl -n llm get icl/deepseek-v4-flash -o jsonpath='
        f"'{{.metadata.annotations.sparkllm\\.io/{kind}}}')\" ]" not in text
    ]


def test_a_demo_block_that_requests_a_run_waits_for_its_answer() -> None:
    problems = [
        f"{b.where}: requests a {kind} run and reads on without waiting for its answer"
        for b in BLOCKS
        if b.kind == "demo"
        for kind in unanswered_requests(b.text)
    ]
    assert not problems, "\n".join(problems)
    annotate = "kubectl -n llm annotate icl/deepseek-v4-flash sparkllm.io/benchmark=demo\n"
    read = "kubectl -n llm get icl/deepseek-v4-flash -o jsonpath='{.status.benchmark.phase}'\n"
    assert unanswered_requests(annotate + read) == ["benchmark"]
    until = (
        'until [ -z "$(kubectl -n llm get icl/deepseek-v4-flash -o jsonpath='
        "'{.metadata.annotations.sparkllm\\.io/benchmark}')\" ]; do sleep 2; done\n"
    )
    assert unanswered_requests(annotate + until + read) == []


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
