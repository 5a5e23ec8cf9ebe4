"""``sparkllm verify-network``: the per-node preflight as a rank's init container.

Why an init container: it runs on the rank's node, in the host network namespace the
engine will use, with the engine's environment (NCCL_*, SGLANG_HOST_IP), before the
engine starts. Like ``verify-model`` it leaves its result in the termination message
(JSON findings, :func:`sparkllm.preflight.findings.to_json`), which the operator reads
to set ``NetworkVerified``. With ``--gate`` an error exits 1, so the kubelet keeps the
engine from starting; without it the container always exits 0 and only reports.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from sparkllm.cli_args import add_options, from_namespace
from sparkllm.integrity.verify import write_termination_message
from sparkllm.preflight.args import VerifyNetworkArgs
from sparkllm.preflight.checks import NodeExpectations, check_node
from sparkllm.preflight.findings import Check, Finding, Severity, failed, to_json
from sparkllm.preflight.host import HostView


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add verify-network's options to ``parser`` (for the ``sparkllm`` CLI)."""
    add_options(parser, VerifyNetworkArgs)


# What ``python -m sparkllm.preflight.bandwidth`` imports: the package and its
# stdlib-only modules (verify.py, this CLI, needs more and is left out).
SHIPPED: tuple[str, ...] = (
    "sparkllm/__init__.py",
    "sparkllm/cli_args.py",
    "sparkllm/preflight/__init__.py",
    "sparkllm/preflight/bandwidth.py",
    "sparkllm/preflight/checks.py",
    "sparkllm/preflight/findings.py",
    "sparkllm/preflight/host.py",
)


def copy_bandwidth_module(dest: Path) -> None:
    """Copy the bandwidth module's files under ``dest`` (an emptyDir the engine image's
    init container puts on its PYTHONPATH)."""
    root = Path(__file__).resolve().parents[2]
    for relative in SHIPPED:
        target = dest / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / relative, target)


def run(namespace: argparse.Namespace) -> int:
    """Run every per-node check; print each finding; the exit status."""
    args = from_namespace(VerifyNetworkArgs, namespace)
    expect = NodeExpectations(
        socket_interface=args.socket_interface,
        ib_hcas=tuple(args.ib_hca),
        gid_index=args.gid_index,
        roce_mtu=args.roce_mtu,
        socket_mtu=args.socket_mtu,
        environment=dict(os.environ),
    )
    node = args.node or os.environ.get("NODE_NAME") or "unknown"
    host = HostView(
        sys=args.sys_dir or args.root / "sys",
        proc=args.proc_dir or args.root / "proc",
        etc=args.etc_dir or args.root / "etc",
    )
    findings = check_node(host, node=node, expect=expect, addresses=host.ipv4_addresses)
    if args.copy_bandwidth_module is not None:
        try:
            copy_bandwidth_module(args.copy_bandwidth_module)
        except OSError as exc:
            text = f"cannot copy the bandwidth module to {args.copy_bandwidth_module}: {exc}"
            findings.append(Finding(node, Check.PREFLIGHT, Severity.ERROR, text))
    return finish(findings, command="verify-network", log=args.termination_log, gate=args.gate)


def finish(findings: list[Finding], *, command: str, log: str, gate: bool) -> int:
    """Leave the findings in the termination message, print them; the exit status (1 for
    an error in gate mode). verify-memory ends the same way."""
    write_termination_message(log, to_json(findings))
    for finding in findings:
        print(f"[{command}] {finding.line()}", flush=True)
    errors = failed(findings)
    print(f"[{command}] {len(errors)} errors, {len(findings) - len(errors)} other findings")
    return 1 if errors and gate else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sparkllm verify-network")
    configure_parser(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
