"""The launch check's cache replays a run only when every input is the same (launch_cache)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from sparkllm.sglang_contract.launch_check import TERMINATION_LOG_ENV
from sparkllm_dev.sim import launch_cache

ARGV = ["--model-path", "/models/m", "--pp-size", "2"]


class Check:
    """A stand-in check: reads SGLANG_X (and iterates the environment when asked)."""

    def __init__(self, *, iterate: bool = False) -> None:
        self.calls = 0
        self.iterate = iterate

    def __call__(self) -> int:
        self.calls += 1
        if self.iterate:
            _ = [k for k in os.environ if k.startswith("SGL_")]
        value = os.environ.get("SGLANG_X", "unset")
        Path(os.environ[TERMINATION_LOG_ENV]).write_text(f'{{"x": "{value}"}}')
        print(f"out {value}")
        print(f"err {value}", file=sys.stderr)
        return 1 if value == "refuse" else 0


def _run(check: Check, cache: Path, argv: list[str] = ARGV) -> int:
    return launch_cache.cached_run(argv, cache, check=check, sources=[Path(__file__)])


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(TERMINATION_LOG_ENV, str(tmp_path / "termination"))
    monkeypatch.delenv("SGLANG_X", raising=False)
    monkeypatch.delenv(launch_cache.KEY_ENV[0], raising=False)
    return tmp_path / "termination"


def test_a_second_run_is_replayed_exactly(
    env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SGLANG_X", "refuse")
    check = Check()
    assert _run(check, tmp_path / "cache") == 1
    first = (capfd.readouterr(), env.read_text())
    monkeypatch.setenv(TERMINATION_LOG_ENV, str(tmp_path / "elsewhere"))  # where, not what
    assert _run(check, tmp_path / "cache") == 1
    assert check.calls == 1
    assert (capfd.readouterr(), (tmp_path / "elsewhere").read_text()) == first
    assert (first[0].out, first[0].err) == ("out refuse\n", "err refuse\n")


def test_a_read_variable_argv_or_image_version_changed_runs_again(
    env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    check = Check()
    cache = tmp_path / "cache"
    assert _run(check, cache) == 0
    monkeypatch.setenv("SGLANG_X", "refuse")  # was absent: the run read it
    assert _run(check, cache) == 1
    assert _run(check, cache, [*ARGV, "--tp-size", "2"]) == 1
    monkeypatch.setenv(launch_cache.KEY_ENV[0], "0.5.22")
    assert _run(check, cache) == 1
    assert check.calls == 4
    monkeypatch.setenv("UNREAD", "1")  # never read, environment never iterated: a hit
    assert _run(check, cache) == 1
    assert check.calls == 4


def test_a_run_that_iterated_the_environment_needs_all_of_it_unchanged(
    env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    check = Check(iterate=True)
    cache = tmp_path / "cache"
    _run(check, cache)
    _run(check, cache)
    assert check.calls == 1
    monkeypatch.setenv("SGL_NEW", "1")
    _run(check, cache)
    assert check.calls == 2
