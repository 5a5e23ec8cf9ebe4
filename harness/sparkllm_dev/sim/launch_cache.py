"""The launch check's result cache: a check whose inputs are all unchanged is replayed.

Why: the dev cluster runs the launch check once per rank start (268 runs in ``make
test``'s cluster half, ~0.9 s of CPU each even with only the stand-ins and SGLang's
parser imported), mostly on the same few command lines. The check is a pure function of
its inputs, so replaying a recorded run IS the check, provided the key holds every input:

* the program (``LAUNCH_CHECK_CODE``) and ``argv``;
* the simulated image of the node: the version and the flags it lacks, as the harness
  passes them (``SPARKLLM_SIM_SGLANG_VERSION``/``_WITHOUT``; the image's digest changes
  nothing the check sees, and a pod pinned by digest gets no facts at all);
* the wheel: the sha256 of the installed sglang's ``RECORD`` (every file's hash, the
  version with it), of this runner and of the stand-ins (``sglang_stubs``), the
  interpreter's version and warning options (``PYTHONWARNINGS``);
* every environment variable the run READ (SGLang's parser reads ``SGLANG_*`` defaults):
  they are recorded (their values before the run) by a tracking ``os.environ`` and stored
  with the entry; a hit needs each to have the same value (or be absent again). A run that
  iterates the environment depends on every name in it: SGLang 0.5.23's
  ``sglang.srt.environ`` does (it rewrites legacy ``SGL_*`` names at import), so in
  practice the entry holds the whole environment and a hit needs it identical. The
  termination-log path and the cache's own variable say where, not what: the recorded
  text is written to the current termination file.

Replayed exactly: the exit code, stdout, stderr and the termination file's content. The
entries live in the dev cluster's state dir, per profile (``<state dir>/launch-check-cache``,
set by ``devcluster/launch_step.py``); delete the directory to start cold.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import io
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TextIO

from sparkllm.sglang_contract.launch_check import LAUNCH_CHECK_CODE, TERMINATION_LOG_ENV

CACHE_DIR_ENV: Final = "SPARKLLM_SIM_LAUNCH_CHECK_CACHE"
IGNORED: Final = frozenset({TERMINATION_LOG_ENV, CACHE_DIR_ENV})  # where, not what
KEY_ENV: Final = ("SPARKLLM_SIM_SGLANG_VERSION", "SPARKLLM_SIM_SGLANG_WITHOUT", "PYTHONWARNINGS")


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one run of the check left: exit code, streams, termination text (None: none)."""

    code: int
    stdout: str
    stderr: str
    termination: str | None


class ReadTracker(MutableMapping[str, str]):
    """``os.environ`` as the check sees it, noting every name it reads (and iteration)."""

    def __init__(self, real: MutableMapping[str, str], *, ignore: frozenset[str]) -> None:
        self.real = real
        self.before = {k: v for k, v in real.items() if k not in ignore}  # the run's input
        self.read: dict[str, str | None] = {}
        self.iterated = False
        self._ignore = ignore

    def inputs(self) -> tuple[bool, dict[str, str | None]]:
        """(whole environment?, the variables the result depends on, as they were before)."""
        if self.iterated:  # the names present are an input too: all of it, then
            return True, dict(self.before)
        return False, dict(self.read)

    def __getitem__(self, name: str) -> str:
        value = self.real.get(name)
        if name not in self._ignore:
            self.read.setdefault(name, self.before.get(name))
        if value is None:
            raise KeyError(name)
        return value

    def __setitem__(self, name: str, value: str) -> None:
        self.real[name] = value

    def __delitem__(self, name: str) -> None:
        del self.real[name]

    def __iter__(self) -> Iterator[str]:
        self.iterated = True
        return iter(self.real)

    def __len__(self) -> int:
        self.iterated = True
        return len(self.real)

    def copy(self) -> dict[str, str]:
        self.iterated = True
        return dict(self.real)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def key(argv: Sequence[str], environ: Mapping[str, str], *, sources: Sequence[Path]) -> str:
    """The hash of every input but the environment variables the run reads."""
    try:
        wheel = _sha((importlib.metadata.distribution("sglang").read_text("RECORD") or "").encode())
    except importlib.metadata.PackageNotFoundError:
        wheel = "none"
    parts = {
        "code": LAUNCH_CHECK_CODE,
        "argv": list(argv),
        "env": {name: environ.get(name) for name in KEY_ENV},
        "wheel": wheel,
        "sources": [_sha(path.read_bytes()) for path in sources],
        "python": [sys.version, sys.warnoptions],
    }
    return _sha(json.dumps(parts, sort_keys=True).encode())


def lookup(directory: Path, digest: str, environ: Mapping[str, str]) -> Outcome | None:
    """The recorded outcome when every variable the recorded run read has its value now."""
    try:
        entry = json.loads((directory / f"{digest}.json").read_text())
        if any(environ.get(name) != value for name, value in entry["read"].items()):
            return None
        if entry["whole"] and set(environ) - IGNORED != set(entry["read"]):
            return None
        return Outcome(entry["code"], entry["stdout"], entry["stderr"], entry["termination"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store(directory: Path, digest: str, outcome: Outcome, tracker: ReadTracker) -> None:
    """Record an outcome (written whole, then renamed: concurrent ranks see all or nothing)."""
    directory.mkdir(parents=True, exist_ok=True)
    whole, read = tracker.inputs()
    entry = {
        "whole": whole,
        "read": read,
        "code": outcome.code,
        "stdout": outcome.stdout,
        "stderr": outcome.stderr,
        "termination": outcome.termination,
    }
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{digest}.")
    with os.fdopen(fd, "w") as f:
        json.dump(entry, f)
    os.replace(tmp, directory / f"{digest}.json")


def replay(outcome: Outcome, environ: Mapping[str, str]) -> int:
    """Give back what the recorded run gave: termination file, streams, exit code."""
    if outcome.termination is not None:
        with contextlib.suppress(OSError):
            Path(environ.get(TERMINATION_LOG_ENV, "/dev/termination-log")).write_text(
                outcome.termination
            )
    sys.stdout.write(outcome.stdout)
    sys.stderr.write(outcome.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    return outcome.code


class _Tee(io.TextIOBase):
    """Writes to the real stream and keeps a copy."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.copy = io.StringIO()

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


def cached_run(
    argv: Sequence[str],
    directory: Path,
    *,
    check: Callable[[], int],
    sources: Sequence[Path],
) -> int:
    """``check()`` replayed from ``directory`` when recorded with the same inputs, else run
    (with a tracking ``os.environ``) and recorded."""
    real = os.environ
    digest = key(argv, real, sources=sources)
    found = lookup(directory, digest, real)
    if found is not None:
        return replay(found, real)
    tracker = ReadTracker(real, ignore=IGNORED)
    out, err = _Tee(sys.stdout), _Tee(sys.stderr)
    setattr(os, "environ", tracker)  # os.getenv reads it too; not a change of environment  # noqa: B010
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = check()
    finally:
        setattr(os, "environ", real)  # noqa: B010
    log = Path(real.get(TERMINATION_LOG_ENV, "/dev/termination-log"))
    try:
        termination: str | None = log.read_text()
    except OSError:
        termination = None
    outcome = Outcome(code, out.copy.getvalue(), err.copy.getvalue(), termination)
    with contextlib.suppress(OSError):
        store(directory, digest, outcome, tracker)
    return code
