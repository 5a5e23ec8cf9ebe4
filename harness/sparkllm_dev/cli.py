"""The ``sparkllm-dev`` command: the dev cluster, its engine and gateway harnesses, the demo.

Why a command apart from ``sparkllm``: these subcommands drive the local control plane and
the SGLang simulator, which exist only in the dev virtualenv; the product CLI in the image
offers only what an operator of a real cluster runs. Like ``sparkllm``, each subcommand
parses its arguments here and calls one function elsewhere; harness errors are printed as
one line and exit 1. ``--cluster demo|test`` (default ``$SPARKLLM_DEVCLUSTER``, else
``demo``) chooses which dev cluster every subcommand acts on: the demo's, or the tests' own
(``devcluster/paths.py``); it is exported to the processes a subcommand starts.

    sparkllm-dev [--cluster demo|test] up | down | status   the local control plane
    sparkllm-dev engines [-n NS] [--sim-arg=...]      one SGLang simulator per engine pod
    sparkllm-dev gateways --tokenizer-dir DIR [-n NS] [--state-file F]   gateway pods
    sparkllm-dev jobs [-n NS] [--gateways-file F]   benchmark and acceptance Job pods
    sparkllm-dev demo [down]                 what `make demo` runs
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from sparkllm.cli import dispatch
from sparkllm_dev.devcluster import DevCluster
from sparkllm_dev.devcluster.paths import (
    PROFILE_ENV,
    PROFILES,
    DevPaths,
    active_profile,
    cache_root,
)
from sparkllm_dev.errors import DevClusterError


def _cluster(args: argparse.Namespace) -> DevCluster:
    """The chosen dev cluster; its profile is exported for the processes a command starts."""
    profile = PROFILES[args.cluster] if args.cluster else active_profile()
    os.environ[PROFILE_ENV] = profile.name
    return DevCluster(DevPaths(root=cache_root(), profile=profile))


def _up(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    if not cluster.up():
        print("[devcluster] already running")
    print(f"kubeconfig: {cluster.paths.kubeconfig}")
    nodes = cluster.kubectl(
        "get", "nodes", "-o", "wide", "-L", "sparkllm.io/node-group,sparkllm.io/rank"
    )
    print(nodes.stdout, end="")
    return 0


def _down(args: argparse.Namespace) -> int:
    from sparkllm_dev.demo import stop_demo_processes, stopped_line

    cluster = _cluster(args)
    # The demo's operator, engines, gateways and Jobs' harnesses are the cluster's too:
    # left alive they would retry a control plane that is gone (what `demo down` stops).
    demo = stop_demo_processes(cluster)
    cluster.down()
    if demo:
        print(f"[devcluster] stopped the demo on it: {stopped_line(demo)}")
    print(f"[devcluster] {cluster.paths.profile.name} cluster down; no process of it left")
    return 0


def _status(args: argparse.Namespace) -> int:
    from sparkllm_dev.demo import access_lines, demo_access

    cluster = _cluster(args)
    status = cluster.status()
    profile = cluster.paths.profile
    print(f"cluster:     {profile.name} (kwokctl {profile.cluster_name})")
    print(f"running:     {status.running}")
    print(f"kubeconfig:  {status.kubeconfig}")
    print(f"kubectl:     {cluster.paths.binary('kubectl')}")
    print(f"server:      {status.server or '-'}")
    print(f"nodes ready: {status.nodes_ready}")
    print(f"processes:   {', '.join(status.processes) or '-'}")
    if not status.running:
        return 3
    # Where the demo is (its front door and key once it runs), as `make demo` ended.
    print("\n".join(["", *access_lines(demo_access(cluster))]))
    return 0


def _engines(args: argparse.Namespace) -> int:
    from sparkllm_dev.devcluster.engines import run_engine_harness

    return run_engine_harness(_cluster(args), sim_args=args.sim_args, namespace=args.namespace)


def _gateways(args: argparse.Namespace) -> int:
    from sparkllm_dev.devcluster.gateway_pods import run_gateway_pods

    if args.tokenizer_dir is None:
        raise DevClusterError("sparkllm-dev gateways needs --tokenizer-dir")
    cluster = _cluster(args)
    state = args.state_file or cluster.paths.state_dir / "gateways.json"
    return run_gateway_pods(
        cluster, tokenizer_dir=args.tokenizer_dir, namespace=args.namespace, state_file=state
    )


def _jobs(args: argparse.Namespace) -> int:
    from sparkllm_dev.devcluster.bench_jobs import run_bench_jobs

    cluster = _cluster(args)
    state = args.gateways_file or cluster.paths.state_dir / "gateways.json"
    return run_bench_jobs(cluster, namespace=args.namespace, gateways_file=state)


def _demo(args: argparse.Namespace) -> int:
    from sparkllm_dev.demo import demo_down, demo_up

    cluster = _cluster(args)
    return demo_down(cluster) if args.action == "down" else demo_up(cluster)


def _model_source(args: argparse.Namespace) -> int:
    from sparkllm_dev.demo_staging import model_source_up

    return model_source_up(_cluster(args))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sparkllm-dev", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument(
        "--cluster",
        choices=sorted(PROFILES),
        help=f"which dev cluster (default ${PROFILE_ENV}, else demo): the demo's or the tests'",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, handler, help_text in (
        ("up", _up, "start the local control plane with simulated DGX Spark nodes"),
        ("down", _down, "stop the local control plane (and the demo on it); no process left"),
        ("status", _status, "is the local control plane running (exit 3 if not)"),
    ):
        sub.add_parser(name, help=help_text).set_defaults(handler=handler)

    engines = sub.add_parser("engines", help="run an SGLang simulator per engine pod")
    engines.add_argument("-n", "--namespace", help="only this namespace")
    engines.add_argument(
        "--sim-arg",
        dest="sim_args",
        action="append",
        default=[],
        help="extra simulator option (repeatable), e.g. --sim-arg=--sim-tpot-ms=5",
    )
    engines.set_defaults(handler=_engines)

    gateways = sub.add_parser("gateways", help="run the gateway pods (admission + router)")
    gateways.add_argument("--tokenizer-dir", type=Path, help="the model's tokenizer files")
    gateways.add_argument("--state-file", type=Path, help="where to write the endpoints")
    gateways.add_argument("-n", "--namespace", help="only this namespace")
    gateways.set_defaults(handler=_gateways)

    jobs = sub.add_parser("jobs", help="run the benchmark and acceptance Jobs' pods")
    jobs.add_argument(
        "--gateways-file", type=Path, help="the gateways' endpoints (sparkllm-dev gateways')"
    )
    jobs.add_argument("-n", "--namespace", help="only this namespace")
    jobs.set_defaults(handler=_jobs)

    demo = sub.add_parser("demo", help="dev cluster + operator + sample InferenceCluster, Ready")
    demo.add_argument("action", nargs="?", choices=["up", "down"], default="up")
    demo.set_defaults(handler=_demo)

    source = sub.add_parser(
        "model-source",
        help="on the running demo: an S3 server with a toy model, its host allowed, an "
        "InferenceCluster to stage it (docs/model-staging.md)",
    )
    source.set_defaults(handler=_model_source)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
