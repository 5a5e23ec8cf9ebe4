"""Run the preflight's collective across local processes with the Gloo backend.

Why: the bandwidth preflight (``sparkllm.preflight.bandwidth``) runs on the nodes with
torch.distributed and NCCL from the engine image. Here the very same module runs as
``ranks`` local processes rendezvousing over loopback with Gloo, so its real code path
(process group, buffers, timing, the ranks' agreement on the slowest time, bus
bandwidth, finding, termination message, exit code) is exercised without GPUs. It needs
a Python with torch: the dev venv has none, so ``hack/setup-torch.sh`` (run by ``make
test``) makes a separate cached venv, :func:`torch_python` finds it.

    python -m sparkllm_dev.gloo_bandwidth [--python /path/to/python] [--op all_gather]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sparkllm.preflight.bandwidth import BandwidthResult, result_from_json
from sparkllm_dev.devcluster.paths import cache_root

REPO_ROOT = Path(__file__).resolve().parents[2]
OPERATOR_ROOT = REPO_ROOT / "operator"
TORCH_REQUIREMENTS = REPO_ROOT / "hack" / "torch-requirements.txt"
TORCH_SETUP = "run `bash hack/setup-torch.sh` (`make test` does)"


def torch_venv() -> Path:
    """Where hack/setup-torch.sh puts the venv for the pinned requirements (its key)."""
    lines = TORCH_REQUIREMENTS.read_text(encoding="utf-8").splitlines(keepends=True)
    key = hashlib.sha256("".join(x for x in lines if not x.startswith("#")).encode())
    return cache_root() / "torch-venv" / key.hexdigest()[:12]


def torch_python() -> Path | None:
    """The torch venv's interpreter once the set-up finished; None before."""
    venv = torch_venv()
    return venv / "bin" / "python" if (venv / ".complete").is_file() else None


@dataclass(frozen=True)
class GlooRun:
    """Each rank's exit code and termination message, and rank 0's output."""

    exit_codes: tuple[int, ...]
    output: str
    results: tuple[BandwidthResult | None, ...]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_gloo(
    python: str,
    *,
    ranks: int = 3,
    args: Sequence[str] = (),
    started: int | None = None,
    timeout: float = 600,
) -> GlooRun:
    """Start the bandwidth module as ranks 0 to ``started`` - 1 (default all) of a group of
    ``ranks``, and wait for all of them (fewer started: a peer that never comes)."""
    port = free_port()
    procs = []
    with tempfile.TemporaryDirectory(prefix="sparkllm-gloo-") as scratch:
        count = ranks if started is None else started
        logs = [Path(scratch) / f"rank-{rank}.json" for rank in range(count)]
        for rank in range(count):
            env = dict(os.environ)
            env.update(
                RANK=str(rank),
                WORLD_SIZE=str(ranks),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                GLOO_SOCKET_IFNAME="lo",
                PYTHONPATH=str(OPERATOR_ROOT),
                PYTHONWARNINGS="ignore",  # torch warns that numpy is absent (not needed)
            )
            command = [python, "-m", "sparkllm.preflight.bandwidth", "--backend", "gloo"]
            command += [*args, "--termination-log", str(logs[rank])]
            procs.append(
                subprocess.Popen(
                    command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
                )
            )
        outputs = [proc.communicate(timeout=timeout)[0] for proc in procs]
        results = tuple(
            result_from_json(log.read_text(encoding="utf-8")) if log.is_file() else None
            for log in logs
        )
    return GlooRun(
        exit_codes=tuple(proc.returncode for proc in procs), output=outputs[0], results=results
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--python", default=None, help="an interpreter with torch")
    parser.add_argument("--ranks", type=int, default=3)
    parsed, rest = parser.parse_known_args(argv)
    python = parsed.python or torch_python()
    if python is None:
        print(f"no torch venv at {torch_venv()}: {TORCH_SETUP}", file=sys.stderr)
        return 2
    run = run_gloo(str(python), ranks=parsed.ranks, args=rest)
    print(run.output, end="")
    print(f"exit codes: {list(run.exit_codes)}")
    return max(run.exit_codes)


if __name__ == "__main__":
    sys.exit(main())
