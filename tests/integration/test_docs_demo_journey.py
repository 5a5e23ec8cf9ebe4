r"""The docs' demo journey, run as written: ``make demo``'s setup on a dev cluster of its own,
then README's benchmark and acceptance blocks and their counterparts in
docs/benchmarks.md and docs/proof-of-service.md, each block's commands verbatim, each
shown output compared (tests/unit/test_docs_blocks.output_matches; ages, ports, times,
figures and paths are the placeholders it normalises below).

Opt-in (``<!-- demo -->`` blocks): it runs the whole demo — control plane, operator, engine,
gateway and Job harnesses, the sample to Ready, a benchmark and the acceptance checklist —
81 s measured from a cold start (1 passed in 78.67s), and it must own its cluster (the
demo takes node group a and installs the administrator's policy), so ``make test``'s
shared cluster cannot host it:

    SPARKLLM_DOCS_DEMO=1 SPARKLLM_DEVCLUSTER=test4 .venv/bin/pytest \
        tests/integration/test_docs_demo_journey.py

It starts ``sparkllm-dev --cluster <profile> demo`` and ends with ``... demo down`` (the
profile's control plane included).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator

import pytest

from tests.unit.test_docs_blocks import BLOCKS, ROOT, Block, following, output_matches

PROFILE = os.environ.get("SPARKLLM_DEVCLUSTER", "")
pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(
        not os.environ.get("SPARKLLM_DOCS_DEMO") or PROFILE in ("", "demo"),
        reason="opt-in: SPARKLLM_DOCS_DEMO=1 and a test profile (not demo) in SPARKLLM_DEVCLUSTER",
    ),
]
DEMO_BLOCKS = [block for block in BLOCKS if block.kind == "demo"]
DEV = str(ROOT / ".venv" / "bin" / "sparkllm-dev")


def normalised(text: str) -> str:
    """The placeholders of a demo run: event ages, ports, timestamps, decimal figures and
    the cache's per-profile paths."""
    text = re.sub(r"^\d+s(\s)", r"Ns\1", text, flags=re.M)  # kubectl's LAST SEEN
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", text)
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "TIME", text)
    text = re.sub(r"\d+\.\d+", "X", text)
    return re.sub(r"devcluster[-\w]*/hosts/spark-\w+", "devcluster/hosts/NODE", text)


@pytest.fixture(scope="module")
def demo() -> Iterator[dict[str, str]]:
    """The demo up on PROFILE; the environment its printed lines set (KUBECONFIG, PATH,
    the front door's URL as PORT's value)."""
    up = subprocess.run(
        [DEV, "--cluster", PROFILE, "demo"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    try:
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        status = subprocess.run(
            [DEV, "--cluster", PROFILE, "status"], capture_output=True, text=True, check=True
        ).stdout
        env = dict(os.environ)
        for name in ("KUBECONFIG", "PATH"):
            (value,) = re.findall(rf"^export {name}=(\S+)", status, re.M)
            env[name] = value.replace("$PATH", env["PATH"])
        (url,) = re.findall(r"^# front door: (http://127\.0\.0\.1:\d+) ", status, re.M)
        env["FRONT_DOOR"] = url
        yield env
    finally:
        subprocess.run([DEV, "--cluster", PROFILE, "demo", "down"], timeout=300, check=False)


def run(command: str, env: dict[str, str]) -> str:
    text = command.replace("http://127.0.0.1:PORT", env["FRONT_DOOR"])
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", text],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def run_block(block: Block, env: dict[str, str]) -> str:
    """The block's commands in one shell, as a reader pastes them (an export reaches the
    next line; a block that starts a run waits for its answer itself: its ``until`` line)."""
    return run(block.text, env)


def block_output(block: Block) -> str:
    shown = following(block)
    return shown.text if shown is not None and shown.kind == "output-of-previous" else ""


def test_the_demo_blocks_print_what_the_docs_show(demo: dict[str, str]) -> None:
    assert DEMO_BLOCKS, "no <!-- demo --> blocks"
    problems = []
    for block in DEMO_BLOCKS:
        printed = run_block(block, demo)
        shown = block_output(block)
        if shown and not output_matches(normalised(shown), normalised(printed)):
            problems.append(f"{block.where} printed:\n{printed}\nnot what it shows:\n{shown}")
    assert not problems, "\n\n".join(problems)
