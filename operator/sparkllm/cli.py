"""The ``sparkllm`` command: a thin dispatcher over the package's modules.

Each subcommand parses its arguments here and calls one function elsewhere; nothing in
this module decides policy. Errors from sparkllm's own hierarchy are printed as one
line and exit 1; anything else is a bug and keeps its traceback. ``sparkllm --version``
names the package and the SGLang version whose contract (flags, command line, server
info) it was built against.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkllm import __version__
from sparkllm.errors import SparkllmError

if TYPE_CHECKING:
    from sparkllm.api.admin_policy import AdminPolicy

Handler = Callable[[argparse.Namespace], int]


def _run(args: argparse.Namespace) -> int:
    from sparkllm.reconcile.runner import run_operator

    return run_operator(
        namespaces=args.namespace or (),
        kubeconfig=args.kubeconfig,
        metrics_port=args.metrics_port or None,
        peering_name=args.peering,
        priority=args.priority,
        liveness_endpoint=args.liveness,
        verbose=args.verbose,
        resync_seconds=args.resync_seconds,
    )


def _render(args: argparse.Namespace) -> int:
    from sparkllm.offline import STORE_FLAGS, governance_default_from_flags, render_file
    from sparkllm.render.engine_cache import engine_cache_from
    from sparkllm.render.product_image import product_image

    store = (args.redis_address, args.redis_secret, args.redis_key, args.redis_database)
    default = governance_default_from_flags(dict(zip(STORE_FLAGS, store, strict=True)))
    image = product_image(
        reference=args.image,
        pull_policy=args.image_pull_policy,
        pull_secrets=args.image_pull_secret or [],
    )
    flags = {"--engine-cache-root": args.engine_cache_root or ""}
    flags["--engine-cache-max-gib"] = args.engine_cache_max_gib or ""
    cache = engine_cache_from(flags, names=("--engine-cache-root", "--engine-cache-max-gib"))
    image = dataclasses.replace(image, engine_cache=cache)
    text = render_file(
        args.file,
        node_ips=dict(args.node_ip or []),
        namespace=args.namespace,
        gateway_image=image,
        governance_default=default,
        admin_policy=_admin_policy(args.admin_policy),
    )
    print(text, end="")
    return 0


def _admin_policy(path: str | None) -> AdminPolicy | None:
    """The policy in the ``--admin-policy`` file (chart values or the policy itself)."""
    from sparkllm.api.admin_policy import admin_policy_from_yaml

    if path is None:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SparkllmError(f"--admin-policy: cannot read {path}: not UTF-8 text") from exc
    except OSError as exc:
        raise SparkllmError(f"--admin-policy: cannot read {path}: {exc}") from exc
    return admin_policy_from_yaml(text, where=f"in {path}")


def _node_ip(text: str) -> tuple[str, str]:
    name, sep, ip = text.partition("=")
    if not sep or not name or not ip:
        raise argparse.ArgumentTypeError(f"expected NODE=IP, got {text!r}")
    return name, ip


def version_text() -> str:
    """What ``sparkllm --version`` prints: this package and the SGLang contract it pins."""
    from sparkllm.sglang_contract.flags import SGLANG_VERSION

    return f"sparkllm {__version__} (SGLang contract {SGLANG_VERSION})"


class _VersionAction(argparse.Action):
    """``--version``, reading the SGLang contract's table only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        del kwargs  # argparse's default/help: fixed here
        super().__init__(
            option_strings,
            dest=argparse.SUPPRESS,
            default=argparse.SUPPRESS,
            nargs=0,
            help="print the version (and the pinned SGLang's) and exit",
        )

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(version_text())
        parser.exit()


