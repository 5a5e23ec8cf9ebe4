"""``spec.monitoring``: the PodMonitors to apply, and the ``Monitored`` condition. Pure.

Why a decision and not just a render: whether the monitors can exist is a fact of the
cluster, not of the spec. The PodMonitor CRD is optional (the Prometheus Operator's), and
the chart grants the operator PodMonitor permissions only when the API was served at
install or upgrade time, so a cluster may serve the kind and still refuse the operator
its list. Either way the pass goes on — serving never waits on monitoring — and the
condition says why there are no monitors and what to do; a spec that switches them off
gets them pruned (they are simply no longer desired).

``observe`` supplies the facts: ``served`` (API discovery, asked only while the spec
wants monitors) and ``Observed.forbidden`` (a 403 on the list).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparkllm.api import ConditionType, InferenceCluster, Reason
from sparkllm.reconcile.decide.actions import JSON
from sparkllm.reconcile.decide.owned import POD_MONITOR
from sparkllm.reconcile.decide.replicas import Observed
from sparkllm.reconcile.decide.status import condition
from sparkllm.render.monitors import engines_monitor_name, gateway_monitor_name, render_monitors


@dataclass(frozen=True)
class MonitorsDecision:
    """The PodMonitors to have, and the Monitored condition to write (if any)."""

    objects: tuple[JSON, ...] = ()
    conditions: tuple[JSON, ...] = ()


def decide_monitors(
    ic: InferenceCluster,
    observed: Observed,
    *,
    served: bool,
    previous: Mapping[str, Any],
    generation: int,
) -> MonitorsDecision:
    """What ``spec.monitoring`` asks for, as far as the cluster allows."""
    name, namespace = ic.metadata.name, ic.metadata.namespace or "default"

    def monitored(status: bool, reason: Reason, message: str) -> tuple[JSON, ...]:
        kind = ConditionType.MONITORED
        return (
            condition(kind, status=status, reason=reason, message=message,
                      generation=generation),
        )  # fmt: skip

    if not ic.spec.monitoring.service_monitor:
        was_on = any(
            c.get("type") == ConditionType.MONITORED.value for c in previous.get("conditions") or []
        )
        message = "spec.monitoring.serviceMonitor is false: no PodMonitors"
        return MonitorsDecision(
            conditions=monitored(False, Reason.MONITORING_DISABLED, message) if was_on else ()
        )
    monitors = f"PodMonitors {engines_monitor_name(name)} and {gateway_monitor_name(name)}"
    if not served:
        message = (
            f"this cluster does not serve {POD_MONITOR.kind} ({POD_MONITOR.api_version}): "
            f"install the Prometheus Operator's CRDs to have the {monitors} created, or set "
            "spec.monitoring.serviceMonitor to false; serving is not affected"
        )
        return MonitorsDecision(conditions=monitored(False, Reason.MONITORING_UNAVAILABLE, message))
    if POD_MONITOR.kind in observed.forbidden:
        message = (
            f"the operator may not list {POD_MONITOR.plural}.monitoring.coreos.com in "
            f"namespace {namespace} (403): grant it list, create, patch and delete on them "
            "(the chart's rbac.monitoringObjects does, when the API is served at install or "
            f"upgrade time: run helm upgrade) to have the {monitors} created, or set "
            "spec.monitoring.serviceMonitor to false; serving is not affected"
        )
        return MonitorsDecision(conditions=monitored(False, Reason.MONITORING_UNAVAILABLE, message))
    interval = ic.spec.monitoring.interval
    message = (
        f"{monitors} scrape every rank's /metrics and the front door's metrics and "
        f"router-metrics ports every {interval}"
    )
    return MonitorsDecision(
        objects=tuple(render_monitors(ic)),
        conditions=monitored(True, Reason.MONITORS_APPLIED, message),
    )
