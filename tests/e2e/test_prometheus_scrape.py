"""A real Prometheus scrapes what the operator's own PodMonitors select, and every dashboard
panel, alert expression and autoscaling sample query gets data from it.

The Prometheus Operator's CRDs are installed (``monitoring_crds`` of
tests/integration/test_monitoring_crds.py), so the real operator creates the
InferenceCluster's PodMonitors (``spec.monitoring``, interval 1s for the test's pace). No
Prometheus Operator runs here to turn them into a scrape configuration, so the test does its
part, from what the objects say and nothing else: each PodMonitor's selector (matchLabels,
in its namespaceSelector's namespaces) picks the Running pods; each podMetricsEndpoint's
port name must be a named container port of every picked pod and becomes one target per
pod (the pod IP and that port; for the gateway pod, whose containers the harness runs on
free local ports as a kubelet would run them in the pod, where it runs that port), with
the endpoint's path and interval and the labels the Prometheus Operator gives (namespace,
pod, container, endpoint, job ``<namespace>/<name>``, each podTargetLabels label as
``sparkllm_io_*``). Beside them, static jobs: the real operator's /metrics (honor_labels, as
the chart's ServiceMonitor), a real node-exporter (Debian's) on this machine, a second one
reading node-exporter's own fixture /sys (this machine has no InfiniBand port) and a
stand-in for NVIDIA's DCGM exporter, which needs a GPU: one gauge, DCGM_FI_DEV_XID_ERRORS,
with the exporter's labels. It also loads the chart's rendered alert rules.

The InferenceCluster is served, gang-restarted once (annotation; the simulated engines take
a few seconds to start, and a chat sent while smg has no replica is answered 503
``no_replica_ready`` and counted, what KEDA's scale-from-zero trigger reads), and sent
requests. Then, with the dashboard's variables and the samples' namespace and name filled
in: every query of every dashboard panel (the Governance row included) returns finite
samples; every alert rule evaluates without error, SparkLLMReplicaRestarted fires, and for
the alerts that fire only under a fault every series their expression reads has data;
every autoscaling sample's query (manifests/samples/autoscaling: the HPA's External metric
through the adapter rule its comment states, and both KEDA triggers) returns data. The
counts are printed.
"""

from __future__ import annotations

import json
import math
import re
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

from sparkllm.gateway.serving import CODE_NO_REPLICA_READY
from sparkllm_dev.devcluster import DevCluster, wait_until
from sparkllm_dev.devcluster.gateway_pods import GatewayInfo
from sparkllm_dev.devcluster.paths import cache_root
from sparkllm_dev.testing import QUICK_RESYNC, ROOT, OperatorProcess
from tests.e2e.serving import DEADLINE, Serving, ready_replicas, serve
from tests.integration.test_monitoring_crds import monitoring_crds  # noqa: F401 (fixture)
from tests.unit.gateway_fixtures import MODEL
from tests.unit.test_chart_monitoring import (
    LABEL_PARTS,
    METRIC_TOKEN,
    NODE_EXPORTER_VERSION,
    dashboard_exprs,
)
from tests.unit.test_promtool_rules import rule_groups
from tests.unit.tooling import on_path

pytestmark = pytest.mark.cluster
NAME = "prom"
GROUPS = [["spark-b0", "spark-b1", "spark-b2"]]
STARTUP_SECONDS = 4  # each simulated engine's start: a gang restart leaves smg no replica
AUTOSCALING = ROOT / "manifests" / "samples" / "autoscaling"
# The prometheus-adapter rule hpa.yaml's comment gives for its External metric.
ADAPTER_METRICS_QUERY = "sum(<<.Series>>{<<.LabelMatchers>>})"
SAMPLE_NAMESPACE, SAMPLE_NAME = "llm", "deepseek-v4-flash"
# A vector selector (metric name and its matchers) of the series alerts read; the names are
# test_chart_monitoring's METRIC_TOKEN's (checked per expression below).
SELECTOR = re.compile(
    r"\b(sparkllm_[a-z0-9_]+|sglang:[a-z0-9_:]+|node_[A-Za-z0-9_]+|DCGM_[A-Z0-9_]+|up)\b"
    r"(\{[^}]*\})?(?!\s*\()"
)


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


