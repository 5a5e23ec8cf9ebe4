"""The monitoring objects on a real API server: the chart's, and each InferenceCluster's own.

kubeconform (tests/unit/test_chart_kubeconform.py) checks the chart's against the Prometheus
Operator's CRD schemas converted to JSON schema; here the API server itself judges them: the
Prometheus Operator's own CRDs (pinned, from the Go module proxy, cached by
hack/setup-test-tools.sh) are installed on the dev cluster for this module only, and every
monitoring object of the chart is created with a server-side dry run (strict field
validation: an unknown field is an error, not a warning). Controls show the server really
applies the schemas.

Then the operator's own PodMonitors (spec.monitoring), made by the real operator running
with nothing but the chart's RBAC: first as installed before the Prometheus Operator (the
chart grants no PodMonitor permissions then) — the pass goes on and the Monitored
condition names the 403 —, then after the "helm upgrade" that grants them: both
PodMonitors applied (owned, with the spec's labels and interval), re-applied when the
interval changes, pruned when switched off. The CRDs are removed afterwards (and the
PodMonitors with them): the rest of the suite runs on a cluster without
monitoring.coreos.com, as the chart's defaults assume.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkllm_dev.devcluster import DevCluster, wait_until
from sparkllm_dev.testing import ROOT, OperatorProcess
from tests.integration.test_rbac import (
    Identity,
    audit_writes_by,
    chart_identity,
    condition,
    sample,
    token_kubeconfig,
)
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


# --- the operator's own PodMonitors ------------------------------------------------------

NAME = "deepseek-v4-flash"
PASS_DEADLINE = 120  # seconds: one pass after a spec change, on a busy machine


def pod_monitors(cluster: DevCluster, namespace: str) -> dict[str, dict[str, Any]]:
    items = cluster.kubectl_json(
        "get", "podmonitors", "-n", namespace, "-l", f"sparkllm.io/cluster={NAME}"
    )["items"]
    return {i["metadata"]["name"]: i for i in items}


def monitored(
    cluster: DevCluster, namespace: str, *, status: str | None = None
) -> Mapping[str, Any] | None:
    """The Monitored condition of the current generation (with ``status``, if given)."""
    obj = cluster.kubectl_json("get", "icl", NAME, "-n", namespace)
    found = condition(obj, "Monitored")
    if found is None or found.get("observedGeneration") != obj["metadata"]["generation"]:
        return None
    return found if status in {None, found["status"]} else None


def granted(cluster: DevCluster, identity: Identity, verb: str, resource: str) -> bool:
    """Whether the API server's authorizer already holds the RBAC just applied."""
    answer = cluster.kubectl(
        "auth", "can-i", verb, resource, "-n", identity.namespace, f"--as={identity.user}",
        check=False,
    )  # fmt: skip
    return answer.stdout.strip() == "yes"


def patch_monitoring(cluster: DevCluster, namespace: str, monitoring: dict[str, Any]) -> None:
    body = json.dumps({"spec": {"monitoring": monitoring}})
    cluster.kubectl("patch", "icl", NAME, "-n", namespace, "--type=merge", "-p", body)


