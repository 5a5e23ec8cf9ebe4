"""The PodMonitors of one InferenceCluster (``spec.monitoring.serviceMonitor``). Pure.

Why PodMonitors, and two: every rank runs with host networking and only rank 0 has a
Service, and the front door's metrics ports are in no Service on purpose (its per-user
series must not be routable), so Prometheus has to scrape the pods. The ranks and the
gateway expose different ports, and a PodMonitor endpoint names a port every selected pod
should have, so each kind of pod gets its own: ``N-engines`` (SGLang's ``/metrics`` on
port ``http``) and ``N-gateway`` (the admission layer's ``metrics`` and smg's
``router-metrics``). They mirror the chart's ``metrics.enginePodMonitor`` and
``metrics.gatewayPodMonitor`` (target labels ``sparkllm_io_cluster``/``_replica``/``_rank``,
what the alerts and the dashboard group by), scoped to this one object: use either the
chart's or these, not both, or every series is scraped twice.

Owned like every other object (owner reference, the cluster's labels, pruned by label
when switched off); ``spec.monitoring.labels`` are added for a Prometheus that selects
monitors by label. Whether the cluster serves PodMonitor is the observe step's finding;
the decision to leave them out, and the ``Monitored`` condition, are decide's
(``reconcile/decide/monitoring.py``).
"""

from __future__ import annotations

from typing import Final

from sparkllm.api import InferenceCluster
from sparkllm.keys import LABEL_CLUSTER, LABEL_RANK, LABEL_REPLICA
from sparkllm.render.gateway import gateway_selector_labels
from sparkllm.render.names import (
    COMPONENT_ENGINE,
    COMPONENT_GATEWAY,
    LABEL_COMPONENT,
    cluster_labels,
    owner_reference,
)
from sparkllm.render.objects import JSON, render_template, stamp_hash

POD_MONITOR_API_VERSION: Final = "monitoring.coreos.com/v1"
POD_MONITOR_KIND: Final = "PodMonitor"
METRICS_PATH: Final = "/metrics"
# The named container ports scraped (templates/rank_statefulset.yaml.j2 and
# gateway_deployment.yaml.j2 name them; tests/unit/test_render_monitors.py holds them to it).
ENGINE_PORTS: Final = ("http",)
GATEWAY_PORTS: Final = ("metrics", "router-metrics")
ENGINE_TARGET_LABELS: Final = (LABEL_CLUSTER, LABEL_REPLICA, LABEL_RANK)
GATEWAY_TARGET_LABELS: Final = (LABEL_CLUSTER,)


def engines_monitor_name(cluster: str) -> str:
    return f"{cluster}-engines"


def gateway_monitor_name(cluster: str) -> str:
    return f"{cluster}-gateway"


def render_monitors(ic: InferenceCluster) -> list[JSON]:
    """The two PodMonitors, stamped; none when ``spec.monitoring.serviceMonitor`` is off."""
    monitoring = ic.spec.monitoring
    if not monitoring.service_monitor:
        return []
    name = ic.metadata.name
    engines = {LABEL_CLUSTER: name, LABEL_COMPONENT: COMPONENT_ENGINE}
    return [
        _pod_monitor(ic, engines_monitor_name(name), component=COMPONENT_ENGINE,
                     selector=engines, target_labels=ENGINE_TARGET_LABELS, ports=ENGINE_PORTS),
        _pod_monitor(ic, gateway_monitor_name(name), component=COMPONENT_GATEWAY,
                     selector=gateway_selector_labels(name),
                     target_labels=GATEWAY_TARGET_LABELS, ports=GATEWAY_PORTS),
    ]  # fmt: skip


def _pod_monitor(
    ic: InferenceCluster,
    name: str,
    *,
    component: str,
    selector: dict[str, str],
    target_labels: tuple[str, ...],
    ports: tuple[str, ...],
) -> JSON:
    cluster, monitoring = ic.metadata.name, ic.spec.monitoring
    # The spec's labels first: the operator's own (what it prunes by) cannot be overridden
    # (the API refuses those keys anyway).
    labels = {**monitoring.labels, **cluster_labels(cluster, component)}
    endpoints = [
        {"port": port, "path": METRICS_PATH, "interval": monitoring.interval} for port in ports
    ]
    obj = render_template(
        "pod_monitor.yaml.j2",
        name=name,
        namespace=ic.metadata.namespace or "default",
        labels=labels,
        owner=owner_reference(name=cluster, uid=ic.metadata.uid or ""),
        selector=selector,
        target_labels=list(target_labels),
        endpoints=endpoints,
    )
    return stamp_hash(obj)


__all__ = [
    "ENGINE_PORTS",
    "GATEWAY_PORTS",
    "POD_MONITOR_API_VERSION",
    "POD_MONITOR_KIND",
    "engines_monitor_name",
    "gateway_monitor_name",
    "render_monitors",
]
