"""The engine launcher keeps the key out of a rank's log: tested against SGLang's own code.

SGLang 0.5.23 logs ``server_args={...}`` (the engine API key included) when a rank starts
(docs/gateway.md, "Engine key"); the operator's engine command,
``python3 -c ENGINE_LAUNCHER_CODE <args>``, filters that one line out. Which logger and
which message are read here from the pinned wheel's ``srt/entrypoints/engine.py`` (parsed,
not imported: the dev venv holds sglang without its dependencies), so a new pin that moves
the line or renames the logger fails here. The launcher code then runs for real, in a
subprocess, against a stub ``sglang`` package that logs the wheel's own statement after
``logging.basicConfig(force=True)`` as SGLang does — and, for contrast, through
``python3 -m sglang.launch_server``, which must show the key (else this test could not fail).
The launcher also takes the key from rank 0's environment into SGLang's argv, so it is on
no command line (issue 25): checked in the same run, from inside the stub.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from sparkllm.sglang_contract.command import (
    ENGINE_COMMAND,
    ENGINE_LAUNCHER_CODE,
    ENGINE_LOGGER,
    SERVER_ARGS_LOG_PREFIX,
    launched_args,
)
from sparkllm.sglang_contract.fields import ENGINE_API_KEY_ENV

KEY = "-k3y-f0r-the-l0g-test-0123456789abcdef"  # a leading "-", as a user's key may have
ARGS = ["--port", "30000"]
ENGINE_PY = Path("srt/entrypoints/engine.py")


def _wheel_root() -> Path:
    spec = importlib.util.find_spec("sglang")  # finds the package without importing it
    assert spec is not None
    assert spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations)))


def _server_args_log_calls(tree: ast.Module) -> list[tuple[str, ast.Call]]:
    """(enclosing function, call) for every ``<name>.<level>(f"server_args=…")``."""
    found: list[tuple[str, ast.Call]] = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef):
            continue
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.args
                and isinstance(node.args[0], ast.JoinedStr)
                and isinstance(head := node.args[0].values[0], ast.Constant)
                and str(head.value).startswith(SERVER_ARGS_LOG_PREFIX)
            ):
                found.append((function.name, node))
    return found


def _module_logger_name_expression(tree: ast.Module) -> str:
    """The argument of the module's ``logger = logging.getLogger(...)``."""
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and [ast.unparse(target) for target in node.targets] == ["logger"]
            and isinstance(node.value, ast.Call)
            and ast.unparse(node.value.func) == "logging.getLogger"
        ):
            return ast.unparse(node.value.args[0])
    raise AssertionError("no module-level logger in engine.py")


def _wheel_statement() -> str:
    """The wheel's ``server_args=`` log statement, as its source reads, checked first."""
    source = (_wheel_root() / ENGINE_PY).read_text("utf-8")
    tree = ast.parse(source)
    calls = _server_args_log_calls(tree)
    # Engine.__init__ (the offline API) and Engine._launch_subprocesses (the server's
    # main process, every rank): never a spawned scheduler or detokenizer
    assert sorted(name for name, _ in calls) == ["__init__", "_launch_subprocesses"]
    for _, call in calls:
        assert ast.unparse(call.func) == "logger.info"
    # logging.getLogger(__name__): the logger is named after the module's dotted path
    assert _module_logger_name_expression(tree) == "__name__"
    assert ".".join(("sglang", *ENGINE_PY.with_suffix("").parts)) == ENGINE_LOGGER
    segment = ast.get_source_segment(source, calls[0][1])
    assert segment is not None
    assert all(ast.get_source_segment(source, call) == segment for _, call in calls)
    return segment


def test_no_other_sglang_module_logs_server_args() -> None:
    root = _wheel_root()
    needles = (f'"{SERVER_ARGS_LOG_PREFIX}', f"'{SERVER_ARGS_LOG_PREFIX}")
    holders = sorted(
        path.relative_to(root).as_posix()
        for path in [root / "launch_server.py", *(root / "srt").rglob("*.py")]
        if any(needle in path.read_text("utf-8", errors="replace") for needle in needles)
    )
    assert holders == [ENGINE_PY.as_posix()]