def host_port(url: str) -> str:
    return httpx.URL(url).netloc.decode()


def running_pods(cluster: DevCluster, namespace: str, selector: dict[str, str]) -> list[Any]:
    text = ",".join(f"{k}={v}" for k, v in selector.items())
    pods = cluster.kubectl_json("get", "pods", "-n", namespace, "-l", text)["items"]
    return [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]


def target_address(pod: dict[str, Any], port: str, gateways: tuple[GatewayInfo, ...]) -> str:
    """Where Prometheus reaches ``port`` of ``pod``: its pod IP and the container port (the
    ranks: host networking, the node's address); a gateway pod's containers run here, on
    free local ports (tests/e2e/serving.py), so there it is where the harness runs them."""
    run_here = {g.pod: g for g in gateways}.get(pod["metadata"]["name"])
    if run_here is not None:
        local = {"http": run_here.admission_url, "metrics": run_here.metrics_url,
                 "router-metrics": run_here.router_metrics_url}  # fmt: skip
        return host_port(local[port])
    assert pod["spec"].get("hostNetwork") is True
    assert pod["status"]["podIP"] == pod["status"]["hostIP"]
    return f"{pod['status']['podIP']}:{container_port(pod, port)[1]}"


def container_port(pod: dict[str, Any], port: str) -> tuple[str, int]:
    """The container naming ``port``, and its number; the PodMonitor must name a real one."""
    found = [
        (c["name"], p["containerPort"])
        for c in pod["spec"]["containers"]
        for p in c.get("ports") or []
        if p.get("name") == port
    ]
    assert len(found) == 1, f"pod {pod['metadata']['name']} has no one port named {port}"
    return found[0]


def pod_monitor_jobs(
    cluster: DevCluster, namespace: str, gateways: tuple[GatewayInfo, ...]
) -> list[dict[str, Any]]:
    """The scrape jobs the Prometheus Operator makes of this object's PodMonitors."""
    monitors = cluster.kubectl_json(
        "get", "podmonitors", "-n", namespace, "-l", f"sparkllm.io/cluster={NAME}"
    )["items"]
    assert sorted(m["metadata"]["name"] for m in monitors) == [f"{NAME}-engines", f"{NAME}-gateway"]
    jobs = []
    for monitor in monitors:
        spec, name = monitor["spec"], monitor["metadata"]["name"]
        assert set(spec["selector"]) == {"matchLabels"}  # what this translation covers
        pods = [
            (ns, pod)
            for ns in spec["namespaceSelector"]["matchNames"]
            for pod in running_pods(cluster, ns, spec["selector"]["matchLabels"])
        ]
        assert pods, f"PodMonitor {name} selects no running pod"
        for index, endpoint in enumerate(spec["podMetricsEndpoints"]):
            targets = [
                {
                    "targets": [target_address(pod, endpoint["port"], gateways)],
                    "labels": {
                        "namespace": ns,
                        "pod": pod["metadata"]["name"],
                        "container": container_port(pod, endpoint["port"])[0],
                        "endpoint": endpoint["port"],
                        "job": f"{namespace}/{name}",
                        **{
                            re.sub(r"[^a-zA-Z0-9_]", "_", key): pod["metadata"]["labels"][key]
                            for key in spec.get("podTargetLabels") or []
                        },
                    },
                }
                for ns, pod in pods
            ]
            jobs.append({
                "job_name": f"podMonitor/{namespace}/{name}/{index}",
                "scrape_interval": endpoint["interval"],
                "metrics_path": endpoint["path"],
                "static_configs": targets,
            })  # fmt: skip
    return jobs


