"""The chart's RBAC, proven by running the real operator with nothing but those permissions.

The chart's ServiceAccount and RBAC are installed for one test namespace; a token minted
for that ServiceAccount goes into a kubeconfig of its own; the real operator
(``python -m sparkllm.cli run``) runs out of cluster with it and drives a sample
InferenceCluster (node group b) to Ready, through a requested restart and a scale to
zero that prunes its StatefulSets and Services. Then: no 403 in its log, every write it made (from
the API server's audit log) is one the chart grants, and its permission list
(``kubectl auth can-i --list``, minus what every authenticated user has) is EXACTLY the
table below — no wildcard, no Secret outside the watched namespace, nothing unused.

The helpers (``chart_identity``, ``token_kubeconfig``) serve tests/integration/test_operator_ha.py
too.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkllm_dev.devcluster import DevCluster, wait_until
from sparkllm_dev.devcluster.engines import EngineHarness
from sparkllm_dev.testing import QUICK_RESYNC, ROOT, OperatorProcess
from tests.unit.test_chart_render import render_chart

pytestmark = pytest.mark.cluster

IDENTITY_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "RoleBinding"}
PEERING_CRDS = ROOT / "charts" / "sparkllm" / "crds" / "kopf.dev_peerings.yaml"
NODE_GROUP_B = ["spark-b0", "spark-b1", "spark-b2"]
READY_DEADLINE = 240  # seconds: generous, the machine is shared and busy

# What the operator may do, and why: (resource as `can-i --list` prints it) -> verbs.
# Namespaced rules hold in the watched namespace only; cluster rules everywhere.
EXPECTED_NAMESPACED = {
    "inferenceclusters.sparkllm.io": {"get", "list", "watch", "patch"},  # kopf + pass
    "inferenceclusters.sparkllm.io/status": {"patch"},  # status by server-side apply
    "statefulsets.apps": {"list", "watch", "create", "patch", "delete"},  # ranks
    "services": {"list", "create", "patch", "delete"},  # per-replica Service
    # rank pods; get: the router Role; patch: drain; delete: a rank pod left terminating on a
    # lost node, with grace 0, before a failover's new generation (docs/operator.md)
    "pods": {"get", "list", "watch", "patch", "delete"},
    "pods/log": {"get"},  # the start stages, read from the engine's log while it starts
    "secrets": {"get", "create"},  # the engine API key
    "events": {"create"},  # transitions and failures
    "jobs.batch": {"list", "create", "delete"},  # the acceptance benchmark on demand
    "deployments.apps": {"list", "create", "patch", "delete"},  # gateway
    "serviceaccounts": {"list", "create", "patch", "delete"},  # gateway
    "roles.rbac.authorization.k8s.io": {"list", "create", "patch", "delete"},  # gateway
    "rolebindings.rbac.authorization.k8s.io": {"list", "create", "patch", "delete"},
    # spec.exposure (issue 21): listed every pass, applied and pruned when chosen
    "ingresses.networking.k8s.io": {"list", "create", "patch", "delete"},
    "httproutes.gateway.networking.k8s.io": {"list", "create", "patch", "delete"},
    "inferencepools.inference.networking.k8s.io": {"list", "create", "patch", "delete"},
}
EXPECTED_CLUSTER = {
    "nodes": {"list", "watch"},  # placement, node failure
    "customresourcedefinitions.apiextensions.k8s.io": {"list", "watch"},  # kopf discovery
    "namespaces": {"list", "watch"},  # kopf's namespace observer (namespace list given)
    # Node-group conflicts with InferenceClusters in other namespaces (issue 16 item 2):
    # a pass lists them all (reconcile/observe.py read_other_clusters).
    "inferenceclusters.sparkllm.io": {"list"},
}
EXPECTED_PEERING = {"kopfpeerings.kopf.dev": {"list", "watch", "patch"}}
# Writes this test's scenario must make with those permissions (audit log: verb, resource).
EXPECTED_WRITES = {
    ("patch", "statefulsets", ""),  # apply (creates them)
    ("delete", "statefulsets", ""),  # prune after scaling to zero
    ("patch", "services", ""),
    ("delete", "services", ""),
    ("create", "secrets", ""),  # the generated engine key
    ("patch", "inferenceclusters", "status"),
    ("patch", "inferenceclusters", ""),  # the restart annotation cleared, kopf's annotations
    ("create", "events", ""),
}
# A 403 status (not the milliseconds of a log timestamp, "07:35:06,403"), or the words.
FORBIDDEN = re.compile(r"(?<![\d,.])\b403\b|forbidden|Not enough permissions", re.IGNORECASE)


@dataclass(frozen=True)
class Identity:
    """The chart's ServiceAccount for one test namespace."""

    namespace: str
    service_account: str

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"


