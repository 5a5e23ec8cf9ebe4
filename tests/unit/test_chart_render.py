"""The Helm chart, rendered offline with the real helm binary: what each setting produces.

These tests need no cluster, only ``helm`` (built by ``make binaries``): a missing binary
skips locally and fails under CI=true. The helpers at the top (``render_chart``,
``require_binary``) are shared by the other chart, kustomize and RBAC tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkllm_dev.ci import unavailable
from sparkllm_dev.devcluster.paths import default_paths

pytestmark = pytest.mark.needs_binary  # helm (make binaries)
ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "sparkllm"
MONITORING_API = ("monitoring.coreos.com/v1",)
Obj = dict[str, Any]


def require_binary(name: str, *, how: str = "run `make binaries`") -> Path:
    """The cached binary, or skip (locally) / fail (CI) saying how to build it."""
    path = default_paths().binary(name)
    if os.access(path, os.X_OK):
        return path
    return unavailable(f"{name} is not built ({path}): {how}")


def run_helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    helm = require_binary("helm")
    result = subprocess.run(
        [str(helm), *args], capture_output=True, text=True, timeout=120, check=False
    )
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stderr}")
    return result


def values_file(values: Mapping[str, Any], directory: str) -> str:
    path = Path(directory) / "values.yaml"
    path.write_text(yaml.safe_dump(dict(values)))
    return str(path)


def render_chart(
    values: Mapping[str, Any] | None = None,
    *,
    api_versions: Sequence[str] = (),
    release: str = "sparkllm",
    namespace: str = "sparkllm-system",
) -> list[Obj]:
    """``helm template`` of the chart with ``values``; the objects, in order."""
    with tempfile.TemporaryDirectory() as tmp:
        args = ["template", release, str(CHART), "--namespace", namespace]
        args += ["-f", values_file(values or {}, tmp)]
        for api in api_versions:
            args += ["--api-versions", api]
        out = run_helm(*args).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def find(objs: Sequence[Obj], kind: str, name: str | None = None) -> list[Obj]:
    return [
        o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]


def one(objs: Sequence[Obj], kind: str, name: str | None = None) -> Obj:
    found = find(objs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


def operator_container(objs: Sequence[Obj]) -> Obj:
    sts = one(objs, "StatefulSet")
    container: Obj = sts["spec"]["template"]["spec"]["containers"][0]
    return container


def rules_of(objs: Sequence[Obj], name: str) -> list[Obj]:
    rules: list[Obj] = one(objs, "ClusterRole", name)["rules"]
    return rules


def grants(rules: Sequence[Obj]) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) triples a rule list grants."""
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


HA_TWO_NAMESPACES = {"replicas": 2, "watchNamespaces": ["llm-a", "llm-b"]}
ALL_MONITORING = {
    "metrics": {
        "serviceMonitor": {"enabled": True, "interval": "30s", "labels": {}},
        "enginePodMonitor": {"enabled": True, "interval": "15s", "labels": {}},
        "gatewayPodMonitor": {"enabled": True, "interval": "15s", "labels": {}},
    },
    "prometheusRule": {"enabled": True},
    "grafanaDashboard": {"enabled": True},
}


