"""`helm install`, `helm upgrade`, `helm uninstall` of the chart on the real local API server.

One release per test, in the test's namespace, watching that namespace, named after the
namespace's random suffix (so its cluster-scoped objects are unique on the shared
cluster). The operator pods are kwok-simulated: they are scheduled and "run" but execute
nothing — what is checked is what Helm and the API server make of the chart: every
object created, StatefulSet pods
carrying the pod-index label the HA priority is read from, upgrades that add and remove
objects, a wrong value refused without touching the release, and an uninstall that keeps
the CRDs and the InferenceClusters (the models) in place.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkllm_dev.devcluster import DevCluster, wait_until
from sparkllm_dev.testing import ROOT
from tests.unit.test_chart_render import CHART, require_binary, run_helm

pytestmark = pytest.mark.cluster


class Release:
    """helm against the dev cluster, for one release in one namespace."""

    def __init__(self, cluster: DevCluster, namespace: str, tmp: Path) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.name = f"inst-{namespace[-5:]}"  # unique: cluster-scoped names derive from it
        self.tmp = tmp

    def helm(self, *args: str, values: dict[str, Any] | None = None, check: bool = True) -> Any:
        flags = ["--kubeconfig", str(self.cluster.paths.kubeconfig), "-n", self.namespace]
        if args[0] in ("install", "upgrade"):
            # The suite's cluster has the CRD from crds/ (kubectl apply), and one release
            # per cluster may own it: these releases leave it alone (test_upgrade.py has
            # the chart applying it, kept through upgrade, rollback and uninstall).
            flags += ["--set", "crds.install=false"]
        if values is not None:
            path = self.tmp / f"values-{len(list(self.tmp.iterdir()))}.yaml"
            path.write_text(yaml.safe_dump(values))
            flags += ["-f", str(path)]
        return run_helm(*args, *flags, check=check)

    def objects(self) -> list[dict[str, Any]]:
        manifest = self.helm("get", "manifest", self.name).stdout
        return [d for d in yaml.safe_load_all(manifest) if d]

    def exists(self, kind: str, name: str, namespace: str | None = None) -> bool:
        args = ["get", kind, name]
        if namespace is not None:
            args += ["-n", namespace]
        return self.cluster.kubectl(*args, check=False).returncode == 0


@pytest.fixture
def release(devcluster: DevCluster, namespace: str, tmp_path: Path) -> Iterator[Release]:
    require_binary("helm")
    rel = Release(devcluster, namespace, tmp_path)
    yield rel
    rel.helm("uninstall", rel.name, "--wait", "--timeout=60s", check=False)


def live(cluster: DevCluster, obj: dict[str, Any]) -> bool:
    args = ["get", f"{obj['kind']}.{obj['apiVersion'].split('/')[0]}", obj["metadata"]["name"]]
    if "/" not in obj["apiVersion"]:
        args[1] = obj["kind"]
    if obj["metadata"].get("namespace"):
        args += ["-n", obj["metadata"]["namespace"]]
    return cluster.kubectl(*args, check=False).returncode == 0


def test_install_upgrade_uninstall(devcluster: DevCluster, release: Release) -> None:
    ns = release.namespace
    values = {
        "watchNamespaces": [ns],
        "replicas": 2,
        "metrics": {"serviceMonitor": {"enabled": True, "interval": "30s", "labels": {}}},
    }
    # The suite's cluster normally has no Prometheus operator CRDs (test_monitoring_crds
    # installs them for its module only); a run killed mid-module can leave them behind,
    # and then the chart must create the ServiceMonitor instead of warning.
    monitoring = "monitoring.coreos.com/v1" in devcluster.kubectl("api-versions").stdout
    installed = release.helm("install", release.name, str(CHART), values=values)
    # Without the Prometheus operator the ServiceMonitor is left out, loudly.
    assert ("were NOT created" in installed.stdout) is not monitoring

    objs = release.objects()
    kinds = sorted(o["kind"] for o in objs)
    assert kinds == sorted(
        [
            "ClusterRole", "ClusterRole", "ClusterRoleBinding", "KopfPeering",
            "PodDisruptionBudget", "RoleBinding", "Service", "ServiceAccount", "StatefulSet",
            "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
        ]
        + (["ServiceMonitor"] if monitoring else [])
    )  # fmt: skip
    for obj in objs:
        assert live(devcluster, obj), f"{obj['kind']} {obj['metadata']['name']} not created"
    # Helm installed the CRDs from crds/ (or found them): both kinds are served.
    for crd in ("inferenceclusters.sparkllm.io", "kopfpeerings.kopf.dev"):
        assert release.exists("crd", crd)
    sts = next(o for o in objs if o["kind"] == "StatefulSet")

    # The StatefulSet controller really makes two pods, each labelled with its index —
    # the kopf priority `--priority=$(POD_INDEX)` reads.
    def pods() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = devcluster.kubectl_json(
            "get", "pods", "-n", ns, "-l", "app.kubernetes.io/component=operator"
        )["items"]
        return items

    wait_until(lambda: len(pods()) == 2, timeout=90, interval=1, what="two operator pods")
    indexes = sorted(p["metadata"]["labels"].get("apps.kubernetes.io/pod-index") for p in pods())
    assert indexes == ["0", "1"]

    # Upgrade: one replica (no peering), verbose.
    release.helm(
        "upgrade", release.name, str(CHART),
        values={"watchNamespaces": [ns], "replicas": 1, "operator": {"verbose": True}},
    )  # fmt: skip
    upgraded = release.objects()
    assert not [o for o in upgraded if o["kind"] in {"KopfPeering", "PodDisruptionBudget"}]
    live_sts = devcluster.kubectl_json("get", "statefulset", sts["metadata"]["name"], "-n", ns)
    assert live_sts["spec"]["replicas"] == 1
    assert "--verbose" in live_sts["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not release.exists("kopfpeering", "sparkllm", ns)
    wait_until(lambda: len(pods()) == 1, timeout=90, interval=1, what="one operator pod")

    # A wrong value is refused before anything changes.
    refused = release.helm(
        "upgrade", release.name, str(CHART), values={"replicas": "two"}, check=False
    )
    assert refused.returncode != 0
    assert "/replicas" in refused.stderr
    history = json.loads(release.helm("history", release.name, "-o", "json").stdout)
    assert [h["revision"] for h in history] == [1, 2]
    assert history[-1]["status"] == "deployed"

    # A model survives the uninstall: Helm keeps the CRDs, hence the InferenceClusters.
    sample = yaml.safe_load((ROOT / "manifests" / "samples" / "deepseek-v4-flash.yaml").read_text())
    sample["metadata"]["namespace"] = ns
    sample["spec"]["placement"] = {"nodeGroups": [["nowhere-0", "nowhere-1", "nowhere-2"]]}
    devcluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(sample))
    release.helm("uninstall", release.name, "--wait", "--timeout=60s")
    for obj in upgraded:
        assert not live(devcluster, obj), f"{obj['kind']} {obj['metadata']['name']} left behind"
    assert release.exists("crd", "inferenceclusters.sparkllm.io")
    assert release.exists("icl", "deepseek-v4-flash", ns)
    devcluster.kubectl("delete", "icl", "--all", "-n", ns, "--wait=false")