def scrape_config(*, ports: dict[str, int], monitors: list[dict[str, Any]]) -> dict[str, Any]:
    def job(name: str, targets: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {"job_name": name, "static_configs": targets, **extra}

    def local(name: str) -> list[dict[str, Any]]:
        return [{"targets": [f"127.0.0.1:{ports[name]}"]}]

    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": ["rules.yaml"],
        "scrape_configs": [
            job("operator", local("operator"), honor_labels=True),
            *monitors,
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
    for i in range(6):
        # Retried: right after the restart smg may still hold the old rank 0 for a moment.
        wait_until(
            lambda i=i: (
                chat(serving, stream=i % 2 == 0, text=f"hello number {i}").status_code == 200
            ),
            timeout=DEADLINE,
            interval=1,
            what="a 200 from the front door",
        )


def gang_restart(cluster: DevCluster, namespace: str, serving: Serving, url: str) -> None:
    """Restart the replica (annotation); while smg has no replica, a chat is answered 503
    no_replica_ready (counted); then wait until it serves again."""
    cluster.kubectl("annotate", "icl", NAME, "-n", namespace, "sparkllm.io/restart=now")
    wait_until(
        lambda: router_workers(serving) == 0,
        timeout=DEADLINE,
        interval=0.2,
        what="smg without a replica (the old rank 0 gone, the new one starting)",
    )
    refused = chat(serving, stream=False)
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["code"] == CODE_NO_REPLICA_READY, refused.text
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


def chat(serving: Serving, *, stream: bool, text: str = "hello") -> httpx.Response:
    return httpx.post(
        f"{serving.gateway.admission_url}/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": text}],
              "stream": stream, "max_tokens": 8},
        headers={"Authorization": f"Bearer {serving.alice}"},
        timeout=60,
    )  # fmt: skip


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


def selectors(expr: str) -> list[str]:
    """The vector selectors (name and matchers) an expression reads."""
    without_groupings = re.sub(r"\b(?:by|without)\s*\([^)]*\)", " ", expr)
    found = [name + (matchers or "") for name, matchers in SELECTOR.findall(without_groupings)]
    # The same metric names test_chart_monitoring's oracle finds: nothing skipped.
    assert {f.split("{")[0] for f in found} == set(METRIC_TOKEN.findall(LABEL_PARTS.sub(" ", expr)))
    return found


def alert_report(url: str) -> dict[str, Any]:
    """Every alert rule: evaluated without error; its expression's data, or (an alert that
    fires only under a fault) whether every series it reads has data."""
    groups = httpx.get(f"{url}/api/v1/rules", timeout=10).json()["data"]["groups"]
    rules = [r for g in groups for r in g["rules"] if r["type"] == "alerting"]
    with_data = sorted(r["name"] for r in rules if query(url, r["query"]))
    fault_only = {r["name"]: r["query"] for r in rules if r["name"] not in with_data}
    inner_missing = {
        name: [sel for sel in selectors(expr) if not query(url, sel)]
        for name, expr in fault_only.items()
    }
    return {
        "total": len(rules),
        "evaluated": sorted(r["name"] for r in rules if r["health"] == "ok"),
        "with_data": with_data,
        "fault_only": sorted(fault_only),
        "inner_series_missing": {k: v for k, v in inner_missing.items() if v},
    }


def autoscaling_queries(namespace: str) -> dict[str, str]:
    """Each sample's query, for this test's namespace and object: the HPA's External metric
    as the adapter rule in its comment makes it, and the KEDA triggers' own."""
    hpa_text = (AUTOSCALING / "hpa.yaml").read_text()
    assert ADAPTER_METRICS_QUERY in hpa_text
    queries: dict[str, str] = {}
    for metric in yaml.safe_load(hpa_text)["spec"]["metrics"]:
        external = metric["external"]["metric"]
        labels = external["selector"]["matchLabels"]
        matchers = ",".join(f'{k}="{v}"' for k, v in labels.items())
        queries[f"hpa:{external['name']}"] = ADAPTER_METRICS_QUERY.replace(
            "<<.Series>>", external["name"]
        ).replace("<<.LabelMatchers>>", matchers)
    keda = yaml.safe_load((AUTOSCALING / "keda-scaledobject.yaml").read_text())
    for trigger in keda["spec"]["triggers"]:
        assert trigger["type"] == "prometheus"
        queries[f"keda:{trigger['name']}"] = trigger["metadata"]["query"]
    for key, expr in queries.items():  # the samples name the sample's object
        assert f'namespace="{SAMPLE_NAMESPACE}"' in expr, key
        assert f'sparkllm_io_cluster="{SAMPLE_NAME}"' in expr, key
        queries[key] = expr.replace(
            f'namespace="{SAMPLE_NAMESPACE}"', f'namespace="{namespace}"'
        ).replace(f'sparkllm_io_cluster="{SAMPLE_NAME}"', f'sparkllm_io_cluster="{NAME}"')
    return queries


