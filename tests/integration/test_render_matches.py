"""``sparkllm render`` against the real operator: the offline render IS what gets applied.

The sample is applied in the test's namespace with the real operator running; once it
is Ready, every object the operator made (listed by the cluster label) is compared with
the offline render of the same object (same uid, the dev cluster nodes' InternalIPs,
the operator's gateway image). Each rendered object must be a subset of its live copy —
the API server adds defaults and server-set fields (uid, resourceVersion, managedFields,
status, defaulted spec fields), never changes ours — and the kinds and names must be
the same on both sides. The generated engine-key Secret is the one exception, by
design: the render names it in a comment and the live one exists with that key.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkllm.offline import render_file
from sparkllm.render.gateway import gateway_image_from
from sparkllm_dev.devcluster import DevCluster, wait_until
from sparkllm_dev.testing import OperatorProcess
from tests.integration.test_reconcile import NAME, apply, ready, sample, user_keys

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


def test_render_matches_what_the_operator_applied(
    devcluster: DevCluster, namespace: str, operator: OperatorProcess, tmp_path: Path
) -> None:
    user_keys(devcluster, namespace)
    apply(devcluster, namespace, sample(NODES))
    live_ic = wait_until(
        lambda: ready(devcluster, namespace), timeout=90, what="InferenceCluster Ready"
    )
    doc = sample(NODES)
    doc["metadata"] = {"name": NAME, "namespace": namespace, "uid": live_ic["metadata"]["uid"]}
    path = tmp_path / "ic.yaml"
    path.write_text(yaml.safe_dump(doc))
    text = render_file(
        str(path),
        node_ips=node_ips(devcluster),
        namespace=namespace,
        gateway_image=gateway_image_from(os.environ),  # what the operator process uses
    )
    rendered = {f"{o['kind']}/{o['metadata']['name']}": o for o in yaml.safe_load_all(text) if o}

    items = devcluster.kubectl_json(
        "get", KINDS, "-n", namespace, "-l", f"sparkllm.io/cluster={NAME}"
    )["items"]
    live = {f"{o['kind']}/{o['metadata']['name']}": o for o in items}
    secret = f"Secret/{NAME}-engine-key"
    assert secret in live
    assert "token" in live[secret]["data"]
    assert f"# Secret {NAME}-engine-key (key 'token')" in text
    assert "token:" not in text  # a reference, never a value
    del live[secret]

    assert sorted(rendered) == sorted(live)
    problems = {
        name: found
        for name, obj in rendered.items()
        if (found := subset_problems(obj, live[name], name))
    }
    assert problems == {}