def _lazy_subcommand(parser: argparse.ArgumentParser, module_name: str) -> None:
    """Let ``module_name`` define its own flags (configure_parser) and run (run)."""
    module = importlib.import_module(module_name)
    module.configure_parser(parser)
    parser.set_defaults(handler=module.run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sparkllm", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the operator against the current kubeconfig")
    run.add_argument("-n", "--namespace", action="append", help="watch only these namespaces")
    run.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then $KUBECONFIG)")
    run.add_argument("--metrics-port", type=int, default=8080, help="0 disables (default 8080)")
    run.add_argument("--peering", help="kopf peering name: run several operators, one active")
    run.add_argument("--priority", type=int, default=0, help="peering priority (higher wins)")
    run.add_argument("--liveness", help="e.g. http://0.0.0.0:8081/healthz")
    run.add_argument(
        "--resync-seconds",
        type=float,
        default=60.0,
        help="re-check every InferenceCluster this often (reads only; default 60)",
    )
    run.add_argument("-v", "--verbose", action="store_true")
    run.set_defaults(handler=_run)

    render = sub.add_parser(
        "render", help="print the objects the operator applies for an InferenceCluster"
    )
    render.add_argument("-f", "--file", required=True, help="InferenceCluster manifest")
    render.add_argument("-n", "--namespace", default=None, help="namespace if the file has none")
    render.add_argument(
        "--node-ip",
        type=_node_ip,
        action="append",
        metavar="NODE=IP",
        help="InternalIP of a node (rank 0's --dist-init-addr); default: the node name",
    )
    store = render.add_argument_group(
        "the operator's default governance store (chart values governance.redis.*)"
    )
    for flag, dest, metavar, help_text in (
        ("--governance-redis-address", "redis_address", "HOST:PORT", "used when the spec "
         "names no store, as the operator does (chart governance.redis.address)"),
        ("--governance-redis-password-secret", "redis_secret", "SECRET", "the Secret "
         "holding its password (governance.redis.passwordSecretRef.name)"),
        ("--governance-redis-password-key", "redis_key", "KEY", "that Secret's key "
         "(governance.redis.passwordSecretRef.key; default password)"),
        ("--governance-redis-database", "redis_database", "N", "its database "
         "(governance.redis.database; default 0)"),
    ):  # fmt: skip
        store.add_argument(flag, dest=dest, metavar=metavar, help=help_text)
    image = render.add_argument_group(
        "the operator's own image (chart values image.* and imagePullSecrets): the gateway's, "
        "the ranks' init containers' and the Jobs'"
    )
    for flag, metavar, help_text in (
        ("--image", "REF", "image.repository with :image.tag or @image.digest (default "
         "the published image of this version)"),
        ("--image-pull-policy", "POLICY", "image.pullPolicy: Always, IfNotPresent (default) "
         "or Never"),
        ("--image-pull-secret", "SECRET", "an entry of imagePullSecrets (repeatable): a Secret "
         "in the InferenceCluster's namespace, on every pod's imagePullSecrets"),
        ("--engine-cache-root", "DIR", "engineCache.root: the directory on each node where "
         "rank pods keep their engine caches (default none: no cache; the chart's default is "
         "/var/lib/sparkllm/engine-cache)"),
        ("--engine-cache-max-gib", "N", "engineCache.maxGiB: the cap per namespace and node "
         "(default 64)"),
    ):  # fmt: skip
        action = "append" if flag == "--image-pull-secret" else "store"
        image.add_argument(flag, metavar=metavar, action=action, help=help_text)
    render.add_argument(
        "--admin-policy",
        metavar="FILE",
        help="the administrator's policy, as the operator enforces it (chart values file "
        "or its policy mapping); a spec outside it is refused",
    )
    render.set_defaults(handler=_render)

    for name, module, help_text in (
        ("plan", "sparkllm.plan_command", "per-rank memory plan of an InferenceCluster"),
        ("verify-model", "sparkllm.integrity.verify", "verify a model directory (init container)"),
        ("verify-network", "sparkllm.preflight.verify", "network preflight (init container)"),
        (
            "stage-model",
            "sparkllm.staging.command",
            "download the model once, copy it node to node, verified (issue 31)",
        ),
        ("verify-memory", "sparkllm.preflight.verify_memory", "memory preflight (init container)"),
        (
            "engine-cache",
            "sparkllm.preflight.engine_cache",
            "prune the node's engine cache (init container)",
        ),
        ("bench", "sparkllm.bench.cli", "acceptance benchmark against the gateway"),
        ("usage", "sparkllm.usage_command", "usage per user per day (the gateway's ledger)"),
    ):
        command = sub.add_parser(name, help=help_text)
        _lazy_subcommand(command, module)
    return parser


def dispatch(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    """Parse ``argv`` and run the chosen subcommand's handler; sparkllm's errors -> exit 1."""
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except SparkllmError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
