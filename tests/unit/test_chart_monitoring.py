"""The chart's alerts and dashboard read series that really exist, with labels that do.

Metric names are checked against the exporters themselves: the operator's registry
(``sparkllm.reconcile.metrics``) and the SGLang simulator's (``sparkllm_dev.sim.metrics``,
which mirrors SGLang 0.5.23's names), and for the resource-safety alerts the exporters run
on the Sparks: node-exporter's own end-to-end fixture output (pinned Go module, cached by
hack/setup-test-tools.sh) and the DCGM exporter's field names (below). A renamed metric or
a typo in a PromQL expression fails here instead of silently never firing. The label
contract — the engine PodMonitor turns the rank pods' ``sparkllm.io/*`` labels into
``sparkllm_io_*`` target labels — is checked against what the operator actually renders
for a sample.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from prometheus_client import Counter, Gauge, Histogram

from sparkllm.gateway.metrics import GatewayMetrics
from sparkllm.offline import render_file
from sparkllm.reconcile import metrics as operator_metrics
from sparkllm_dev.devcluster.paths import cache_root
from sparkllm_dev.sim.metrics import EngineMetrics
from tests.unit.test_chart_render import (
    ALL_MONITORING,
    CHART,
    MONITORING_API,
    ROOT,
    one,
    render_chart,
)
from tests.unit.tooling import filled

# helm, and node-exporter's own metrics (hack/setup-test-tools.sh): every test but the
# oracle's sanity and the dashboard's shape reads one of them.
pytestmark = pytest.mark.needs_binary
METRIC_TOKEN = re.compile(
    r"\b(sparkllm_[a-z0-9_]+|sglang:[a-z0-9_:]+|node_[A-Za-z0-9_]+|DCGM_[A-Z0-9_]+|up)\b(?!\s*\()"
)
NODE_EXPORTER_VERSION = "v1.12.1"  # = hack/setup-test-tools.sh
# NVIDIA dcgm-exporter's default counters (etc/default-counters.csv): "DCGM_FI_DEV_XID_ERRORS,
# gauge, Value of the last XID error encountered." NVIDIA's Go modules are not served by
# the module proxy reachable here, so the one name read is pinned in this file.
DCGM_SERIES = {"DCGM_FI_DEV_XID_ERRORS"}
# node-exporter's meminfo collector exports every /proc/meminfo line as
# node_memory_<key>_bytes; its fixture's meminfo has no MemAvailable line (the kernel's own
# estimate since Linux 3.14), so that one is named here. The e2e Prometheus test reads it
# from a real node-exporter (tests/e2e/test_prometheus_scrape.py).
MEMINFO_SERIES = {"node_memory_MemAvailable_bytes"}
LABEL_PARTS = re.compile(r"\{[^}]*\}|\b(?:by|without)\s*\([^)]*\)")
Obj = dict[str, Any]


def operator_series() -> set[str]:
    names: set[str] = set()
    for value in vars(operator_metrics).values():
        if isinstance(value, Histogram):
            names |= {f"{value._name}_bucket", f"{value._name}_sum", f"{value._name}_count"}
        elif isinstance(value, Counter):
            names.add(f"{value._name}_total")
        elif isinstance(value, Gauge):
            names.add(value._name)
    return names


def engine_series() -> set[str]:
    engine = EngineMetrics(model_name="m", pp_rank=0, max_total_num_tokens=100)
    engine.observe_request(
        streaming=True,
        prompt_tokens=3,
        completion_tokens=2,
        ttft_seconds=0.1,
        e2e_seconds=0.2,
        inter_token_seconds=0.05,
    )
    return {s.name for family in engine.registry.collect() for s in family.samples}


def node_exporter_series() -> set[str]:
    """Every series node-exporter exports from its own test fixtures (all collectors)."""
    name = f"node_exporter-{NODE_EXPORTER_VERSION}.txt"
    path = filled(cache_root() / "exporter-metrics", marker=name) / name
    lines = path.read_text().splitlines()
    return {re.split(r"[{ ]", line)[0] for line in lines if line and not line.startswith("#")}


def gateway_series() -> set[str]:
    """The front door's series, the per-user ones included (one user's worth)."""
    gateway = GatewayMetrics()
    gateway.users.finished("u", outcome="ok", input_tokens=1, output_tokens=1)
    gateway.users.refused("u", reason="queue_full")
    gateway.users.waited("u", 0.1)
    return {s.name for family in gateway.registry.collect() for s in family.samples}


KNOWN = operator_series() | engine_series() | gateway_series() | {"up"}
RESOURCE_ALERTS = {
    "SparkLLMReplicaRestarted": "sparkllm_gang_restarts_total",
    "SparkLLMNodeMemoryPressure": "node_pressure_memory_waiting_seconds_total",
    "SparkLLMNodeSwapInUse": "node_memory_SwapFree_bytes",
    "SparkLLMNodeMemoryPressureFull": "node_pressure_memory_stalled_seconds_total",
    "SparkLLMNodeMemAvailableLow": "node_memory_MemAvailable_bytes",
    "SparkLLMNodeOOMKill": "node_vmstat_oom_kill",
    "SparkLLMGPUXIDError": "DCGM_FI_DEV_XID_ERRORS",
    "SparkLLMRDMAPortErrors": "node_infiniband_port_errors_received_total",
    "SparkLLMRDMALinkFlapping": "node_infiniband_link_downed_total",
}


def rule_of(values: Obj | None = None) -> Obj:
    objs = render_chart({**ALL_MONITORING, **(values or {})}, api_versions=MONITORING_API)
    return one(objs, "PrometheusRule")


def alerts(rule: Obj) -> dict[str, Obj]:
    return {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}


def dashboard_exprs() -> Iterator[tuple[str, str]]:
    dashboard = json.loads((CHART / "dashboards" / "sparkllm.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]


def test_the_exporters_are_what_we_think() -> None:
    """Sanity of the oracle itself: the series the issue names are exported."""
    assert {
        "sparkllm_gang_restarts_total",
        "sparkllm_replicas",
        "sglang:time_to_first_token_seconds_bucket",
        "sglang:token_usage",
        "sglang:num_queue_reqs",
    } <= KNOWN


@pytest.mark.parametrize(
    ("alert", "reads"),
    [
        ("SparkLLMRankDown", "up"),
        ("SparkLLMRestartLoop", "sparkllm_gang_restarts_total"),
        ("SparkLLMReplicaDegraded", 'sparkllm_replicas{phase="Degraded"}'),
        ("SparkLLMTimeToFirstTokenHigh", "sglang:time_to_first_token_seconds_bucket"),
        ("SparkLLMKVCacheNearlyFull", "sglang:token_usage"),
        ("SparkLLMQueueGrowing", "sglang:num_queue_reqs"),
    ],
)
def test_each_required_alert_reads_its_series(alert: str, reads: str) -> None:
    rule = alerts(rule_of())[alert]
    assert reads in rule["expr"]
    assert rule["labels"]["severity"] in {"warning", "critical"}
    assert rule["annotations"]["summary"]
    assert rule["annotations"]["description"]


def test_every_series_in_alerts_and_dashboard_exists() -> None:
    known = KNOWN | node_exporter_series() | DCGM_SERIES | MEMINFO_SERIES
    exprs = [(name, r["expr"]) for name, r in alerts(rule_of()).items()]
    exprs += list(dashboard_exprs())
    assert len(exprs) > 10
    for where, expr in exprs:
        used = set(METRIC_TOKEN.findall(LABEL_PARTS.sub(" ", expr)))
        assert used, f"{where}: no metric in {expr}"
        assert used <= known, f"{where}: unknown series {used - known}"
        assert expr.count("(") == expr.count(")"), f"{where}: unbalanced {expr}"
        assert expr.count("{") == expr.count("}"), f"{where}: unbalanced {expr}"


def test_the_node_exporter_oracle_has_the_collectors_we_read() -> None:
    """Sanity of the oracle: pressure, infiniband, vmstat and meminfo are in the fixture."""
    assert {
        "node_pressure_memory_waiting_seconds_total",
        "node_memory_SwapTotal_bytes",
        "node_vmstat_oom_kill",
        "node_infiniband_port_errors_received_total",
        "node_infiniband_link_downed_total",
    } <= node_exporter_series()


@pytest.mark.parametrize(("alert", "reads"), sorted(RESOURCE_ALERTS.items()))
def test_each_resource_alert_reads_its_series_and_has_a_panel(alert: str, reads: str) -> None:
    """Acceptance point 5 (no OOM, swap, PSI, restarts, GPU/RDMA errors): alert + panel."""
    rule = alerts(rule_of())[alert]
    assert reads in rule["expr"]
    assert rule["labels"]["severity"] in {"warning", "critical"}
    assert rule["annotations"]["summary"]
    assert rule["annotations"]["description"]
    assert any(reads in expr for _, expr in dashboard_exprs()), f"no panel reads {reads}"


CHANGED_THRESHOLDS = {
    "enabled": True,
    "ttftP95Seconds": 7.5,
    "kvUsageRatio": 0.8,
    "queueLength": 12,
    "restartsPerHour": 4,
    "memoryPressureRatio": 0.25,
    "swapUsedBytes": 1048576,
    "memoryPressureFullRatio": 0.02,
    "memAvailableBytes": 16000000000,
}


def test_thresholds_come_from_values() -> None:
    rules = alerts(rule_of({"prometheusRule": CHANGED_THRESHOLDS}))
    assert rules["SparkLLMNodeMemoryPressure"]["expr"].endswith("> 0.25")
    assert rules["SparkLLMNodeSwapInUse"]["expr"].endswith("> 1048576")
    assert rules["SparkLLMNodeMemoryPressureFull"]["expr"].endswith("> 0.02")
    assert rules["SparkLLMNodeMemAvailableLow"]["expr"].endswith("< 16000000000")
    assert rules["SparkLLMTimeToFirstTokenHigh"]["expr"].endswith("> 7.5")
    assert rules["SparkLLMKVCacheNearlyFull"]["expr"].endswith("> 0.8")
    assert "> 12 and" in rules["SparkLLMQueueGrowing"]["expr"]
    assert rules["SparkLLMRestartLoop"]["expr"].endswith(">= 4")


def test_alert_templates_survive_helm() -> None:
    """Prometheus' own {{ $labels.x }} must reach the object unexpanded by Helm."""
    summary = alerts(rule_of())["SparkLLMRankDown"]["annotations"]["summary"]
    assert "{{ $labels.sparkllm_io_rank }}" in summary


