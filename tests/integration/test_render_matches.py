"""``sparkllm render`` against the real operator: the offline render IS what gets applied.

The sample is applied in the test's namespace with the real operator running; once it
is Ready, every object the operator made (listed by the cluster label) is compared with
the offline render of the same object (same uid, the dev cluster nodes' InternalIPs,
the operator's image settings). The operator runs with the env the chart gives it in
docs/install.md's air-gapped install (tests/unit/test_airgapped_install.py follows that
section: a mirror, a digest, a pull secret, the policy admitting the mirrored engine
image) and the sample gets the section's mirrored engine image, so every pod template it
made must name only registry.local images and carry the pull secret. Each rendered object
must be a subset of its live copy — the API server adds defaults and server-set fields
(uid, resourceVersion, managedFields, status, defaulted spec fields), never changes ours —
and the kinds and names must be the same on both sides. The generated Secrets (the engine
key, the key of the operator's own Jobs) are the one exception, by design: the render
names each in a comment and the live one exists with that key.

The same module checks the rendered pods' Pod Security level on the real API server (no
operator needed: server dry runs into namespaces labelled with each enforce level), so
the levels docs/pod-security.md claims are exact.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkllm.offline import render_file
from sparkllm.render.product_image import product_image_from
from sparkllm_dev.devcluster import DevCluster, wait_until
from tests.integration.test_reconcile import NAME, apply, ready, sample, user_keys
from tests.unit.test_airgapped_install import DIGEST, mirrored, operator_env, packaged_chart
from tests.unit.test_render_pod_security import (
    CLAIMS,
    JSON,
    LEVELS,
    VARIANTS,
    job_pod_templates,
    sample_doc,
    sample_with,
)

pytestmark = pytest.mark.cluster
KINDS = "serviceaccounts,roles,rolebindings,deployments,services,statefulsets,secrets"
NODES = ["spark-a0", "spark-a1", "spark-a2"]


def subset_problems(rendered: Any, live: Any, path: str = "") -> list[str]:
    """Where ``rendered`` is not contained in ``live`` (empty: it is)."""
    if isinstance(rendered, dict):
        if not isinstance(live, dict):
            return [f"{path}: {live!r} is not a mapping"]
        return [
            problem
            for key, value in rendered.items()
            for problem in (
                [f"{path}.{key}: missing"]
                if key not in live
                else subset_problems(value, live[key], f"{path}.{key}")
            )
        ]
    if isinstance(rendered, list):
        if not isinstance(live, list) or len(live) != len(rendered):
            return [f"{path}: {live!r} != {rendered!r}"]
        return [
            problem
            for i, (a, b) in enumerate(zip(rendered, live, strict=True))
            for problem in subset_problems(a, b, f"{path}[{i}]")
        ]
    return [] if rendered == live else [f"{path}: live {live!r} != rendered {rendered!r}"]


def node_ips(cluster: DevCluster) -> dict[str, str]:
    nodes = cluster.kubectl_json("get", "nodes")["items"]
    return {
        n["metadata"]["name"]: a["address"]
        for n in nodes
        for a in n["status"].get("addresses") or []
        if a["type"] == "InternalIP"
    }


def mirrored_sample() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(mirrored(yaml.safe_dump(sample(NODES))))
    return doc


@pytest.fixture
def airgapped_env(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """The operator's env of the air-gapped install, in this process's env (the operator
    fixture started after it inherits it)."""
    env = operator_env(packaged_chart(tmp_path_factory.mktemp("chart")))
    for name, value in env.items():
        if name.startswith("SPARKLLM_"):
            monkeypatch.setenv(name, value)
    return env


def test_render_matches_what_the_operator_applied(
    devcluster: DevCluster,
    namespace: str,
    airgapped_env: dict[str, str],
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    assert os.environ["SPARKLLM_IMAGE_PULL_SECRETS"] == "regcred"
    request.getfixturevalue("operator")  # started now, with the env above
    user_keys(devcluster, namespace)
    apply(devcluster, namespace, mirrored_sample())
    live_ic = wait_until(
        lambda: ready(devcluster, namespace), timeout=90, what="InferenceCluster Ready"
    )
    doc = mirrored_sample()
    doc["metadata"] = {"name": NAME, "namespace": namespace, "uid": live_ic["metadata"]["uid"]}
    path = tmp_path / "ic.yaml"
    path.write_text(yaml.safe_dump(doc))
    text = render_file(
        str(path),
        node_ips=node_ips(devcluster),
        namespace=namespace,
        gateway_image=product_image_from(os.environ),  # what the operator process uses
    )
    rendered = {f"{o['kind']}/{o['metadata']['name']}": o for o in yaml.safe_load_all(text) if o}

    items = devcluster.kubectl_json(
        "get", KINDS, "-n", namespace, "-l", f"sparkllm.io/cluster={NAME}"
    )["items"]
    live = {f"{o['kind']}/{o['metadata']['name']}": o for o in items}
    for secret in (f"{NAME}-engine-key", f"{NAME}-bench-key"):
        assert f"Secret/{secret}" in live
        assert "token" in live[f"Secret/{secret}"]["data"]
        assert f"# Secret {secret} (key 'token')" in text
        del live[f"Secret/{secret}"]
    assert "token:" not in text  # a reference, never a value

    assert sorted(rendered) == sorted(live)
    problems = {
        name: found
        for name, obj in rendered.items()
        if (found := subset_problems(obj, live[name], name))
    }
    assert problems == {}
    # What the air-gapped install promises, on the live objects themselves.
    sparkllm_image = f"registry.local/sparkllm@{DIGEST}"
    engine_image = doc["spec"]["engine"]["image"]
    pods = {
        n: o["spec"]["template"]["spec"]
        for n, o in live.items()
        if "template" in (o.get("spec") or {})
    }
    assert sorted(n.split("/")[0] for n in pods) == ["Deployment", *["StatefulSet"] * 3]
    for name, spec in pods.items():
        assert spec["imagePullSecrets"] == [{"name": "regcred"}], name
        images = {c["image"] for c in [*spec.get("initContainers", []), *spec["containers"]]}
        assert sparkllm_image in images, name
        assert images <= {sparkllm_image, engine_image}, name

    # Where is it: status.frontDoor, and the -o wide columns the API server prints from it.
    front = f"http://{NAME}.{namespace}.svc:8000"
    assert live_ic["status"]["frontDoor"] == {
        "service": NAME, "port": 8000, "clusterURL": front, "url": front,
    }  # fmt: skip
    wide = devcluster.kubectl("get", "icl", NAME, "-n", namespace, "-o", "wide").stdout
    header, row = wide.splitlines()
    assert header.split() == [
        "NAME", "REPLICAS", "READY", "PHASE", "START", "MODEL", "PP", "AGE", "ENDPOINT",
        "REASON", "RESTARTS",
    ]  # fmt: skip
    cells = row.split()  # START is one word when set (Ready:66s), none when not yet
    assert (cells[0], cells[3], cells[-3:]) == (NAME, "Ready", [front, "AllReplicasReady", "0"])
    # No spurious Warning from the dev cluster: the endpoint controllers, which could only
    # refuse the rank-0 Service's loopback pod addresses, do not run (devcluster/cluster.py).
    events = devcluster.kubectl_json("get", "events", "-n", namespace)["items"]
    endpoint_warnings = [
        (e["reason"], e["message"])
        for e in events
        if e["type"] == "Warning" and "Endpoint" in e["reason"]
    ]
    assert endpoint_warnings == []


# --- Pod Security Admission: each pod kind meets exactly the level docs/pod-security.md
# claims (tests/unit/test_render_pod_security.py: CLAIMS) ---------------------------------

ADMITTED = re.compile(r"^pod/(\S+) created \(server dry run\)$", re.MULTILINE)
REFUSED = re.compile(
    r'pods "([^"]+)" is forbidden: (violates PodSecurity "[^"]+": .*)$', re.MULTILINE
)


def claimed_pods(tmp_path: Path) -> dict[str, tuple[str, JSON]]:
    """Pod name -> (claimed level, Pod): every rank, the gateway (``sparkllm render``) and
    the two Jobs' pods, for each variant."""
    pods: dict[str, tuple[str, JSON]] = {}

    def add(name: str, level: str, template: JSON) -> None:
        meta = {"name": name, "labels": template["metadata"].get("labels", {})}
        pods[name] = (level, {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                              "spec": template["spec"]})  # fmt: skip

    for variant, changes in VARIANTS.items():
        path = tmp_path / f"{variant}.yaml"
        path.write_text(yaml.safe_dump(sample_doc(changes)))
        rendered = yaml.safe_load_all(render_file(str(path), node_ips={}, namespace="llm"))
        workloads = [o for o in rendered if o and o["kind"] in ("StatefulSet", "Deployment")]
        assert len(workloads) == 4, [o["metadata"]["name"] for o in workloads]
        for obj in workloads:
            kind = "rank" if obj["kind"] == "StatefulSet" else "gateway"
            suffix = obj["metadata"]["name"].removeprefix(NAME).replace("-r0-", "-")
            add(f"{variant}{suffix or '-gateway'}", CLAIMS[(variant, kind)][0],
                obj["spec"]["template"])  # fmt: skip
        for kind, template in job_pod_templates(sample_with(changes)).items():
            add(f"{variant}-{kind}", CLAIMS[(variant, kind)][0], template)
    return pods


