"""The chart's ServiceMonitor, PodMonitor and PrometheusRule, accepted by a real API server.

kubeconform (tests/unit/test_chart_kubeconform.py) checks them against the Prometheus
Operator's CRD schemas converted to JSON schema; here the API server itself judges them: the
Prometheus Operator's own CRDs (pinned, from the Go module proxy, cached by
hack/setup-test-tools.sh) are installed on the dev cluster for this module only, and every
monitoring object of the chart is created with a server-side dry run (strict field
validation: an unknown field is an error, not a warning). Controls show the server really
applies the schemas. The CRDs are removed afterwards: the rest of the suite runs on a
cluster without monitoring.coreos.com, as the chart's defaults assume.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from sparkllm_dev.devcluster import DevCluster, wait_until
from tests.unit.test_chart_kubeconform import MONITORING_KINDS, monitoring_crd_files
from tests.unit.test_chart_render import ALL_MONITORING, MONITORING_API, render_chart

pytestmark = pytest.mark.cluster
CRDS = ("servicemonitors", "podmonitors", "prometheusrules")


@pytest.fixture(scope="module")
def monitoring_crds(devcluster: DevCluster) -> Iterator[None]:
    files = monitoring_crd_files()
    args = [a for path in files for a in ("-f", str(path))]
    try:  # removed even when setup fails half-way: later files assume a cluster without them
        devcluster.kubectl("apply", "--server-side", "--force-conflicts", *args)
        for name in CRDS:
            devcluster.wait_established(f"{name}.monitoring.coreos.com")
        yield
    finally:
        devcluster.kubectl("delete", "--wait=true", "--ignore-not-found", *args, timeout=120)
        wait_until(
            lambda: (
                "monitoring.coreos.com"
                not in devcluster.kubectl("api-versions", check=False).stdout
            ),
            timeout=60,
            what="the monitoring.coreos.com API to go away",
        )


def monitoring_objects(namespace: str) -> list[dict[str, Any]]:
    docs = render_chart(
        {**ALL_MONITORING, "watchNamespaces": [namespace]},
        api_versions=MONITORING_API,
        namespace=namespace,
    )
    objs = [d for d in docs if d["kind"] in MONITORING_KINDS]
    # two PodMonitors (engines, gateways), one of each other kind
    assert sorted(d["kind"] for d in objs) == sorted([*MONITORING_KINDS, "PodMonitor"])
    return objs


def dry_run(cluster: DevCluster, objs: list[dict[str, Any]]) -> tuple[int, str]:
    result = cluster.kubectl(
        "create", "--dry-run=server", "--validate=strict", "-o", "name", "-f", "-",
        input=yaml.safe_dump_all(objs),
        check=False,
    )  # fmt: skip
    return result.returncode, result.stdout + result.stderr


def test_the_api_server_accepts_the_monitoring_objects(
    devcluster: DevCluster, monitoring_crds: None, namespace: str
) -> None:
    objs = monitoring_objects(namespace)
    code, output = dry_run(devcluster, objs)
    assert code == 0, output
    print(output)
    accepted = set(output.split())
    for obj in objs:
        group = obj["apiVersion"].split("/")[0]
        assert f"{obj['kind'].lower()}.{group}/{obj['metadata']['name']}" in accepted, output


def _bad_duration(obj: dict[str, Any]) -> str:
    obj["spec"]["groups"][0]["rules"][0]["for"] = "2 min"
    return "for"


def _unknown_field(obj: dict[str, Any]) -> str:
    obj["spec"]["endpoints"][0]["scrapeEvery"] = "1m"
    return "scrapeEvery"


def _wrong_type(obj: dict[str, Any]) -> str:
    obj["spec"]["podTargetLabels"] = "sparkllm.io/rank"
    return "podTargetLabels"


BROKEN = {
    "rule-bad-duration": ("PrometheusRule", _bad_duration),
    "servicemonitor-unknown-field": ("ServiceMonitor", _unknown_field),
    "podmonitor-wrong-type": ("PodMonitor", _wrong_type),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_the_api_server_refuses_a_broken_one(
    devcluster: DevCluster, monitoring_crds: None, namespace: str, case: str
) -> None:
    """Control: the server applies the Prometheus Operator's schemas to what we send."""
    kind, mutate = BROKEN[case]
    obj = next(o for o in monitoring_objects(namespace) if o["kind"] == kind)
    complaint = mutate(obj)
    code, output = dry_run(devcluster, [obj])
    assert code != 0, output
    assert complaint in output