def test_engine_pod_monitor_matches_what_the_operator_renders() -> None:
    monitor = one(
        render_chart({**ALL_MONITORING, "watchNamespaces": ["llm"]}, api_versions=MONITORING_API),
        "PodMonitor",
        "sparkllm-engines",
    )
    rendered = yaml.safe_load_all(
        render_file(
            str(ROOT / "manifests" / "samples" / "deepseek-v4-flash.yaml"),
            node_ips={},
            namespace="llm",
        )
    )
    pods = [o["spec"]["template"] for o in rendered if o and o["kind"] == "StatefulSet"]
    assert len(pods) == 3
    selector = monitor["spec"]["selector"]
    for pod in pods:
        labels = pod["metadata"]["labels"]
        assert selector["matchLabels"].items() <= labels.items()
        assert all(e["key"] in labels for e in selector["matchExpressions"])
        assert set(monitor["spec"]["podTargetLabels"]) <= labels.keys()
        ports = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
        assert monitor["spec"]["podMetricsEndpoints"][0]["port"] in ports
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["llm"]}
    # Prometheus sanitises the label names: sparkllm.io/rank -> sparkllm_io_rank.
    expr = alerts(rule_of())["SparkLLMRankDown"]["expr"]
    assert "sparkllm_io_rank" in expr


