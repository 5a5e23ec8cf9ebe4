"""A real Prometheus scrapes the dev cluster, and every dashboard panel gets data from it.

Prometheus (Debian's package) scrapes, with a static configuration in place of the chart's
ServiceMonitor/PodMonitor (no Prometheus Operator here), and the same labels they give:
the real operator's /metrics (honor_labels, as the ServiceMonitor), each simulated engine
rank's /metrics at its node's address (with sparkllm_io_cluster/_replica/_rank, as the
PodMonitor's podTargetLabels), the gateway's admission layer and router, a real
node-exporter (Debian's) on this machine, a second one reading node-exporter's own fixture
/sys (this machine has no InfiniBand port) and a stand-in for NVIDIA's DCGM exporter, which
needs a GPU: one gauge, DCGM_FI_DEV_XID_ERRORS, with the exporter's labels. It also loads
the chart's rendered alert rules. The InferenceCluster is served, gang-restarted once
(annotation) and sent requests; then every query of every dashboard panel, with the
dashboard's variables filled in, must return finite samples, every rule must evaluate
without error, and SparkLLMReplicaRestarted must fire.
"""

from __future__ import annotations

import json
import math
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from sparkllm_dev.devcluster import DevCluster, wait_until
from sparkllm_dev.devcluster.paths import cache_root
from sparkllm_dev.testing import OperatorProcess
from tests.e2e.serving import DEADLINE, Serving, ready_replicas, serve
from tests.unit.gateway_fixtures import MODEL
from tests.unit.test_chart_monitoring import NODE_EXPORTER_VERSION, dashboard_exprs
from tests.unit.test_promtool_rules import rule_groups
from tests.unit.tooling import on_path

pytestmark = pytest.mark.cluster
NAME = "prom"
GROUPS = [["spark-b0", "spark-b1", "spark-b2"]]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def process(argv: list[str], log: Path) -> Iterator[None]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextmanager
def dcgm_stand_in(port: int) -> Iterator[None]:
    """DCGM exporter's XID gauge and labels, for the nodes of the served replica."""
    registry = CollectorRegistry()
    xid = Gauge(
        "DCGM_FI_DEV_XID_ERRORS",
        "Value of the last XID error encountered.",
        ["gpu", "UUID", "device", "modelName", "Hostname"],
        registry=registry,
    )
    for node in GROUPS[0]:
        xid.labels("0", f"GPU-{node}", "nvidia0", "NVIDIA GB10", node).set(0)
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def engine_targets(cluster: DevCluster, namespace: str) -> list[dict[str, Any]]:
    """One static target per rank pod, labelled as the engine PodMonitor labels it."""
    pods = cluster.kubectl_json(
        "get", "pods", "-n", namespace,
        "-l", f"app.kubernetes.io/component=engine,sparkllm.io/cluster={NAME}",
    )["items"]  # fmt: skip
    assert len(pods) == 3
    return [
        {
            "targets": [f"{p['status']['hostIP']}:30000"],
            "labels": {
                "namespace": namespace,
                **{
                    f"sparkllm_io_{key}": p["metadata"]["labels"][f"sparkllm.io/{key}"]
                    for key in ("cluster", "replica", "rank")
                },
            },
        }
        for p in pods
    ]


def host_port(url: str) -> str:
    return httpx.URL(url).netloc.decode()


def scrape_config(
    *, ports: dict[str, int], engines: list[dict[str, Any]], serving: Serving
) -> dict[str, Any]:
    def job(name: str, targets: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {"job_name": name, "static_configs": targets, **extra}

    def local(name: str) -> list[dict[str, Any]]:
        return [{"targets": [f"127.0.0.1:{ports[name]}"]}]

    # namespace: the target label a ServiceMonitor/PodMonitor gives every target
    # The admission layer's metrics port (the pod's port "metrics"), as a PodMonitor would.
    admission = host_port(serving.gateway.metrics_url)
    gateway = [{"targets": [admission], "labels": {"namespace": serving.gateway.namespace}}]

    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": ["rules.yaml"],
        "scrape_configs": [
            job("operator", local("operator"), honor_labels=True),
            job("engines", engines),
            job("gateway", gateway),
            job("router", [{"targets": [host_port(serving.gateway.router_metrics_url)]}]),
            job("node-exporter", local("node")),
            job("node-exporter-infiniband-fixture", local("node_ib")),
            job("dcgm-exporter-stand-in", local("dcgm")),
        ],
    }


def query(url: str, expr: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10).json()
    assert answer["status"] == "success", answer
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def finite(result: list[dict[str, Any]]) -> bool:
    return any(math.isfinite(float(r["value"][1])) for r in result)


def panels_without_data(url: str, namespace: str) -> list[str]:
    by_panel: dict[str, bool] = {}
    for title, expr in dashboard_exprs():
        filled = expr.replace("$namespace", namespace).replace("$cluster", NAME)
        by_panel[title] = by_panel.get(title, False) or finite(query(url, filled))
    return sorted(title for title, ok in by_panel.items() if not ok)


