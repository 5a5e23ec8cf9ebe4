"""spec.monitoring: the PodMonitors an InferenceCluster owns, and the Monitored condition.

The monitors are checked against what they must scrape, not against a copy of
themselves: their selectors must pick exactly the rank pods (or the gateway pod) that the
operator's own renderers lay out, every port they name must be a named container port of
those pods, and they must scrape what the chart's enginePodMonitor/gatewayPodMonitor
scrape (the same ports, paths and target labels), since the alerts and the dashboard group
by those labels. The decision is checked through ``decide`` itself: applied when the
cluster serves PodMonitor, pruned when switched off, left out (and said why) when the
API is not served or the list is forbidden.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from sparkllm.api import validate_inference_cluster
from sparkllm.errors import SpecError
from sparkllm.reconcile.decide import decide
from sparkllm.reconcile.decide.observation import Observation
from sparkllm.render.monitors import (
    ENGINE_PORTS,
    GATEWAY_PORTS,
    engines_monitor_name,
    gateway_monitor_name,
    render_monitors,
)
from tests.unit.reconcile_fixtures import (
    GATEWAY_IMAGE,
    NAME,
    NAMESPACE,
    UID,
    cluster,
    observation,
)
from tests.unit.test_chart_render import ALL_MONITORING, MONITORING_API, render_chart

JSON = dict[str, Any]


def monitors(**monitoring: Any) -> list[JSON]:
    return render_monitors(validate_inference_cluster(cluster(monitoring=monitoring)))


def by_name(objs: list[JSON]) -> dict[str, JSON]:
    return {o["metadata"]["name"]: o for o in objs}


def pod_templates() -> list[JSON]:
    """Every pod template the operator applies for the sample (ranks and gateway)."""
    plan = decide(observation(cluster()), gateway_image=GATEWAY_IMAGE)
    return [o["spec"]["template"] for o in plan.apply if o["kind"] in {"StatefulSet", "Deployment"}]


def selects(monitor: JSON, template: JSON) -> bool:
    labels = template["metadata"]["labels"]
    wanted = monitor["spec"]["selector"]["matchLabels"]
    return all(labels.get(k) == v for k, v in wanted.items())


def port_names(template: JSON) -> set[str]:
    return {
        p["name"]
        for c in template["spec"]["containers"]
        for p in c.get("ports") or []
        if "name" in p
    }


# --- render -------------------------------------------------------------------------------


def test_two_pod_monitors_owned_by_the_object() -> None:
    objs = monitors(labels={"release": "kube-prometheus-stack"}, interval="30s")
    assert sorted(by_name(objs)) == [engines_monitor_name(NAME), gateway_monitor_name(NAME)]
    for obj in objs:
        assert (obj["apiVersion"], obj["kind"]) == ("monitoring.coreos.com/v1", "PodMonitor")
        meta = obj["metadata"]
        assert meta["namespace"] == NAMESPACE
        [owner] = meta["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
            "InferenceCluster", NAME, UID, True,
        )  # fmt: skip
        # The spec's label, and the cluster's own (what the operator lists and prunes by).
        assert meta["labels"]["release"] == "kube-prometheus-stack"
        assert meta["labels"]["sparkllm.io/cluster"] == NAME
        assert obj["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
        assert {e["interval"] for e in obj["spec"]["podMetricsEndpoints"]} == {"30s"}
        assert "sparkllm.io/desired-hash" in meta["annotations"]


def test_switched_off_there_are_none() -> None:
    assert monitors(serviceMonitor=False) == []


def test_the_default_interval_is_the_charts() -> None:
    assert {e["interval"] for o in monitors() for e in o["spec"]["podMetricsEndpoints"]} == {"15s"}


def test_engines_monitor_selects_exactly_the_rank_pods_by_a_port_they_name() -> None:
    engines = by_name(monitors())[engines_monitor_name(NAME)]
    templates = pod_templates()
    chosen = [t for t in templates if selects(engines, t)]
    ranks = [t for t in templates if "sparkllm.io/rank" in t["metadata"]["labels"]]
    assert len(ranks) == 3  # the sample: one replica, PP 3
    assert chosen == ranks
    for template in chosen:
        assert set(ENGINE_PORTS) <= port_names(template)
    assert [e["port"] for e in engines["spec"]["podMetricsEndpoints"]] == list(ENGINE_PORTS)


def test_gateway_monitor_selects_the_gateway_pod_and_both_metrics_ports() -> None:
    gateway = by_name(monitors())[gateway_monitor_name(NAME)]
    chosen = [t for t in pod_templates() if selects(gateway, t)]
    assert len(chosen) == 1
    assert "sparkllm.io/rank" not in chosen[0]["metadata"]["labels"]
    assert set(GATEWAY_PORTS) <= port_names(chosen[0])
    assert [e["port"] for e in gateway["spec"]["podMetricsEndpoints"]] == list(GATEWAY_PORTS)


@pytest.mark.needs_binary  # helm
@pytest.mark.parametrize(
    ("ours", "charts"),
    [
        (engines_monitor_name(NAME), "sparkllm-engines"),
        (gateway_monitor_name(NAME), "sparkllm-gateways"),
    ],
)
def test_they_scrape_what_the_charts_pod_monitors_scrape(ours: str, charts: str) -> None:
    """Same ports, paths and target labels: the alerts and the dashboard read either."""
    chart = by_name([d for d in render_chart(ALL_MONITORING, api_versions=MONITORING_API) if d])[
        charts
    ]
    mine = by_name(monitors())[ours]
    assert mine["spec"]["podTargetLabels"] == chart["spec"]["podTargetLabels"]

    def endpoints(obj: JSON) -> list[tuple[str, str]]:
        return [(e["port"], e["path"]) for e in obj["spec"]["podMetricsEndpoints"]]

    assert endpoints(mine) == endpoints(chart)
    # The chart selects every object's pods of that component; ours only this object's.
    component = chart["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"]
    assert mine["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/component": component,
        "sparkllm.io/cluster": NAME,
    }


# --- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("monitoring", "message"),
    [
        ({"labels": {"sparkllm.io/cluster": "x"}}, "labels must not use the keys the operator"),
        ({"labels": {"app.kubernetes.io/name": "x"}}, "labels must not use the keys the operator"),
        ({"labels": {"bad key": "x"}}, "labels must have label keys"),
        ({"labels": {"release": "not a value"}}, "String should match pattern"),
        ({"labels": {f"k{i}": "v" for i in range(17)}}, "at most 16 items"),
        ({"interval": "15 s"}, "String should match pattern"),
        ({"interval": "0"}, "at least 2 characters"),
        ({"prometheusRule": True}, "Extra inputs are not permitted"),
    ],
    ids=["reserved-prefix", "reserved-k8s-prefix", "bad-key", "bad-value", "too-many",
         "bad-interval", "zero-interval", "prometheus-rule-gone"],
)  # fmt: skip
def test_a_bad_monitoring_spec_is_refused_naming_the_field(monitoring: JSON, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        validate_inference_cluster(cluster(monitoring=monitoring))
    text = str(caught.value)
    assert "spec.monitoring." in text
    assert message in text
    assert len(text.splitlines()) == 1


# --- the decision: applied, pruned, or why not ----------------------------------------------


def served(obs: Observation, *, forbidden: bool = False) -> Observation:
    observed = obs.observed
    if forbidden:
        observed = replace(observed, forbidden=frozenset({"PodMonitor"}))
    return replace(obs, pod_monitors_served=True, observed=observed)


def monitored(plan: Any) -> tuple[str, str, str] | None:
    for c in (plan.status or {}).get("conditions") or []:
        if c["type"] == "Monitored":
            return c["status"], c["reason"], c["message"]
    return None


def pod_monitors(objs: Any) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objs if o["kind"] == "PodMonitor")


def test_served_they_are_applied_and_monitored_is_true() -> None:
    plan = decide(served(observation(cluster())), gateway_image=GATEWAY_IMAGE)
    assert pod_monitors(plan.apply) == [engines_monitor_name(NAME), gateway_monitor_name(NAME)]
    assert plan.apply[-2:] == tuple(o for o in plan.apply if o["kind"] == "PodMonitor")
    status, reason, message = monitored(plan) or ("", "", "")
    assert (status, reason) == ("True", "MonitorsApplied")
    assert f"{NAME}-engines and {NAME}-gateway" in message
    assert "every 15s" in message


def test_live_and_current_they_are_not_written_again() -> None:
    first = decide(served(observation(cluster())), gateway_image=GATEWAY_IMAGE)
    live = [
        {**o, "metadata": {**o["metadata"], "uid": f"u-{o['metadata']['name']}"}}
        for o in first.apply
        if o["kind"] == "PodMonitor"
    ]
    plan = decide(served(observation(cluster(), objects=live)), gateway_image=GATEWAY_IMAGE)
    assert pod_monitors(plan.apply) == []
    assert [r.kind for r in plan.prune] == []


def test_not_served_there_are_none_and_the_condition_says_what_to_do() -> None:
    plan = decide(observation(cluster()), gateway_image=GATEWAY_IMAGE)
    assert pod_monitors(plan.apply) == []
    status, reason, message = monitored(plan) or ("", "", "")
    assert (status, reason) == ("False", "MonitoringUnavailable")
    assert message.startswith("this cluster does not serve PodMonitor (monitoring.coreos.com/v1)")
    assert "spec.monitoring.serviceMonitor to false" in message
    # A status note, not an alarm: no Warning Event for it.
    assert not [e for e in plan.events if "PodMonitor" in e.message]


def test_forbidden_there_are_none_and_the_condition_names_the_permission() -> None:
    plan = decide(served(observation(cluster()), forbidden=True), gateway_image=GATEWAY_IMAGE)
    assert pod_monitors(plan.apply) == []
    status, reason, message = monitored(plan) or ("", "", "")
    assert (status, reason) == ("False", "MonitoringUnavailable")
    assert "may not list podmonitors.monitoring.coreos.com in namespace llm (403)" in message
    assert "rbac.monitoringObjects" in message


def test_switched_off_live_ones_are_pruned_and_the_condition_says_so() -> None:
    on = served(observation(cluster()))
    first = decide(on, gateway_image=GATEWAY_IMAGE)
    live = [
        {**o, "metadata": {**o["metadata"], "uid": f"u-{o['metadata']['name']}"}}
        for o in first.apply
        if o["kind"] == "PodMonitor"
    ]
    previous = copy.deepcopy(first.status)
    off = cluster(monitoring={"serviceMonitor": False}, status=previous)
    plan = decide(served(observation(off, objects=live)), gateway_image=GATEWAY_IMAGE)
    assert sorted((r.kind, r.name, r.uid) for r in plan.prune) == [
        ("PodMonitor", engines_monitor_name(NAME), f"u-{engines_monitor_name(NAME)}"),
        ("PodMonitor", gateway_monitor_name(NAME), f"u-{gateway_monitor_name(NAME)}"),
    ]
    assert monitored(plan) == (
        "False", "MonitoringDisabled", "spec.monitoring.serviceMonitor is false: no PodMonitors",
    )  # fmt: skip


def test_never_on_there_is_no_condition() -> None:
    plan = decide(
        observation(cluster(monitoring={"serviceMonitor": False})), gateway_image=GATEWAY_IMAGE
    )
    assert monitored(plan) is None
    assert pod_monitors(plan.apply) == []
