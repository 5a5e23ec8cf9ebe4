"""The operator's default governance store on the real control plane (issue 17 item 5).

The operator runs with the chart's ``governance.redis`` in its env, as the chart sets it.
For a spec naming no store, the API server keeps what the operator writes in
``status.gateway`` — ``governanceStore: Redis``, ``storeSource: OperatorDefault`` — so the
regenerated CRD's status schema carries the field (a structural schema would prune a
field it does not know); and ``sparkllm render`` given the same values as flags renders
exactly the objects the operator applied, the gateway's Redis settings included.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkllm.offline import STORE_FLAGS, governance_default_from_flags, render_file
from sparkllm.render.governance_default import ADDRESS_ENV, DATABASE_ENV
from sparkllm.render.product_image import product_image_from
from sparkllm_dev.devcluster import DevCluster, wait_until
from sparkllm_dev.testing import OperatorProcess
from tests.integration.test_reconcile import NAME, apply, icl, sample, user_keys
from tests.integration.test_render_matches import KINDS, NODES, node_ips, subset_problems

pytestmark = pytest.mark.cluster
ADDRESS = "redis.governance.invalid:6380"  # never dialled by this test: only rendered
DATABASE = "3"


@pytest.fixture
def default_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """The chart's values in the env the operator process inherits (set before it starts)."""
    monkeypatch.setenv(ADDRESS_ENV, ADDRESS)
    monkeypatch.setenv(DATABASE_ENV, DATABASE)


def gateway_status(cluster: DevCluster, namespace: str) -> dict[str, Any] | None:
    status = icl(cluster, namespace).get("status") or {}
    gateway: dict[str, Any] | None = status.get("gateway")
    return gateway if gateway and gateway.get("storeSource") else None


def test_status_says_the_default_store_and_render_matches_it(
    default_store: None,
    devcluster: DevCluster,
    namespace: str,
    operator: OperatorProcess,
    tmp_path: Path,
) -> None:
    user_keys(devcluster, namespace)
    apply(devcluster, namespace, sample(NODES))
    gateway = wait_until(
        lambda: gateway_status(devcluster, namespace),
        timeout=60,
        what="status.gateway with a storeSource",
    )
    assert gateway["governanceStore"] == "Redis"
    assert gateway["storeSource"] == "OperatorDefault"
    assert ADDRESS in gateway["message"]

    live_ic = icl(devcluster, namespace)
    doc = sample(NODES)
    doc["metadata"] = {"name": NAME, "namespace": namespace, "uid": live_ic["metadata"]["uid"]}
    path = tmp_path / "ic.yaml"
    path.write_text(yaml.safe_dump(doc))
    flags = dict.fromkeys(STORE_FLAGS)
    flags |= {"--governance-redis-address": ADDRESS, "--governance-redis-database": DATABASE}
    text = render_file(
        str(path),
        node_ips=node_ips(devcluster),
        namespace=namespace,
        gateway_image=product_image_from(os.environ),
        governance_default=governance_default_from_flags(flags),
    )
    rendered = {f"{o['kind']}/{o['metadata']['name']}": o for o in yaml.safe_load_all(text) if o}
    assert ADDRESS in yaml.safe_dump(rendered[f"Deployment/{NAME}"])

    def live() -> dict[str, Any] | None:
        items = devcluster.kubectl_json(
            "get", KINDS, "-n", namespace, "-l", f"sparkllm.io/cluster={NAME}"
        )["items"]
        found = {f"{o['kind']}/{o['metadata']['name']}": o for o in items}
        found.pop(f"Secret/{NAME}-engine-key", None)
        found.pop(f"Secret/{NAME}-bench-key", None)  # generated, named in a comment
        return found if sorted(found) == sorted(rendered) else None

    applied = wait_until(live, timeout=60, what="every rendered object applied")
    problems = {
        name: found
        for name, obj in rendered.items()
        if (found := subset_problems(obj, applied[name], name))
    }
    assert problems == {}