# --- lint -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [
        {},
        HA_TWO_NAMESPACES,
        {"replicas": 2},
        ALL_MONITORING,
        {"rbac": {"create": False}},
        {"governance": {"redis": {"address": "redis", "passwordSecretRef": {"name": "auth"}}}},
    ],
    ids=["defaults", "ha-namespaced", "ha-all-namespaces", "monitoring", "no-rbac", "redis"],
)
def test_helm_lint_is_clean(values: Mapping[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        result = run_helm("lint", "--strict", str(CHART), "-f", values_file(values, tmp))
    assert "[WARNING]" not in result.stdout, result.stdout
    assert "[ERROR]" not in result.stdout, result.stdout


# --- the operator workload --------------------------------------------------------------


def test_defaults_run_one_standalone_operator_on_every_namespace() -> None:
    objs = render_chart()
    sts = one(objs, "StatefulSet", "sparkllm-operator")
    assert sts["spec"]["replicas"] == 1
    args = operator_container(objs)["args"]
    assert args[0] == "run"
    assert "--liveness=http://0.0.0.0:8081/healthz" in args
    assert "--metrics-port=8080" in args
    assert not [a for a in args if a.startswith(("--peering", "--priority", "--namespace"))]
    assert not find(objs, "KopfPeering")
    assert not find(objs, "ClusterKopfPeering")
    assert not find(objs, "PodDisruptionBudget")


def test_ha_runs_two_pods_with_distinct_priorities_and_stable_identities() -> None:
    objs = render_chart(HA_TWO_NAMESPACES)
    sts = one(objs, "StatefulSet")
    assert sts["spec"]["replicas"] == 2
    container = operator_container(objs)
    assert "--peering=sparkllm" in container["args"]
    assert "--priority=$(POD_INDEX)" in container["args"]
    assert [a for a in container["args"] if a.startswith("--namespace=")] == [
        "--namespace=llm-a",
        "--namespace=llm-b",
    ]
    env = {
        e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
        for e in container["env"]
        if "valueFrom" in e  # the others are plain values (the admin policy)
    }
    assert env == {
        "POD_ID": "metadata.name",
        "POD_INDEX": "metadata.labels['apps.kubernetes.io/pod-index']",
    }
    peerings = find(objs, "KopfPeering")
    assert sorted(p["metadata"]["namespace"] for p in peerings) == ["llm-a", "llm-b"]
    assert {p["metadata"]["name"] for p in peerings} == {"sparkllm"}
    assert one(objs, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


def test_ha_on_every_namespace_uses_one_cluster_peering() -> None:
    objs = render_chart({"replicas": 2})
    assert one(objs, "ClusterKopfPeering")["metadata"]["name"] == "sparkllm"
    assert not find(objs, "KopfPeering")
    assert ("kopf.dev", "clusterkopfpeerings", "patch") in grants(
        rules_of(objs, "sparkllm-operator-cluster")
    )


def test_operator_pod_is_locked_down() -> None:
    objs = render_chart()
    pod = one(objs, "StatefulSet")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = pod["containers"][0]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}
    assert container["resources"]["requests"]
    assert container["resources"]["limits"]["memory"]
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/tmp"}


GOVERNANCE_ENV = (
    "SPARKLLM_GOVERNANCE_REDIS_ADDRESS",
    "SPARKLLM_GOVERNANCE_REDIS_DATABASE",
    "SPARKLLM_GOVERNANCE_REDIS_PASSWORD_SECRET",
    "SPARKLLM_GOVERNANCE_REDIS_PASSWORD_KEY",
)


def plain_env(objs: Sequence[Obj]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in operator_container(objs)["env"] if "value" in e}


def test_the_default_governance_store_reaches_the_operators_env() -> None:
    """values governance.redis -> the env render/governance_default.py reads (issue 17)."""
    assert not set(GOVERNANCE_ENV) & set(plain_env(render_chart()))
    redis = {"address": "redis.shared.svc:6380", "database": 2,
             "passwordSecretRef": {"name": "redis-auth", "key": "pw"}}  # fmt: skip
    env = plain_env(render_chart({"governance": {"redis": redis}}))
    assert {k: env[k] for k in GOVERNANCE_ENV} == dict(
        zip(GOVERNANCE_ENV, ("redis.shared.svc:6380", "2", "redis-auth", "pw"), strict=True)
    )
    bare = plain_env(render_chart({"governance": {"redis": {"address": "redis"}}}))
    assert bare["SPARKLLM_GOVERNANCE_REDIS_ADDRESS"] == "redis"
    assert "SPARKLLM_GOVERNANCE_REDIS_PASSWORD_SECRET" not in bare  # no password


# --- RBAC -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values", [{}, HA_TWO_NAMESPACES, {"replicas": 2}], ids=["all", "ha-ns", "ha-all"]
)
def test_rbac_has_no_wildcards_and_no_cluster_scoped_secret_rule(values: Obj) -> None:
    objs = render_chart(values, api_versions=MONITORING_API)
    for role in find(objs, "ClusterRole"):
        for group, resource, verb in grants(role["rules"]):
            assert "*" not in (group, resource, verb), role["metadata"]["name"]
            assert verb not in {"escalate", "bind", "impersonate"}
    cluster_rules = grants(rules_of(objs, "sparkllm-operator-cluster"))
    assert not [g for g in cluster_rules if g[1] == "secrets"]


def test_namespaced_permissions_are_bound_only_in_watched_namespaces() -> None:
    objs = render_chart(HA_TWO_NAMESPACES)
    bindings = find(objs, "RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["llm-a", "llm-b"]
    assert {b["roleRef"]["name"] for b in bindings} == {"sparkllm-operator"}
    cluster_bindings = find(objs, "ClusterRoleBinding")
    assert [b["roleRef"]["name"] for b in cluster_bindings] == ["sparkllm-operator-cluster"]
    assert ("", "namespaces", "watch") in grants(rules_of(objs, "sparkllm-operator-cluster"))


def test_namespaced_install_lists_inferenceclusters_everywhere_for_node_conflicts() -> None:
    """Node-group conflicts with objects in other namespaces (issue 16): list only."""
    cluster = grants(rules_of(render_chart(HA_TWO_NAMESPACES), "sparkllm-operator-cluster"))
    assert {g for g in cluster if g[1] == "inferenceclusters"} == {
        ("sparkllm.io", "inferenceclusters", "list")
    }
    # Every namespace: the namespaced role is bound cluster-wide already; no duplicate.
    everywhere = grants(rules_of(render_chart(), "sparkllm-operator-cluster"))
    assert not [g for g in everywhere if g[1] == "inferenceclusters"]


def test_watching_every_namespace_binds_namespaced_role_cluster_wide() -> None:
    objs = render_chart()
    names = sorted(b["roleRef"]["name"] for b in find(objs, "ClusterRoleBinding"))
    assert names == ["sparkllm-operator", "sparkllm-operator-cluster"]
    assert not find(objs, "RoleBinding")
    # kopf observes namespaces only when given a list.
    assert ("", "namespaces", "list") not in grants(rules_of(objs, "sparkllm-operator-cluster"))


@pytest.mark.parametrize(
    ("values", "api_versions", "present", "absent"),
    [
        ({}, (), set(), {"monitoring.coreos.com"}),
        ({}, MONITORING_API, {"monitoring.coreos.com"}, set()),
        ({"rbac": {"monitoringObjects": False}}, MONITORING_API, set(), {"monitoring.coreos.com"}),
        ({"rbac": {"gateway": False}}, (), set(), {"rbac.authorization.k8s.io"}),
        ({}, (), {"rbac.authorization.k8s.io", "apps"}, set()),
    ],
    ids=["no-prom-api", "prom-api", "prom-api-off", "no-gateway", "gateway"],
)
def test_optional_permissions_follow_settings(
    values: Obj, api_versions: tuple[str, ...], present: set[str], absent: set[str]
) -> None:
    groups = {
        g
        for g, _, _ in grants(
            rules_of(render_chart(values, api_versions=api_versions), "sparkllm-operator")
        )
    }
    assert present <= groups
    assert not absent & groups


def test_rbac_can_be_brought_by_the_user() -> None:
    objs = render_chart({"rbac": {"create": False}})
    assert not find(objs, "ClusterRole")
    assert not find(objs, "ClusterRoleBinding")


# --- monitoring -------------------------------------------------------------------------


MONITORING_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}


@pytest.mark.parametrize(
    ("values", "api_versions", "kinds"),
    [
        ({}, MONITORING_API, set()),
        (ALL_MONITORING, (), set()),  # enabled, but the cluster has no Prometheus operator
        (ALL_MONITORING, MONITORING_API, MONITORING_KINDS),
    ],
    ids=["disabled", "enabled-no-crds", "enabled-with-crds"],
)
def test_monitoring_kinds_only_when_enabled_and_served(
    values: Obj, api_versions: tuple[str, ...], kinds: set[str]
) -> None:
    objs = render_chart(values, api_versions=api_versions)
    assert {o["kind"] for o in objs} & MONITORING_KINDS == kinds


def test_dashboard_configmap_only_when_enabled() -> None:
    assert not find(render_chart(), "ConfigMap")
    cm = one(render_chart(ALL_MONITORING), "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((CHART / "dashboards" / "sparkllm.json").read_text())
    assert json.loads(cm["data"]["sparkllm.json"]) == shipped


# --- values.schema.json -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--set", "replicas=0"], "/replicas"),
        (["--set", "replicas=two"], "/replicas"),
        (["--set", "watchNamespaces[0]=Not_A_Namespace"], "/watchNamespaces/0"),
        (["--set", "replicsa=2"], "'replicsa' not allowed"),
        (["--set", "image.pullPolicy=Sometimes"], "/image/pullPolicy"),
        (["--set", "image.tag=latest"], "not latest"),
        (["--set", "prometheusRule.kvUsageRatio=2"], "/prometheusRule/kvUsageRatio"),
        (["--set", "metrics.serviceMonitor.interval=often"], "/metrics/serviceMonitor/interval"),
        (["--set", "resources.limits.memory=lots"], "/resources/limits/memory"),
        (["--set", "serviceAccount.create=false"], "serviceAccount.name is required"),
        (["--set", "governance.redis.address=redis://r:6379"], "/governance/redis/address"),
        (["--set", "governance.redis.database=256"], "/governance/redis/database"),
        (["--set", "upgrade.applyOperatorChanges=Drained"], "/upgrade/applyOperatorChanges"),
        (["--set", "upgrade.applyOperatorChanges="], "/upgrade/applyOperatorChanges"),
        (["--set-string", "crds.install=yes"], "/crds/install"),
        # null deletes a key in Helm: it was a template's nil-pointer error (helm lint passed)
        (["--set", "upgrade=null"], "missing property 'upgrade'"),
        (["--set", "crds=null"], "missing property 'crds'"),
        (["--set", "governance=null"], "missing property 'governance'"),
        (["--set", "policy=null"], "missing property 'policy'"),
    ],
)
def test_wrong_values_fail_with_a_message_naming_them(flags: list[str], message: str) -> None:
    result = run_helm("template", "x", str(CHART), *flags, check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


def test_long_release_names_still_make_valid_pods() -> None:
    """The StatefulSet controller labels pods <sts>-<10-char hash>: at most 63 characters."""
    release = "a-very-long-release-name-for-the-sparkllm-operator-x"
    objs = render_chart(release=release)
    sts = one(objs, "StatefulSet")
    assert len(sts["metadata"]["name"]) + 11 <= 63
    assert len({o["metadata"]["name"] for o in find(objs, "ClusterRole")}) == 2
