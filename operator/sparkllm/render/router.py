"""smg, the router behind the admission layer: its command line and why each knob is set.

``smg launch`` (the SGLang model gateway) routes over the replicas' rank-0 pods with the
cache-aware policy, finding them by Kubernetes service discovery; ranks > 0 never match
its selector, so nothing routes to them. Every knob set here, and why, is in
docs/gateway.md ("The router behind it"); the behaviour it relies on (kubeconfig/in-cluster
auth, Ready pods only, the pod IP as address, which statuses are retried, what trips the
breaker) was verified against smg 1.13.0 and is recorded there too. In short: requests
take tens of seconds, replicas are few (one to three) and each runs at most a handful of
requests, so the router's defaults — sized for large GPU fleets — would never spill load
off a replica and would leave a dead one in rotation too long.

A module of its own because the router's argv is a contract with another program (smg's
argparse), apart from the Kubernetes objects ``render.gateway`` builds around it.

Pure: no I/O. The engine key never appears, not even on smg's command line: like rank 0,
the router starts through a launcher (:data:`ROUTER_LAUNCHER_CODE`) that moves the key
from its environment into smg's ``sys.argv`` inside the process (smg 1.13.0 takes it only
as ``--api-key``).
"""

from __future__ import annotations

from typing import Final

from sparkllm.api import ENGINE_HTTP_PORT, InferenceCluster
from sparkllm.gateway_settings import ROUTER_HOST, ROUTER_PORT
from sparkllm.keys import LABEL_CLUSTER, LABEL_RANK, LABEL_SERVING
from sparkllm.render.names import COMPONENT_ENGINE, LABEL_COMPONENT
from sparkllm.render.ranks import HEALTH_PATH, HEALTH_TIMEOUT_SECONDS
from sparkllm.sglang_contract.fields import ENGINE_API_KEY_ENV

ROUTER_HEALTH_PORT: Final = 30081  # smg's isolated probe listener (loopback too)
ROUTER_METRICS_PORT: Final = 29000  # smg's Prometheus exporter, on the pod IP
ROUTER_LAUNCHER_CODE: Final = (
    f"import os,sys;k=os.environ.pop({ENGINE_API_KEY_ENV!r},None);sys.argv[0]='smg';"
    "sys.argv+=[] if k is None else ['--api-key='+k];from smg.cli import main;main()"
)
"""``python -c`` code: ``smg`` with the engine key appended to its argv from the env.

smg reads its arguments from ``sys.argv[1:]`` (``smg.cli.main``), the first being the
subcommand (``launch``); the key goes last as one ``--api-key=<key>`` word (it may start
with "-"), exactly what ``sglang_contract.command.launched_args`` gives for these args.
``/proc/<pid>/cmdline`` keeps the command the kubelet started, without the key; the
variable is popped, so nothing smg starts inherits it.
"""
ROUTER_COMMAND: Final = ("python", "-c", ROUTER_LAUNCHER_CODE, "launch")
# smg and uvicorn let in-flight streams finish on SIGTERM; longer answers are cut.
SHUTDOWN_GRACE_SECONDS: Final = 290

# --- smg knobs (docs/gateway.md, "The router behind it") ---------------------------------
ROUTER_POLICY: Final = "cache_aware"
# The engines' own readiness check: /health runs a one-token generation (20 s budget).
# A failing check takes its whole 20 s, so 6 failures are ~120 s without one token: the
# same bound as rank 0's readiness probe, past two 8K prefills back to back (~88 s, 4
# failures; docs/operator.md "Probes and hung pipelines"). 3 dropped such a worker.
ROUTER_HEALTH_INTERVAL_SECONDS: Final = 10
ROUTER_HEALTH_FAILURES: Final = 6
ROUTER_HEALTH_SUCCESSES: Final = 1
# Attempts in total (smg counts the first). Retried: 408, 429, 502, 503, 504 and
# connection failures — on another replica when one is down.
ROUTER_RETRY_ATTEMPTS: Final = 3
ROUTER_RETRY_INITIAL_BACKOFF_MS: Final = 100
ROUTER_RETRY_MAX_BACKOFF_MS: Final = 2000
ROUTER_RETRY_MULTIPLIER: Final = 2
ROUTER_RETRY_JITTER: Final = 0.2
# 5xx and transport failures count, 4xx do not. A dead engine fails every request at
# once; a healthy one's rare 500 for a bad request should not take it out.
ROUTER_CB_FAILURES: Final = 5
ROUTER_CB_WINDOW_SECONDS: Final = 30
ROUTER_CB_OPEN_SECONDS: Final = 15
ROUTER_CB_SUCCESSES: Final = 2
# 8K prompt: 44 s to the first token (SEEDS.md); a whole-window answer at 78 ms/token
# is ~16 min. 30 min bounds a request including time queued in the engine.
ROUTER_REQUEST_TIMEOUT_SECONDS: Final = 1800
# Radix tree of prompt text: 4 chars/token x the 1.58M-token KV pool of one replica is
# ~6.3M chars; 16M covers two to three replicas (a prefix no engine holds cannot hit).
ROUTER_MAX_TREE_CHARS: Final = 16 * 1024 * 1024
BODY_REWRITE_MARGIN_BYTES: Final = 64 * 1024  # admission may add max_tokens to a body