def _stub_sglang(root: Path, statement: str) -> None:
    """A ``sglang`` whose engine module logs ``statement`` as the wheel's does."""
    package = root / "sglang"
    (package / ENGINE_PY.parent).mkdir(parents=True)
    for folder in (package, package / "srt", package / ENGINE_PY.parent):
        (folder / "__init__.py").write_text("")
    (package / ENGINE_PY).write_text(
        "import logging\n"
        "logger = logging.getLogger(__name__)\n"
        "def _server_args_for_logging(server_args):\n"
        "    return {'api_key': server_args['api_key'], 'port': 30000}\n"
        "def start(server_args):\n"
        f"    {statement}\n"
        "    logger.info('Init torch distributed begin.')\n"
    )
    (package / "launch_server.py").write_text(
        "import json, logging, multiprocessing, os, sys\n"
        "from sglang.srt.entrypoints import engine\n"
        "def child():\n"
        "    logging.basicConfig(level=logging.INFO, force=True)\n"
        "    logging.getLogger('scheduler').info('spawned child ran')\n"
        f"    print('child env has key', {ENGINE_API_KEY_ENV!r} in os.environ, flush=True)\n"
        "if __name__ == '__main__':\n"
        "    logging.basicConfig(level=logging.INFO, format='[%(asctime)s] %(message)s',\n"
        "                        force=True)\n"
        "    key = next(a.split('=', 1)[1] for a in sys.argv if a.startswith('--api-key='))\n"
        "    with open('/proc/self/cmdline', 'rb') as cmdline:\n"
        "        in_cmdline = key.encode() in cmdline.read()\n"
        "    facts = {'argv': sys.argv[1:], 'cmdline_has_key': in_cmdline,\n"
        f"             'env_has_key': {ENGINE_API_KEY_ENV!r} in os.environ}}\n"
        "    print('facts', json.dumps(facts).replace(key, '<key>'), flush=True)\n"
        "    engine.start({'api_key': key})\n"
        "    process = multiprocessing.get_context('spawn').Process(target=child)\n"
        "    process.start()\n"
        "    process.join()\n"
        "    sys.exit(process.exitcode)\n"
    )


def _run(root: Path, launcher: list[str], args: list[str], **env_extra: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(root), **env_extra}
    done = subprocess.run(
        [sys.executable, *launcher, *args],
        cwd=root, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return output


def _facts(output: str) -> dict[str, Any]:
    line = next(line for line in output.splitlines() if line.startswith("facts "))
    facts: dict[str, Any] = json.loads(line.removeprefix("facts "))
    return facts


def test_the_launcher_drops_the_server_args_line_and_keeps_the_rest(tmp_path: Path) -> None:
    assert ENGINE_COMMAND == ("python3", "-c", ENGINE_LAUNCHER_CODE)
    _stub_sglang(tmp_path, _wheel_statement())
    filtered = _run(tmp_path, ["-c", ENGINE_LAUNCHER_CODE], ARGS, **{ENGINE_API_KEY_ENV: KEY})
    assert KEY not in filtered
    assert SERVER_ARGS_LOG_PREFIX not in filtered
    assert "Init torch distributed begin." in filtered  # the same logger's other INFO line
    assert "spawned child ran" in filtered  # multiprocessing spawn re-imports it as -m would
    # the same key goes the other way: -m with the key on its command line logs it
    unfiltered = _run(tmp_path, ["-m", "sglang.launch_server"], [*ARGS, f"--api-key={KEY}"])
    assert f"{SERVER_ARGS_LOG_PREFIX}{{'api_key': '{KEY}'" in unfiltered
    assert "Init torch distributed begin." in unfiltered


def test_the_launcher_adds_the_key_inside_the_process_only(tmp_path: Path) -> None:
    """Issue 25: the engine key is in SGLang's argv (as one word: it starts with "-")
    but not in the process's command line the kernel shows (/proc/<pid>/cmdline, ps),
    not left in its environment, not inherited by the processes SGLang spawns; and the
    argv is what ``launched_args`` (the simulator's twin of this step) says."""
    _stub_sglang(tmp_path, _wheel_statement())
    output = _run(tmp_path, ["-c", ENGINE_LAUNCHER_CODE], ARGS, **{ENGINE_API_KEY_ENV: KEY})
    facts = _facts(output)
    expected = launched_args(ARGS, {ENGINE_API_KEY_ENV: KEY})
    assert facts["argv"] == [word.replace(KEY, "<key>") for word in expected]
    assert facts["argv"][-1] == "--api-key=<key>"
    assert facts["cmdline_has_key"] is False
    assert facts["env_has_key"] is False
    assert "child env has key False" in output
    # the contrast: the key on the command line, as $(VAR) expansion put it before
    shown = _run(tmp_path, ["-m", "sglang.launch_server"], [*ARGS, f"--api-key={KEY}"])
    assert _facts(shown)["cmdline_has_key"] is True
