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
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from sparkllm.sglang_contract.command import (
    ENGINE_COMMAND,
    ENGINE_LAUNCHER_CODE,
    ENGINE_LOGGER,
    SERVER_ARGS_LOG_PREFIX,
)

KEY = "k3y-f0r-the-l0g-test-0123456789abcdef"
ARGS = [f"--api-key={KEY}", "--port", "30000"]
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
        "import logging, multiprocessing, sys\n"
        "from sglang.srt.entrypoints import engine\n"
        "def child():\n"
        "    logging.basicConfig(level=logging.INFO, force=True)\n"
        "    logging.getLogger('scheduler').info('spawned child ran')\n"
        "if __name__ == '__main__':\n"
        "    logging.basicConfig(level=logging.INFO, format='[%(asctime)s] %(message)s',\n"
        "                        force=True)\n"
        "    print('argv', [a.split('=')[0] for a in sys.argv[1:]], flush=True)\n"
        "    key = next(a.split('=', 1)[1] for a in sys.argv if a.startswith('--api-key='))\n"
        "    engine.start({'api_key': key})\n"
        "    process = multiprocessing.get_context('spawn').Process(target=child)\n"
        "    process.start()\n"
        "    process.join()\n"
        "    sys.exit(process.exitcode)\n"
    )


def _run(root: Path, launcher: list[str]) -> str:
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, *launcher, *ARGS],
        cwd=root, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return output


def test_the_launcher_drops_the_server_args_line_and_keeps_the_rest(tmp_path: Path) -> None:
    assert ENGINE_COMMAND == ("python3", "-c", ENGINE_LAUNCHER_CODE)
    _stub_sglang(tmp_path, _wheel_statement())
    filtered = _run(tmp_path, ["-c", ENGINE_LAUNCHER_CODE])
    assert KEY not in filtered
    assert SERVER_ARGS_LOG_PREFIX not in filtered
    assert "Init torch distributed begin." in filtered  # the same logger's other INFO line
    # SGLang reads the same args as under -m (the key's value printed by the log line only)
    assert f"argv {[arg.split('=')[0] for arg in ARGS]!r}" in filtered
    assert "spawned child ran" in filtered  # multiprocessing spawn re-imports it as -m would
    unfiltered = _run(tmp_path, ["-m", "sglang.launch_server"])
    assert f"{SERVER_ARGS_LOG_PREFIX}{{'api_key': '{KEY}'" in unfiltered
    assert "Init torch distributed begin." in unfiltered