@contextlib.contextmanager
def chart_identity(
    cluster: DevCluster,
    namespace: str,
    *,
    values: Mapping[str, Any] | None = None,
    api_versions: Sequence[str] = (),
) -> Iterator[Identity]:
    """Install the chart's ServiceAccount + RBAC (+ peering objects) for ``namespace``,
    rendered as for a cluster serving ``api_versions`` (helm's Capabilities).

    The release is named after the namespace's random suffix so its cluster-scoped
    objects are unique;
    they are deleted afterwards (the namespace fixture removes the rest).
    """
    objs = render_chart(
        {"watchNamespaces": [namespace], **(values or {})},
        api_versions=api_versions,
        release=f"rbac-{namespace[-5:]}",
        namespace=namespace,
    )
    peering = [o for o in objs if o["kind"] == "KopfPeering"]
    if peering:
        cluster.kubectl("apply", "--server-side", "-f", str(PEERING_CRDS))
        cluster.wait_established("kopfpeerings.kopf.dev")
    identity = [o for o in objs if o["kind"] in IDENTITY_KINDS] + peering
    manifest = yaml.safe_dump_all(identity)
    cluster.kubectl("apply", "--server-side", "-f", "-", input=manifest)
    (sa,) = [o["metadata"]["name"] for o in objs if o["kind"] == "ServiceAccount"]
    try:
        yield Identity(namespace=namespace, service_account=sa)
    finally:
        cluster_scoped = [o for o in identity if o["kind"].startswith("Cluster")]
        cluster.kubectl(
            "delete", "--ignore-not-found", "--wait=false", "-f", "-",
            input=yaml.safe_dump_all(cluster_scoped),
            check=False,
        )  # fmt: skip


def token_kubeconfig(cluster: DevCluster, identity: Identity, path: Path) -> Path:
    """A kubeconfig that authenticates as the ServiceAccount (a bound token, 1 h)."""
    token = cluster.kubectl(
        "create", "token", identity.service_account, "-n", identity.namespace, "--duration=1h"
    ).stdout.strip()
    admin = json.loads(cluster.kubectl("config", "view", "--raw", "--minify", "-o", "json").stdout)
    server = admin["clusters"][0]["cluster"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "dev", "cluster": server}],
        "users": [{"name": identity.service_account, "user": {"token": token}}],
        "contexts": [
            {
                "name": "operator",
                "context": {
                    "cluster": "dev",
                    "user": identity.service_account,
                    "namespace": identity.namespace,
                },
            }
        ],
        "current-context": "operator",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def permissions(cluster: DevCluster, user: str, namespace: str) -> dict[str, set[str]]:
    """`kubectl auth can-i --list` as ``user`` in ``namespace``: resource -> verbs."""
    out = cluster.kubectl("auth", "can-i", "--list", "-n", namespace, f"--as={user}").stdout
    table: dict[str, set[str]] = {}
    for line in out.splitlines()[1:]:
        match = re.match(r"^(\S+)\s+\[(.*?)\]\s+\[(.*?)\]\s+\[(.*?)\]\s*$", line)
        if match is None:
            continue
        resource, urls, names, verbs = match.groups()
        assert not names, f"unexpected resourceNames rule: {line}"
        key = resource if not urls else f"url:{urls}"
        table.setdefault(key, set()).update(verbs.split())
    return table


def granted_to_everyone(cluster: DevCluster, namespace: str) -> dict[str, set[str]]:
    """What any authenticated user may do (system:basic-user, discovery, ...): an
    impersonated user nothing is bound to (impersonation needs no such account)."""
    return permissions(cluster, "system:serviceaccount:nowhere:nobody", namespace)