def test_the_operator_owns_its_pod_monitors_with_the_charts_permissions(
    devcluster: DevCluster, monitoring_crds: None, namespace: str, tmp_path: Path
) -> None:
    devcluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    devcluster.wait_established("inferenceclusters.sparkllm.io")
    devcluster.kubectl(
        "create", "secret", "generic", "llm-user-keys", "-n", namespace,
        "--from-literal=alice=not-a-real-key",
    )  # fmt: skip
    doc = sample(namespace)
    doc["spec"]["monitoring"] = {"labels": {"release": "prom"}, "interval": "30s"}
    # The chart as installed before the Prometheus Operator: no PodMonitor permissions.
    with chart_identity(devcluster, namespace) as identity:
        kubeconfig = token_kubeconfig(devcluster, identity, tmp_path / "operator.kubeconfig")
        wait_until(lambda: granted(devcluster, identity, "list", "pods"), timeout=30, what="RBAC")
        operator = OperatorProcess(devcluster, [namespace], str(tmp_path / "operator.log"))
        operator.start("--kubeconfig", str(kubeconfig))
        try:
            devcluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))
            refused = wait_until(
                lambda: monitored(devcluster, namespace),
                timeout=PASS_DEADLINE,
                interval=1,
                what="the Monitored condition (PodMonitors forbidden)",
            )
            print("[monitoring] forbidden:", refused["reason"], refused["message"])
            assert (refused["status"], refused["reason"]) == ("False", "MonitoringUnavailable")
            assert (
                f"may not list podmonitors.monitoring.coreos.com in namespace {namespace} (403)"
                in refused["message"]
            )
            assert pod_monitors(devcluster, namespace) == {}
            # The pass went on: the front door and the ranks were applied all the same.
            assert devcluster.kubectl_json("get", "deployment", NAME, "-n", namespace)

            # helm upgrade now that the API is served: the chart's rbac.monitoringObjects.
            with chart_identity(devcluster, namespace, api_versions=MONITORING_API):
                wait_until(
                    lambda: granted(devcluster, identity, "list", "podmonitors"),
                    timeout=30,
                    what="the chart's PodMonitor permissions in force",
                )
                started = time.monotonic()
                patch_monitoring(devcluster, namespace, {"interval": "20s"})  # starts a pass
                applied = wait_until(
                    lambda: monitored(devcluster, namespace, status="True"),
                    timeout=PASS_DEADLINE,
                    interval=1,
                    what="Monitored=True once the chart grants PodMonitors",
                )
                print(f"[monitoring] applied after {time.monotonic() - started:.1f} s")
                monitors = pod_monitors(devcluster, namespace)
                uid = devcluster.kubectl_json("get", "icl", NAME, "-n", namespace)["metadata"][
                    "uid"
                ]
                assert sorted(monitors) == [f"{NAME}-engines", f"{NAME}-gateway"]
                for monitor in monitors.values():
                    [owner] = monitor["metadata"]["ownerReferences"]
                    assert (owner["kind"], owner["uid"], owner["controller"]) == (
                        "InferenceCluster", uid, True,
                    )  # fmt: skip
                    assert monitor["metadata"]["labels"]["release"] == "prom"
                    endpoints = monitor["spec"]["podMetricsEndpoints"]
                    assert {e["interval"] for e in endpoints} == {"20s"}
                print("[monitoring]", applied["reason"], applied["message"])

                patch_monitoring(devcluster, namespace, {"interval": "25s"})
                wait_until(
                    lambda: (
                        {
                            e["interval"]
                            for m in pod_monitors(devcluster, namespace).values()
                            for e in m["spec"]["podMetricsEndpoints"]
                        }
                        == {"25s"}
                    ),
                    timeout=PASS_DEADLINE,
                    interval=1,
                    what="both PodMonitors re-applied with the new interval",
                )

                patch_monitoring(devcluster, namespace, {"serviceMonitor": False})
                wait_until(
                    lambda: not pod_monitors(devcluster, namespace),
                    timeout=PASS_DEADLINE,
                    interval=1,
                    what="the PodMonitors pruned once switched off",
                )
                off = wait_until(
                    lambda: monitored(devcluster, namespace),
                    timeout=PASS_DEADLINE,
                    interval=1,
                    what="Monitored for the new generation",
                )
                assert (off["status"], off["reason"]) == ("False", "MonitoringDisabled")
                # Stopped before this context deletes the ClusterRoles it applied: a pass
                # meanwhile would be refused its every read.
                operator.stop()
        finally:
            devcluster.kubectl("delete", "icl", "--all", "-n", namespace, "--wait=false")
            operator.stop()
        writes = {
            w for w in audit_writes_by(devcluster, identity.user, namespace)
            if w[1] == "podmonitors"
        }  # fmt: skip
        print("[monitoring] PodMonitor writes:", sorted(writes))
        # Server-side apply (patch; it creates with the create permission), then prune.
        assert writes == {("patch", "podmonitors", ""), ("delete", "podmonitors", "")}
    # No pass failed for a refusal (the PodMonitor 403 is read as none, the rest is
    # granted); a transient transport error on this busy machine is retried by design.
    failures = re.split(r"\n(?=\d{4}-\d\d-\d\d )", operator.log())
    refused = [f for f in failures if "Traceback" in f and re.search(r"\b403\b|forbidden", f)]
    assert not refused, refused[0][-3000:]