def traffic(serving: Serving) -> None:
    """Streamed and whole answers through the front door: every engine histogram moves."""
    url = f"{serving.gateway.admission_url}/v1/chat/completions"
    headers = {"Authorization": f"Bearer {serving.alice}"}
    for i in range(6):
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": f"hello number {i}"}],
            "stream": i % 2 == 0,
            "max_tokens": 8,
        }
        # Retried: right after the restart smg may still hold the old rank 0 for a moment.
        wait_until(
            lambda body=body: (
                httpx.post(url, json=body, headers=headers, timeout=60).status_code == 200
            ),
            timeout=DEADLINE,
            interval=1,
            what="a 200 from the front door",
        )


def gang_restart(cluster: DevCluster, namespace: str, serving: Serving, url: str) -> None:
    """Restart the replica (annotation) and wait until it serves again."""
    cluster.kubectl("annotate", "icl", NAME, "-n", namespace, "sparkllm.io/restart=now")
    wait_until(
        lambda: query(url, f'sparkllm_gang_restarts_total{{cluster="{NAME}"}}'),
        timeout=DEADLINE,
        what="the operator to count the gang restart",
    )
    wait_until(
        lambda: ready_replicas(cluster, namespace, NAME) == 1, timeout=DEADLINE, what="ready"
    )
    wait_until(
        lambda: router_workers(serving) == 1, timeout=DEADLINE, what="smg to see rank 0 again"
    )


def router_workers(serving: Serving) -> int:
    answer = httpx.get(f"{serving.gateway.router_url}/readiness", timeout=5).json()
    return int(answer.get("healthy_workers") or 0)


def panels_filled(url: str, namespace: str, *, timeout: float) -> list[str]:
    """Poll until every panel has data; the panels still without it at the deadline."""
    deadline = time.monotonic() + timeout
    missing = panels_without_data(url, namespace)
    while missing and time.monotonic() < deadline:
        time.sleep(2)
        missing = panels_without_data(url, namespace)
    return missing


def test_prometheus_scrapes_everything_and_every_panel_has_data(
    devcluster: DevCluster,
    namespace: str,
    operator: OperatorProcess,
    model_dir: Path,
    tmp_path: Path,
) -> None:
    prometheus, node_exporter = on_path("prometheus"), on_path("prometheus-node-exporter")
    sysfs = cache_root() / "exporter-metrics" / f"node_exporter-{NODE_EXPORTER_VERSION}.txt.sysfs"
    ports = {name: free_port() for name in ("operator", "node", "node_ib", "dcgm", "prom")}
    operator.stop()  # the fixture runs it without metrics; the same operator, scraped
    operator.start("--metrics-port", str(ports["operator"]))
    with ExitStack() as stack:
        serving = stack.enter_context(
            serve(devcluster, namespace, name=NAME, model_dir=model_dir, groups=GROUPS,
                  log_dir=tmp_path / "gateway")
        )  # fmt: skip
        stack.enter_context(dcgm_stand_in(ports["dcgm"]))
        for name, extra in (
            ("node", []),
            ("node_ib", [f"--path.sysfs={sysfs / 'sys'}", "--collector.disable-defaults",
                         "--collector.infiniband"]),
        ):  # fmt: skip
            argv = [node_exporter, f"--web.listen-address=127.0.0.1:{ports[name]}", *extra]
            stack.enter_context(process(argv, tmp_path / f"{name}.log"))
        config = scrape_config(
            ports=ports, engines=engine_targets(devcluster, namespace), serving=serving
        )
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule_groups()))
        url = f"http://127.0.0.1:{ports['prom']}"
        stack.enter_context(
            process(
                [prometheus, f"--config.file={tmp_path / 'prometheus.yml'}",
                 f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{ports['prom']}"],
                tmp_path / "prometheus.log",
            )
        )  # fmt: skip
        jobs = {j["job_name"] for j in config["scrape_configs"]}
        wait_until(lambda: targets_up(url) == jobs, timeout=60, what="every target up")
        gang_restart(devcluster, namespace, serving, url)
        # Twice, with scrapes between: an engine's histogram series is born with its first
        # requests, and rate() needs a scrape before an increase to see one.
        traffic(serving)
        wait_until(
            lambda: query(url, 'sglang:time_to_first_token_seconds_count{sparkllm_io_rank="0"}'),
            timeout=30,
            what="the engines' first histogram samples",
        )
        time.sleep(3)
        traffic(serving)
        assert panels_filled(url, namespace, timeout=90) == []
        assert query(url, f'sparkllm_replicas{{namespace="{namespace}", cluster="{NAME}"}}')
        assert query(url, '{__name__=~"sparkllm_gateway_.+"}'), "admission layer not scraped"
        rules = httpx.get(f"{url}/api/v1/rules", timeout=10).json()["data"]["groups"]
        broken = [r["name"] for g in rules for r in g["rules"] if r["health"] != "ok"]
        assert len([r for g in rules for r in g["rules"]]) == 13
        assert broken == []
        wait_until(lambda: "SparkLLMReplicaRestarted" in firing(url), timeout=30, what="alert")
        print(json.dumps({"targets": sorted(jobs), "firing": sorted(firing(url))}))


def targets_up(url: str) -> set[str]:
    active = httpx.get(f"{url}/api/v1/targets", timeout=10).json()["data"]["activeTargets"]
    jobs = {t["labels"]["job"] for t in active}
    down = {t["labels"]["job"] for t in active if t["health"] != "up"}
    return jobs - down


def firing(url: str) -> set[str]:
    alerts = httpx.get(f"{url}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
    return {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}
