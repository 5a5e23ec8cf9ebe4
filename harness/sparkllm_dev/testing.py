"""The cluster fixtures as a pytest plugin: the real local control plane, a namespace per
test, fault injection, the operator as a process.

Why a plugin module in the harness rather than a conftest.py: both test trees (the product's
tests/ and the harness's own harness/tests/) need the same fixtures; the repository's root
conftest.py loads this module with ``pytest_plugins = ["sparkllm_dev.testing"]``.

The tests run on a dev cluster of their own, the ``test`` profile (its own kwokctl name,
ports, node addresses and state directory; ``devcluster/paths.py``), so `make test` passes
while `make demo` runs on the ``demo`` profile. Loading this plugin sets
``SPARKLLM_DEVCLUSTER=test`` in the test process, so every ``DevCluster()`` and every
``sparkllm-dev`` child a test starts acts on the tests' cluster too.

The dev cluster is session-scoped and reused when it is already up (a developer's
`sparkllm-dev --cluster test up`); a cluster this session started is stopped at the end
unless SPARKLLM_KEEP_CLUSTER=1. Under CI=true a missing binary or a cluster that fails to
start FAILS the run: cluster tests never skip silently in CI.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest

from sparkllm_dev.ci import unavailable
from sparkllm_dev.devcluster import DevCluster, FaultInjector, wait_until
from sparkllm_dev.devcluster.engines import EngineHarness
from sparkllm_dev.devcluster.paths import PROFILE_ENV, TEST, TEST_PROFILES
from sparkllm_dev.errors import DevClusterError

ROOT = pathlib.Path(__file__).resolve().parents[2]  # the repository (editable install)
# Never the demo's cluster: a test profile (test, or test2/test3 when chosen for a second
# run beside the first).
if os.environ.get(PROFILE_ENV) not in TEST_PROFILES:
    os.environ[PROFILE_ENV] = TEST.name


def source_pythonpath() -> str:
    """PYTHONPATH holding both import roots (operator/, harness/) for a child interpreter."""
    import sparkllm
    import sparkllm_dev

    roots = (pathlib.Path(str(module.__file__)).parents[1] for module in (sparkllm, sparkllm_dev))
    return os.pathsep.join(str(root) for root in roots)


@pytest.fixture(scope="session")
def devcluster() -> Iterator[DevCluster]:
    """The running dev cluster (started here if needed)."""
    cluster = DevCluster()
    missing = cluster.paths.missing_binaries()
    if missing:
        unavailable(f"dev cluster binaries missing ({', '.join(missing)}): run `make binaries`")
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
    count = len(devcluster.nodes())
    wait_until(
        lambda: devcluster.nodes_ready() == count, timeout=60, what="all Spark nodes Ready again"
    )


class OperatorProcess:
    """The real operator (`sparkllm run`) as a child process, watching chosen namespaces."""

    def __init__(self, cluster: DevCluster, namespaces: list[str], log_path: str) -> None:
        self.cluster = cluster
        self.namespaces = namespaces
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *extra: str) -> None:
        args = [sys.executable, "-m", "sparkllm.cli", "run", "--metrics-port", "0"]
        for ns in self.namespaces:
            args += ["-n", ns]
        env = {**os.environ, "KUBECONFIG": str(self.cluster.paths.kubeconfig)}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*args, *extra], stdout=log, stderr=subprocess.STDOUT, env=env
            )

    def stop(self, *, kill: bool = False) -> None:
        if self.proc is None:
            return
        if kill:
            self.proc.kill()
        else:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as fh:
            return fh.read()


@pytest.fixture
def operator(
    devcluster: DevCluster,
    namespace: str,
    tmp_path: pathlib.Path,
    request: pytest.FixtureRequest,
) -> Iterator[OperatorProcess]:
    """The operator, running as its own process, watching this test's namespace.

    The CRD is applied from crds/ first (server-side, idempotent); an engine harness
    scoped to the namespace runs the simulated SGLang engines.
    """
    devcluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    devcluster.wait_established("inferenceclusters.sparkllm.io")
    proc = OperatorProcess(devcluster, [namespace], str(tmp_path / "operator.log"))
    proc.start()
    # The engine harness plays the kubelet's part kwok does not: it runs an SGLang
    # simulator per engine pod and is rank 0's readiness prober.
    marker = request.node.get_closest_marker("sim_args")
    sim_args = tuple(marker.args) if marker else ()
    with EngineHarness(
        devcluster,
        namespace=namespace,
        log_dir=tmp_path / "engines",
        sim_args=sim_args,
        hosts_root=tmp_path / "hosts",  # the simulated nodes' files, private to this test
    ):
        yield proc
        # Delete the test's InferenceClusters while the operator still runs, then stop it.
        devcluster.kubectl("delete", "icl", "--all", "-n", namespace, "--wait=false", check=False)
        proc.stop()
