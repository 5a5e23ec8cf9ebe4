"""Shared fixtures: the real local control plane, a namespace per test, fault injection.

The dev cluster is session-scoped and reused when it is already up (a developer's
`sparkllm devcluster up`); a cluster this session started is stopped at the end unless
SPARKLLM_KEEP_CLUSTER=1. Under CI=true a missing binary or a cluster that fails to start
FAILS the run: cluster tests never skip silently in CI.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator

import pytest

from sparkllm.devcluster import DevCluster, FaultInjector, wait_until
from sparkllm.errors import DevClusterError

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


@pytest.fixture(scope="session")
def devcluster() -> Iterator[DevCluster]:
    """The running dev cluster (started here if needed)."""
    cluster = DevCluster()
    missing = cluster.paths.missing_binaries()
    if missing:
        message = f"dev cluster binaries missing ({', '.join(missing)}): run `make binaries`"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    try:
        started = cluster.up(log=False)
    except DevClusterError as exc:
        pytest.fail(f"dev cluster failed to start: {exc}")
    yield cluster
    if started and os.environ.get("SPARKLLM_KEEP_CLUSTER") != "1":
        cluster.down()


def _namespace_name(node_name: str) -> str:
    slug = re.sub(r"[^a-z0-9-]+", "-", node_name.lower()).strip("-")[:40].strip("-")
    return f"t-{slug}-{uuid.uuid4().hex[:5]}"


@pytest.fixture
def namespace(devcluster: DevCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace (with its default ServiceAccount ready), deleted afterwards."""
    name = _namespace_name(request.node.name)
    devcluster.kubectl("create", "namespace", name)
    wait_until(
        lambda: devcluster.kubectl("get", "sa", "default", "-n", name, check=False).returncode == 0,
        timeout=60,
        what=f"default ServiceAccount in {name}",
    )
    yield name
    devcluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def faults(devcluster: DevCluster) -> Iterator[FaultInjector]:
    """Fault injection; afterwards every simulated node is registered and Ready again."""
    injector = FaultInjector(devcluster)
    yield injector
    injector.restore_nodes()
    wait_until(
        lambda: devcluster.nodes_ready() == 6, timeout=60, what="all Spark nodes Ready again"
    )
