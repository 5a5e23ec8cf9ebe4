"""Run the preflight's collective across local processes with the Gloo backend.

Why: the bandwidth preflight (``sparkllm.preflight.bandwidth``) runs on the nodes with
torch.distributed and NCCL from the engine image. Here the very same module runs as
``ranks`` local processes rendezvousing over loopback with Gloo, so its real code path
(process group, buffers, timing, bus bandwidth, finding, exit code) is exercised without
GPUs. It needs a Python with torch: the dev venv has none (the x86_64 PyPI wheel pulls
~5 GB of CUDA packages), so the interpreter is passed in, e.g. a venv made with
``pip install torch`` on PyPI.

    python -m sparkllm_dev.gloo_bandwidth /path/to/torch-venv/bin/python [--op all_gather]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

OPERATOR_ROOT = Path(__file__).resolve().parents[2] / "operator"


@dataclass(frozen=True)
class GlooRun:
    """Each rank's exit code, and rank 0's output (the table and the finding)."""

    exit_codes: tuple[int, ...]
    output: str


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_gloo(
    python: str, *, ranks: int = 3, args: Sequence[str] = (), timeout: float = 600
) -> GlooRun:
    """Start ``ranks`` processes of the bandwidth module and wait for all of them."""
    port = _free_port()
    procs = []
    for rank in range(ranks):
        env = dict(os.environ)
        env.update(
            RANK=str(rank),
            WORLD_SIZE=str(ranks),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            PYTHONPATH=str(OPERATOR_ROOT),
        )
        command = [python, "-m", "sparkllm.preflight.bandwidth", "--backend", "gloo", *args]
        procs.append(
            subprocess.Popen(
                command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    outputs = [proc.communicate(timeout=timeout)[0] for proc in procs]
    return GlooRun(exit_codes=tuple(proc.returncode for proc in procs), output=outputs[0])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("python", help="an interpreter with torch")
    parser.add_argument("--ranks", type=int, default=3)
    parsed, rest = parser.parse_known_args(argv)
    run = run_gloo(parsed.python, ranks=parsed.ranks, args=rest)
    print(run.output, end="")
    print(f"exit codes: {list(run.exit_codes)}")
    return max(run.exit_codes)


if __name__ == "__main__":
    sys.exit(main())
