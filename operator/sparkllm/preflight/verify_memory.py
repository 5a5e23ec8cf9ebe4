"""``sparkllm verify-memory``: the memory preflight as a rank's last init container.

Why the last one: free memory is a fact of the moment, so it is read right before the
engine starts (after the model check and the launch check, which take their time), on
the rank's node, from the host's /proc. Like ``verify-network`` it leaves its findings in
the termination message (JSON, :func:`sparkllm.preflight.findings.to_json`), which the
operator reads into ``MemoryVerified`` and ``status.memory``; with ``--gate`` an error
exits 1, so the kubelet keeps the engine from starting.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from sparkllm.cli_args import add_options, from_namespace
from sparkllm.preflight.args import VerifyMemoryArgs
from sparkllm.preflight.host import HostView
from sparkllm.preflight.memory import RUNTIME_RESERVE_GB, MemoryNeed, check_memory_available
from sparkllm.preflight.verify import finish


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add verify-memory's options to ``parser`` (for the ``sparkllm`` CLI)."""
    add_options(parser, VerifyMemoryArgs)


def run(namespace: argparse.Namespace) -> int:
    """Read the host's meminfo and memory pressure, print each finding; the exit status."""
    args = from_namespace(VerifyMemoryArgs, namespace)
    node = args.node or os.environ.get("NODE_NAME") or "unknown"
    need = None
    if args.weights_gb is not None:
        reserve = RUNTIME_RESERVE_GB if args.reserve_gb is None else args.reserve_gb
        need = MemoryNeed(args.rank, args.weights_gb, args.kv_pool_gb, reserve)
    host = HostView(sys=Path("/sys"), proc=args.proc_dir, etc=Path("/etc"))  # /proc only
    findings = check_memory_available(
        host.text("proc/meminfo"), host.text("proc/pressure/memory"), node=node, need=need
    )
    return finish(findings, command="verify-memory", log=args.termination_log, gate=args.gate)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sparkllm verify-memory")
    configure_parser(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