@pytest.mark.sim_args("--sim-startup-seconds", str(STARTUP_SECONDS))
@pytest.mark.usefixtures("monitoring_crds")  # before the operator: it makes PodMonitors
def test_prometheus_scrapes_the_pod_monitors_and_every_query_has_data(
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
    operator.start("--metrics-port", str(ports["operator"]), *QUICK_RESYNC)
    with ExitStack() as stack:
        serving = stack.enter_context(
            serve(devcluster, namespace, name=NAME, model_dir=model_dir, groups=GROUPS,
                  log_dir=tmp_path / "gateway", monitoring={"interval": "1s"},
                  # the restart's chat is refused and counted, not held (gateway.md)
                  admission={"noReplicaHoldSeconds": 0})
        )  # fmt: skip
        stack.enter_context(dcgm_stand_in(ports["dcgm"]))
        for name, extra in (
            ("node", []),
            ("node_ib", [f"--path.sysfs={sysfs / 'sys'}", "--collector.disable-defaults",
                         "--collector.infiniband"]),
        ):  # fmt: skip
            argv = [node_exporter, f"--web.listen-address=127.0.0.1:{ports[name]}", *extra]
            stack.enter_context(process(argv, tmp_path / f"{name}.log"))
        monitors = pod_monitor_jobs(devcluster, namespace, serving.gateways.gateways())
        config = scrape_config(ports=ports, monitors=monitors)
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
        panels = sorted({title for title, _ in dashboard_exprs()})
        missing = panels_filled(url, namespace, timeout=90)
        assert missing == []
        assert query(url, f'sparkllm_replicas{{namespace="{namespace}", cluster="{NAME}"}}')
        wait_until(lambda: "SparkLLMReplicaRestarted" in firing(url), timeout=30, what="alert")
        alerts = alert_report(url)
        assert alerts["total"] == sum(len(g["rules"]) for g in rule_groups()["groups"])
        assert len(alerts["evaluated"]) == alerts["total"]
        assert "SparkLLMReplicaRestarted" in alerts["with_data"]
        assert alerts["inner_series_missing"] == {}
        samples = autoscaling_queries(namespace)
        samples_without_data = sorted(k for k, expr in samples.items() if not query(url, expr))
        assert samples_without_data == []
        print(json.dumps({
            "targets": sorted(jobs),
            "panels_with_data": f"{len(panels) - len(missing)}/{len(panels)}",
            "alerts_evaluated": f"{len(alerts['evaluated'])}/{alerts['total']}",
            "alerts_returning_data": alerts["with_data"],
            "alerts_fault_only_inner_series_with_data": (
                f"{len(alerts['fault_only'])}/{len(alerts['fault_only'])}"
            ),
            "fault_only": alerts["fault_only"],
            "autoscaling_samples_with_data": f"{len(samples) - len(samples_without_data)}/"
                                             f"{len(samples)}",
            "autoscaling_queries": samples,
        }, indent=1))  # fmt: skip


def targets_up(url: str) -> set[str]:
    """The scrape pools (job_name) whose every target is up."""
    active = httpx.get(f"{url}/api/v1/targets", timeout=10).json()["data"]["activeTargets"]
    pools = {t["scrapePool"] for t in active}
    down = {t["scrapePool"] for t in active if t["health"] != "up"}
    return pools - down


def firing(url: str) -> set[str]:
    alerts = httpx.get(f"{url}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
    return {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}