ROUTER_LIVENESS_COMMAND: Final = (
    "python",
    "-c",
    "import urllib.request; "
    f"urllib.request.urlopen('http://{ROUTER_HOST}:{ROUTER_HEALTH_PORT}/liveness', timeout=4)",
)


def engine_discovery_selector(cluster: str) -> dict[str, str]:
    """What smg discovers: rank-0 engine pods of this cluster, never ranks > 0."""
    return {
        LABEL_CLUSTER: cluster,
        LABEL_RANK: "0",
        LABEL_COMPONENT: COMPONENT_ENGINE,
        LABEL_SERVING: "true",  # a replica being scaled away is drained first
    }


def router_args(ic: InferenceCluster) -> list[str]:
    """``smg launch`` arguments, without the engine key (the launcher adds it).

    smg parses them with Python's argparse; every value is the operator's or a DNS name.
    """
    name, namespace = ic.metadata.name, ic.metadata.namespace or "default"
    admission, engine = ic.spec.admission, ic.spec.engine
    selector = [f"{key}={value}" for key, value in engine_discovery_selector(name).items()]
    return [
        "--host", ROUTER_HOST,
        "--port", str(ROUTER_PORT),
        "--health-check-port", str(ROUTER_HEALTH_PORT),
        "--prometheus-host", "0.0.0.0",
        "--prometheus-port", str(ROUTER_METRICS_PORT),
        "--service-discovery",
        "--selector", *selector,
        "--service-discovery-namespace", namespace,
        "--service-discovery-port", str(ENGINE_HTTP_PORT),
        "--policy", ROUTER_POLICY,
        # smg's default gap of 64 requests never spills off an engine that runs 8.
        "--balance-abs-threshold", str(max(1, engine.max_running_requests // 4)),
        "--max-tree-size", str(ROUTER_MAX_TREE_CHARS),
        "--disable-tokenizer-autoload",
        "--health-check-endpoint", HEALTH_PATH,
        "--health-check-interval-secs", str(ROUTER_HEALTH_INTERVAL_SECONDS),
        "--health-check-timeout-secs", str(HEALTH_TIMEOUT_SECONDS),
        "--health-failure-threshold", str(ROUTER_HEALTH_FAILURES),
        "--health-success-threshold", str(ROUTER_HEALTH_SUCCESSES),
        "--retry-max-retries", str(ROUTER_RETRY_ATTEMPTS),
        "--retry-initial-backoff-ms", str(ROUTER_RETRY_INITIAL_BACKOFF_MS),
        "--retry-max-backoff-ms", str(ROUTER_RETRY_MAX_BACKOFF_MS),
        "--retry-backoff-multiplier", str(ROUTER_RETRY_MULTIPLIER),
        "--retry-jitter-factor", str(ROUTER_RETRY_JITTER),
        "--cb-failure-threshold", str(ROUTER_CB_FAILURES),
        "--cb-success-threshold", str(ROUTER_CB_SUCCESSES),
        "--cb-timeout-duration-secs", str(ROUTER_CB_OPEN_SECONDS),
        "--cb-window-duration-secs", str(ROUTER_CB_WINDOW_SECONDS),
        "--request-timeout-secs", str(ROUTER_REQUEST_TIMEOUT_SECONDS),
        "--shutdown-grace-period-secs", str(SHUTDOWN_GRACE_SECONDS),
        # Every admitted body stays retryable (smg streams larger ones unbuffered).
        "--max-buffered-request-bytes", str(admission.max_body_bytes + BODY_REWRITE_MARGIN_BYTES),
        # A backstop mirroring the admission limits; admission is the queue users see.
        "--max-concurrent-requests", str(admission.max_concurrent_requests),
        "--queue-size", str(admission.queue_size),
        "--queue-timeout-secs", str(admission.queue_timeout_seconds),
        "--log-level", "info",
        "--log-json",  # one JSON object per line; without it smg writes ANSI colours
    ]  # fmt: skip


__all__ = [
    "BODY_REWRITE_MARGIN_BYTES",
    "ROUTER_COMMAND",
    "ROUTER_LAUNCHER_CODE",
    "ROUTER_LIVENESS_COMMAND",
    "ROUTER_METRICS_PORT",
    "ROUTER_REQUEST_TIMEOUT_SECONDS",
    "SHUTDOWN_GRACE_SECONDS",
    "engine_discovery_selector",
    "router_args",
]
