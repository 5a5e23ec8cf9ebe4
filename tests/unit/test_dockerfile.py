"""The Dockerfile, checked without Docker (no engine here): parsed, then held to its promises.

One image (operator, admission layer, router, CLI), multi-stage, an exactly pinned base,
a numeric non-root user, nothing but the virtualenv in the final stage, ``sparkllm`` as
the entrypoint — and the install step is the very script the Makefile (so CI) runs, so
the image cannot be built from something the tests never saw.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INSTALL_SCRIPT = "hack/install-python-deps.sh"
PINNED_BASE = re.compile(r"^python:3\.11\.\d+-slim-bookworm$")
BUILD_TOOLS = ("gcc", "g++", "build-essential", "make ", "cargo", "rustc", "git ")


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args_of(self, keyword: str) -> list[str]:
        return [arg for kw, arg in self.instructions if kw == keyword]


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages, with line continuations joined."""
    logical: list[str] = []
    buffer = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not buffer and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            buffer += line[:-1] + " "
            continue
        logical.append(buffer + line)
        buffer = ""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = rest.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base=words[0], name=name))
        elif not stages:
            if keyword == "ARG":
                key, _, value = rest.partition("=")
                global_args[key.strip()] = value.strip()
        else:
            stages[-1].instructions.append((keyword, rest.strip()))
    return global_args, stages


def resolve(value: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m.group(1) or m.group(2)], value)


GLOBAL_ARGS, STAGES = parse((ROOT / "Dockerfile").read_text())
FINAL = STAGES[-1]


def test_multi_stage_with_named_builder() -> None:
    assert len(STAGES) >= 2
    assert STAGES[0].name == "builder"


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.name or s.base)
def test_base_image_is_pinned_exactly(stage: Stage) -> None:
    base = resolve(stage.base, GLOBAL_ARGS)
    assert PINNED_BASE.match(base), f"{base}: want python:3.11.<patch>-slim-bookworm"
    assert not base.endswith(":latest")


def test_final_stage_runs_as_a_numeric_non_root_user() -> None:
    users = FINAL.args_of("USER")
    assert users, "final stage sets no USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit()
    assert int(uid) != 0
    assert not gid or (gid.isdigit() and int(gid) != 0)


def test_final_stage_copies_only_the_virtualenv_from_the_builder() -> None:
    copies = FINAL.args_of("COPY")
    assert copies == ["--from=builder /opt/sparkllm /opt/sparkllm"]


def test_final_stage_installs_nothing_and_has_no_build_tools() -> None:
    for command in FINAL.args_of("RUN"):
        assert "pip" not in command
        assert "apt-get install" not in command
        assert not any(tool in command + " " for tool in BUILD_TOOLS), command


def test_builder_installs_with_the_shared_script_and_drops_pip() -> None:
    runs = " && ".join(STAGES[0].args_of("RUN"))
    assert f"bash {INSTALL_SCRIPT} /opt/sparkllm/bin/python" in runs
    assert "pip uninstall --yes pip" in runs
    script = (ROOT / INSTALL_SCRIPT).read_text()
    assert script.count("--no-cache-dir") >= 2  # no pip cache in any layer


def test_makefile_installs_with_the_same_script() -> None:
    """CI runs `make test`, whose virtualenv must come from the Dockerfile's install step."""
    makefile = (ROOT / "Makefile").read_text()
    assert INSTALL_SCRIPT in makefile, (
        "Makefile must build .venv with hack/install-python-deps.sh (see docs/install.md)"
    )


def test_entrypoint_is_the_sparkllm_cli_in_exec_form() -> None:
    assert FINAL.args_of("ENTRYPOINT") == ['["sparkllm"]']
    (cmd,) = FINAL.args_of("CMD")
    assert cmd.startswith('["run"')


def test_the_image_holds_operator_gateway_router_and_cli() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["sparkllm"] == "sparkllm.cli:main"
    pins = {re.split(r"[=<>~!]", d)[0]: d for d in project["dependencies"]}
    assert re.fullmatch(r"smg==[\d.]+", pins["smg"]), "the router wheel must be pinned"
    assert importlib.util.find_spec("sparkllm.gateway.__main__") is not None
    checks = " ".join(STAGES[0].args_of("RUN"))
    assert "sparkllm --help" in checks  # the builder proves both executables start
    assert "smg --help" in checks


def test_dockerignore_admits_exactly_what_the_builder_copies() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def included(path: str) -> bool:
        keep = True
        for pattern in patterns:
            negate = pattern.startswith("!")
            body = (pattern[1:] if negate else pattern).rstrip("/")
            if fnmatch.fnmatch(path, body) or fnmatch.fnmatch(path, body + "/*"):
                keep = negate
        return keep

    sources = [
        src
        for arg in STAGES[0].args_of("COPY")
        for src in shlex.split(arg)[:-1]
        if not src.startswith("--")
    ]
    assert sources
    for src in sources:
        assert included(src.rstrip("/")), f".dockerignore excludes {src}"
        assert (ROOT / src).exists(), src
    for secret_or_bulk in (".git", ".venv", "tests", ".ci", "charts"):
        assert not included(secret_or_bulk), f".dockerignore lets {secret_or_bulk} in"
