"""The launch check as the dev cluster runs it: the operator's program, the pinned wheel's SGLang.

``python -m sparkllm_dev.sim.launch_check ARGS`` runs the operator's own
``LAUNCH_CHECK_CODE`` (the very string the init container runs in the engine image) with
``sys.argv[1:] = ARGS``, against the SGLang 0.5.23 wheel the dev virtualenv holds. Why a
runner: the dev venv installs that wheel without its dependencies (torch, CUDA and the
like), and ``sglang.srt.server_args`` imports a few of them at module level for code paths
the parser never takes: they are the tests' stand-ins (``sparkllm_dev.sglang_stubs``, the
same the request-handling reference uses); everything SGLang's parser and its
``ServerArgs`` record do runs for real (``msgspec`` is installed for it).

Cost (``make test``'s cluster half runs it 268 times, one process per rank start; CPU by
``/usr/bin/time -f %U+%S`` on the loaded 2-core machine): 1.6 s a run while the package
``sparkllm_dev.sim`` imported the whole simulator (uvicorn, the app, ``sparkllm.api``);
~0.9 s now that it imports nothing (PEP 562), most of it SGLang's own import of
``sglang.srt.server_args``. A run whose inputs a recorded run had is replayed instead
(``launch_cache``: the program, argv, the image facts, the wheel, every environment
variable read; exit code, streams and termination file identical): ~0.27 s. Set
``SPARKLLM_SIM_LAUNCH_CHECK_CACHE`` (the dev cluster does) to use it; unset, every run is
fresh.

What the simulated node's image is (the fault injector's ``skew_image`` writes it):
``image_facts`` reads ``<node root>/var/lib/sparkllm-sim/engine-image.json``
(``{"version": ..., "digest": ..., "without": [flags]}``); a ``version`` there is what this
image's SGLang reports instead of the wheel's (``SPARKLLM_SIM_SGLANG_VERSION``), a
``digest`` the image ID the kubelet shows for the pod's containers (``kubelet.image_id``),
``without`` flags this older SGLang does not know (``SPARKLLM_SIM_SGLANG_WITHOUT``: the
wheel's parser with those options taken out, so refusing them is argparse's own
"unrecognized arguments").
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import io
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from sparkllm.sglang_contract.launch_check import TERMINATION_LOG_ENV
from sparkllm_dev import sglang_stubs
from sparkllm_dev.sglang_stubs import StubFinder, stand_in_orjson
from sparkllm_dev.sim import launch_cache

SIM_VERSION_ENV: Final = "SPARKLLM_SIM_SGLANG_VERSION"
SIM_WITHOUT_ENV: Final = "SPARKLLM_SIM_SGLANG_WITHOUT"  # comma-separated flags it lacks
JSON = dict[str, Any]
IMAGE_FACTS_PATH: Final = "var/lib/sparkllm-sim/engine-image.json"
# Kept real under the stand-ins: ServerArgs is a msgspec Struct; the --tool-call-parser
# choices come from parser_names (a namespace package: its parent must be real too).
REAL_MODULES: Final = frozenset(
    {"msgspec", "sglang.srt.function_call", "sglang.srt.function_call.parser_names"}
)


def image_facts(node_root: Path) -> dict[str, str]:
    """The simulated node's image (version/digest overrides); empty when none is set."""
    try:
        data = json.loads((node_root / IMAGE_FACTS_PATH).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    facts = {k: str(v) for k, v in data.items() if k in {"version", "digest"} and v}
    without = data.get("without") or []
    if isinstance(without, list) and without:
        facts["without"] = ",".join(str(flag) for flag in without)
    return facts


def _versioned(real: Callable[[str], str], sim: str) -> Callable[[str], str]:
    def version(name: str) -> str:
        return sim if name.lower() == "sglang" else real(name)

    return version


def _install(environ: Mapping[str, str]) -> None:
    """The stand-ins, and the simulated image's version when one is set."""
    sys.meta_path.insert(0, StubFinder(exclude=REAL_MODULES))
    sys.modules.setdefault("orjson", stand_in_orjson())
    sim_version = environ.get(SIM_VERSION_ENV)
    if sim_version:
        importlib.metadata.version = _versioned(importlib.metadata.version, sim_version)  # type: ignore[assignment]
    without = [flag for flag in environ.get(SIM_WITHOUT_ENV, "").split(",") if flag]
    if without:
        _drop_flags(without)


def _drop_flags(flags: Sequence[str]) -> None:
    """Make the wheel's parser an older SGLang's that lacks ``flags`` (every spelling of
    each): ``ServerArgs.add_cli_args`` registers them, then they are taken out again."""
    from sglang.srt.server_args import ServerArgs  # type: ignore[import-untyped]

    register = ServerArgs.add_cli_args

    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        register(parser)
        for flag in flags:
            action = parser._option_string_actions.get(flag)
            if action is None:
                continue
            parser._remove_action(action)
            for spelling in action.option_strings:
                parser._option_string_actions.pop(spelling, None)

    ServerArgs.add_cli_args = staticmethod(add_cli_args)


def _exec(argv: Sequence[str]) -> int:
    """Run the operator's program once on ``argv``; its exit code."""
    from sparkllm.sglang_contract.launch_check import LAUNCH_CHECK_CODE

    sys.argv = ["-c", *argv]
    try:
        exec(compile(LAUNCH_CHECK_CODE, "<launch-check>", "exec"), {"__name__": "__main__"})
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def run(argv: Sequence[str], environ: Mapping[str, str]) -> int:
    """Run the operator's launch-check program on ``argv`` as the init container would;
    replayed from the cache (``launch_cache``) when ``SPARKLLM_SIM_LAUNCH_CHECK_CACHE``
    names one and it recorded a run with the same inputs."""

    def check() -> int:
        _install(environ)
        return _exec(argv)

    directory = environ.get(launch_cache.CACHE_DIR_ENV)
    if not directory:
        return check()
    sources = [Path(__file__), Path(sglang_stubs.__file__)]
    return launch_cache.cached_run(argv, Path(directory), check=check, sources=sources)


def check_many(argvs: Sequence[Sequence[str]], *, scratch: Path) -> list[tuple[int, JSON]]:
    """(exit code, JSON result) of the program for each command line, in one process
    (SGLang imported once): for tests. Call it in a process of its own (stand-ins stay)."""
    _install(os.environ)
    results = []
    for index, argv in enumerate(argvs):
        log = scratch / f"termination-{index}"
        os.environ[TERMINATION_LOG_ENV] = str(log)
        with contextlib.redirect_stdout(io.StringIO()):
            code = _exec(argv)
        results.append((code, json.loads(log.read_text())))
    return results


if __name__ == "__main__":
    raise SystemExit(run(sys.argv[1:], os.environ))