def merged(*tables: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """The union of permission tables (a resource may be granted by both roles)."""
    union: dict[str, set[str]] = {}
    for table in tables:
        for resource, verbs in table.items():
            union.setdefault(resource, set()).update(verbs)
    return union


def own_permissions(cluster: DevCluster, user: str, namespace: str) -> dict[str, set[str]]:
    everyone = granted_to_everyone(cluster, namespace)
    own: dict[str, set[str]] = {}
    for resource, verbs in permissions(cluster, user, namespace).items():
        extra = verbs - everyone.get(resource, set())
        if extra:
            own[resource] = extra
    return own


def sample(namespace: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(
        (ROOT / "manifests" / "samples" / "deepseek-v4-flash.yaml").read_text()
    )
    doc["metadata"]["namespace"] = namespace
    doc["spec"]["placement"] = {"nodeGroups": [NODE_GROUP_B]}
    return doc


def condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return c  # type: ignore[no-any-return]
    return None


def ready_at_generation(cluster: DevCluster, namespace: str, name: str) -> bool:
    obj = cluster.kubectl_json("get", "icl", name, "-n", namespace)
    ready = condition(obj, "Ready")
    return (
        ready is not None
        and ready["status"] == "True"
        and obj["status"].get("observedGeneration") == obj["metadata"]["generation"]
    )


def annotations(cluster: DevCluster, namespace: str, name: str) -> dict[str, str]:
    obj = cluster.kubectl_json("get", "icl", name, "-n", namespace)
    return obj["metadata"].get("annotations") or {}


def owned(cluster: DevCluster, namespace: str, name: str) -> list[str]:
    """Names of the engine StatefulSets and Services of InferenceCluster ``name``."""
    selector = f"sparkllm.io/cluster={name},app.kubernetes.io/component=engine"
    items = cluster.kubectl_json("get", "statefulsets,services", "-n", namespace, "-l", selector)[
        "items"
    ]
    return [i["metadata"]["name"] for i in items]


def audit_writes_by(cluster: DevCluster, user: str, namespace: str) -> set[tuple[str, str, str]]:
    return {
        (e["verb"], e["objectRef"].get("resource", ""), e["objectRef"].get("subresource", ""))
        for e in cluster.audit_writes(namespace=namespace)
        if e.get("user", {}).get("username") == user
        and e.get("stage") == "ResponseComplete"
        and 200 <= e.get("responseStatus", {}).get("code", 0) < 300
    }


def test_operator_runs_with_exactly_the_charts_permissions(
    devcluster: DevCluster, namespace: str, tmp_path: Path
) -> None:
    devcluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    devcluster.kubectl(
        "create", "secret", "generic", "llm-user-keys", "-n", namespace,
        "--from-literal=alice=not-a-real-key",
    )  # fmt: skip
    with chart_identity(devcluster, namespace) as identity:
        kubeconfig = token_kubeconfig(devcluster, identity, tmp_path / "operator.kubeconfig")
        # The token really is the ServiceAccount's, and it cannot read Secrets elsewhere.
        whoami = devcluster.kubectl(
            "--kubeconfig", str(kubeconfig), "auth", "whoami", "-o", "json", check=False
        )
        if whoami.returncode == 0:
            assert json.loads(whoami.stdout)["status"]["userInfo"]["username"] == identity.user
        for args in (["-n", "default"], ["--all-namespaces"]):
            answer = devcluster.kubectl(
                "auth", "can-i", "get", "secrets", *args, f"--as={identity.user}", check=False
            )
            assert answer.stdout.strip() == "no", args

        operator = OperatorProcess(devcluster, [namespace], str(tmp_path / "operator.log"))
        name = "deepseek-v4-flash"
        with EngineHarness(devcluster, namespace=namespace, log_dir=tmp_path / "engines"):
            operator.start("--kubeconfig", str(kubeconfig), *QUICK_RESYNC)
            try:
                devcluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(sample(namespace)))
                started = time.monotonic()
                wait_until(
                    lambda: ready_at_generation(devcluster, namespace, name),
                    timeout=READY_DEADLINE,
                    interval=1,
                    what="the sample InferenceCluster Ready (operator with chart RBAC)",
                )
                print(f"[rbac] Ready after {time.monotonic() - started:.1f} s")
                # A requested restart (the operator clears the annotation), then scale
                # to zero (every StatefulSet and Service pruned).
                devcluster.kubectl(
                    "annotate", "icl", name, "-n", namespace, "sparkllm.io/restart=now"
                )
                wait_until(
                    lambda: "sparkllm.io/restart" not in annotations(devcluster, namespace, name),
                    timeout=READY_DEADLINE,
                    interval=1,
                    what="the restart annotation consumed",
                )
                devcluster.kubectl("scale", "icl", name, "-n", namespace, "--replicas=0")
                wait_until(
                    lambda: not owned(devcluster, namespace, name),
                    timeout=READY_DEADLINE,
                    interval=1,
                    what="StatefulSets and Services pruned after scaling to zero",
                )
            finally:
                devcluster.kubectl("delete", "icl", "--all", "-n", namespace, "--wait=false")
                operator.stop()

        log = operator.log()
        denied = [line for line in log.splitlines() if FORBIDDEN.search(line)]
        assert not denied, "\n".join(denied[:20])

        writes = audit_writes_by(devcluster, identity.user, namespace)
        print("[rbac] writes:", sorted(writes))
        missing = EXPECTED_WRITES - writes
        assert not missing, f"the scenario never made these writes: {missing}"

        own = own_permissions(devcluster, identity.user, namespace)
        print("[rbac] permissions:\n" + "\n".join(f"  {r}: {sorted(v)}" for r, v in own.items()))
        assert own == merged(EXPECTED_NAMESPACED, EXPECTED_CLUSTER)
        for resource, verbs in own.items():
            assert "*" not in resource
            assert "*" not in verbs
        # Outside the watched namespace only the cluster rules hold (no Secrets, no pods).
        assert own_permissions(devcluster, identity.user, "default") == EXPECTED_CLUSTER