def test_rendered_pods_meet_exactly_their_claimed_pod_security_level(
    devcluster: DevCluster, tmp_path: Path
) -> None:
    pods = claimed_pods(tmp_path)
    stream = yaml.safe_dump_all([pod for _, pod in pods.values()])
    run = uuid.uuid4().hex[:5]
    namespaces = {level: f"t-psa-{level}-{run}" for level in LEVELS}
    try:
        for level, ns in namespaces.items():
            label = {"pod-security.kubernetes.io/enforce": level}
            manifest = {"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": ns, "labels": label}}  # fmt: skip
            devcluster.kubectl("create", "-f", "-", input=yaml.safe_dump(manifest))
        for ns in namespaces.values():
            # The pods name these ServiceAccounts; admission refuses a pod whose SA is absent.
            for account in (f"{NAME}-gateway", f"{NAME}-acceptance"):
                devcluster.kubectl("create", "serviceaccount", account, "-n", ns)
            wait_until(
                lambda ns=ns: devcluster.kubectl("get", "sa", "default", "-n", ns,
                                                 check=False).returncode == 0,
                timeout=60, what=f"default ServiceAccount in {ns}",
            )  # fmt: skip
        for level, ns in namespaces.items():
            done = devcluster.kubectl(
                "create", "--dry-run=server", "-n", ns, "-f", "-", input=stream, check=False
            )
            admitted = set(ADMITTED.findall(done.stdout))
            refused = dict(REFUSED.findall(done.stderr))
            rank = LEVELS.index(level)
            expected = {name for name, (claim, _) in pods.items() if LEVELS.index(claim) >= rank}
            for name, why in sorted(refused.items()):
                print(f"[psa] enforce={level}: {name} refused: {why}")
            print(f"[psa] enforce={level}: admitted {sorted(admitted)}")
            assert admitted == expected, (level, done.stderr)
            assert set(refused) == set(pods) - expected, (level, done.stderr)
    finally:
        for ns in namespaces.values():
            devcluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
