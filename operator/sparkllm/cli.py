"""The ``sparkllm`` command: a thin dispatcher over the package's modules.

Each subcommand parses its arguments here and calls one function elsewhere; nothing in
this module decides policy. Errors from sparkllm's own hierarchy are printed as one
line and exit 1; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from sparkllm.errors import SparkllmError

Handler = Callable[[argparse.Namespace], int]


def _devcluster(args: argparse.Namespace) -> int:
    from sparkllm.devcluster import DevCluster

    cluster = DevCluster()
    if args.action == "up":
        started = cluster.up()
        if not started:
            print("[devcluster] already running")
        print(f"kubeconfig: {cluster.paths.kubeconfig}")
        print(
            cluster.kubectl(
                "get", "nodes", "-o", "wide", "-L", "sparkllm.io/node-group,sparkllm.io/rank"
            ).stdout,
            end="",
        )
        return 0
    if args.action == "down":
        cluster.down()
        print("[devcluster] down; no control-plane process left")
        return 0
    status = cluster.status()
    print(f"running:     {status.running}")
    print(f"kubeconfig:  {status.kubeconfig}")
    print(f"server:      {status.server or '-'}")
    print(f"nodes ready: {status.nodes_ready}")
    print(f"processes:   {', '.join(status.processes) or '-'}")
    return 0 if status.running else 3


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sparkllm", description=__doc__.splitlines()[0] if __doc__ else None
    )
    sub = parser.add_subparsers(dest="command", required=True)

    dev = sub.add_parser("devcluster", help="local control plane with simulated DGX Spark nodes")
    dev.add_argument("action", choices=["up", "down", "status"])
    dev.set_defaults(handler=_devcluster)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except SparkllmError as exc:
        print(f"sparkllm: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