def test_gateway_pod_monitor_scrapes_the_metrics_ports_no_service_carries() -> None:
    """Issue 25: the admission layer's metrics (per-user series) left the users' port;
    Prometheus reaches them on the pod, by ports no exposure object can route."""
    monitor = one(
        render_chart({**ALL_MONITORING, "watchNamespaces": ["llm"]}, api_versions=MONITORING_API),
        "PodMonitor",
        "sparkllm-gateways",
    )
    rendered = [
        o
        for o in yaml.safe_load_all(
            render_file(
                str(ROOT / "manifests" / "samples" / "deepseek-v4-flash.yaml"),
                node_ips={},
                namespace="llm",
            )
        )
        if o
    ]
    (deployment,) = [o for o in rendered if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]
    selector = monitor["spec"]["selector"]
    assert selector["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert all(e["key"] in pod["metadata"]["labels"] for e in selector["matchExpressions"])
    assert set(monitor["spec"]["podTargetLabels"]) <= pod["metadata"]["labels"].keys()
    pod_ports = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
    scraped = [e["port"] for e in monitor["spec"]["podMetricsEndpoints"]]
    assert scraped == ["metrics", "router-metrics"]
    assert set(scraped) <= pod_ports
    (service,) = [o for o in rendered if o["kind"] == "Service" and o["metadata"]["name"] == (
        deployment["metadata"]["name"])]  # fmt: skip
    assert {p["targetPort"] for p in service["spec"]["ports"]}.isdisjoint(scraped)
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["llm"]}


def test_operator_service_monitor_keeps_the_metrics_namespace_label() -> None:
    monitor = one(render_chart(ALL_MONITORING, api_versions=MONITORING_API), "ServiceMonitor")
    endpoint = monitor["spec"]["endpoints"][0]
    assert endpoint["port"] == "metrics"
    assert endpoint["honorLabels"] is True  # sparkllm_* carry the InferenceCluster namespace


def test_dashboard_is_a_grafana_dashboard_with_its_variables() -> None:
    dashboard = json.loads((CHART / "dashboards" / "sparkllm.json").read_text())
    assert dashboard["uid"] == "sparkllm-overview"
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert variables == {"datasource", "namespace", "cluster"}
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for title, expr in dashboard_exprs():
        used = set(re.findall(r"\$(\w+)", expr))
        assert used <= variables, f"{title}: undefined variable {used - variables}"
