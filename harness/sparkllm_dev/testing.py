"""The cluster fixtures as a pytest plugin: the real local control plane, a namespace per
test, fault injection, the operator as a process (a test's own, or one shared).

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

Two operator fixtures. ``operator`` is the test's own process, watching its namespace only:
for a test that stops, restarts (other flags) or kills it, or reads its whole log.
``shared_operator`` is one process for the session (per set of extra flags, chosen with
``@pytest.mark.operator_args(...)``) watching every namespace named ``ts<N>-*``; the test's
namespace is named so, and the test gets a view whose ``log()`` holds only what was written
since the test began. Why: starting and stopping an operator (a Python process importing
kopf, the product and the Kubernetes client, then kopf's shutdown) cost a few seconds of
the two cores per test, and most tests need only one that runs. Either way the test's
engine harness (its simulators, with the test's ``sim_args``) is its own.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import uuid
import zlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import pytest

from sparkllm_dev.ci import unavailable
from sparkllm_dev.devcluster import DevCluster, FaultInjector, wait_until
from sparkllm_dev.devcluster.engines import EngineHarness
from sparkllm_dev.devcluster.paths import PROFILE_ENV, TEST, TEST_PROFILES
from sparkllm_dev.errors import DevClusterError

ROOT = pathlib.Path(__file__).resolve().parents[2]  # the repository (editable install)
# Several dev clusters for one run on pytest-xdist workers: worker gwN takes the N-th
# profile of this comma-separated list (`make test` runs the cluster tests on two).
CLUSTERS_ENV = "SPARKLLM_DEVCLUSTERS"


def worker_profile(environ: Mapping[str, str]) -> str | None:
    """The profile this xdist worker uses from ``$SPARKLLM_DEVCLUSTERS``, or None.

    Why one cluster per worker: the cluster tests place replicas on the cluster's six
    simulated Sparks and watch its events, so two processes on one cluster would take each
    other's nodes. A list shorter than the workers, or a name that is no test profile, is
    refused (a worker silently sharing a cluster would fail in confusing ways)."""
    names = [name.strip() for name in environ.get(CLUSTERS_ENV, "").split(",") if name.strip()]
    worker = environ.get("PYTEST_XDIST_WORKER", "")
    if not names or not worker.startswith("gw"):
        return None
    index = int(worker[2:])
    unknown = [name for name in names if name not in TEST_PROFILES]
    if unknown:
        raise pytest.UsageError(
            f"{CLUSTERS_ENV}: {', '.join(unknown)} is not a test profile "
            f"({', '.join(sorted(TEST_PROFILES))})"
        )
    if index >= len(names):
        raise pytest.UsageError(
            f"{CLUSTERS_ENV} names {len(names)} cluster(s) for more xdist workers "
            f"(worker {worker}): one cluster per worker"
        )
    return names[index]


# Never the demo's cluster: a test profile (test, or test2..test5 when chosen for a second
# run beside the first, or one per xdist worker).
_worker_profile = worker_profile(os.environ)
if _worker_profile is not None:
    os.environ[PROFILE_ENV] = _worker_profile
elif os.environ.get(PROFILE_ENV) not in TEST_PROFILES:
    os.environ[PROFILE_ENV] = TEST.name


# A restart annotation (and the end of a run on demand) is read at the operator's next pass
# — kopf reports no change of a sparkllm.io/ annotation, the prefix of its own bookkeeping —
# so a test waiting for one runs the operator at a 5 s resync, not the default minute:
# ``@quick_resync`` (the shared operator of those flags), or these flags for its own.
QUICK_RESYNC = ("--resync-seconds", "5")
quick_resync = pytest.mark.operator_args(*QUICK_RESYNC)


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


def namespace_name(node_name: str, *, prefix: str = "t") -> str:
    slug = re.sub(r"[^a-z0-9-]+", "-", node_name.lower()).strip("-")[:40].strip("-")
    return f"{prefix}-{slug}-{uuid.uuid4().hex[:5]}"


def _operator_args(request: pytest.FixtureRequest) -> tuple[str, ...]:
    marker = request.node.get_closest_marker("operator_args")
    return tuple(str(arg) for arg in marker.args) if marker else ()


# This test session's mark in its shared operators' namespaces: another session on the same
# cluster (a second checkout, CI beside a developer) has operators of its own.
_SESSION = uuid.uuid4().hex[:4]
# A record of the operator's log begins with its time (runner.py's logging format); the
# lines after it (a traceback) belong to it.
_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[,.]\d{3} ", re.MULTILINE)


def shared_prefix(args: tuple[str, ...]) -> str:
    """The namespace prefix of this session's shared operator run with ``args`` (one per
    flag set)."""
    return f"ts{zlib.crc32(' '.join(args).encode()) % 1000:03d}{_SESSION}"


@pytest.fixture
def namespace(devcluster: DevCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace (with its default ServiceAccount ready), deleted afterwards.

    Named ``t-...``; for a test using ``shared_operator``, ``ts<N>-...``: the namespaces
    the shared operator of the test's ``operator_args`` watches.
    """
    shared = "shared_operator" in request.fixturenames
    prefix = shared_prefix(_operator_args(request)) if shared else "t"
    name = namespace_name(request.node.name, prefix=prefix)
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


class SharedOperatorView(OperatorProcess):
    """One test's view of a shared operator: its log records about the test's namespace,
    no stop/start, and the test's own engine harness (``engines``)."""

    def __init__(self, shared: OperatorProcess, namespace: str) -> None:
        super().__init__(shared.cluster, [namespace], shared.log_path)
        self.proc = shared.proc
        self.engines: EngineHarness | None = None
        self._offset = os.path.getsize(shared.log_path)

    def start(self, *extra: str) -> None:
        raise RuntimeError("the shared operator runs for the session: use `operator` to restart")

    def stop(self, *, kill: bool = False) -> None:
        raise RuntimeError("the shared operator runs for the session: use `operator` to stop")

    def log(self) -> str:
        """The records written since the test began that name its namespace, each with its
        traceback if it has one: the process serves other tests' namespaces too (a pass
        for the previous test's deleted object can still fail after this test began)."""
        with open(self.log_path, "rb") as fh:
            fh.seek(self._offset)
            text = fh.read().decode("utf-8", errors="replace")
        starts = [m.start() for m in _RECORD.finditer(text)]
        records = (text[a:b] for a, b in zip(starts, [*starts[1:], len(text)], strict=True))
        return "".join(record for record in records if self.namespaces[0] in record)


def _install_crds(devcluster: DevCluster) -> None:
    """The CRD from crds/ (server-side, idempotent), Established."""
    devcluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    devcluster.wait_established("inferenceclusters.sparkllm.io")


@contextmanager
def _engines(
    devcluster: DevCluster, namespace: str, tmp_path: pathlib.Path, request: pytest.FixtureRequest
) -> Iterator[EngineHarness]:
    """The engine harness of the test's namespace, with the test's ``sim_args``.

    It plays the kubelet's part kwok does not: it runs an SGLang simulator per engine pod
    and is rank 0's readiness prober.
    """
    marker = request.node.get_closest_marker("sim_args")
    sim_args = tuple(marker.args) if marker else ()
    with EngineHarness(
        devcluster,
        namespace=namespace,
        log_dir=tmp_path / "engines",
        sim_args=sim_args,
        hosts_root=tmp_path / "hosts",  # the simulated nodes' files, private to this test
    ) as engines:
        yield engines


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
    _install_crds(devcluster)
    proc = OperatorProcess(devcluster, [namespace], str(tmp_path / "operator.log"))
    proc.start(*_operator_args(request))
    with _engines(devcluster, namespace, tmp_path, request):
        yield proc
        # Delete the test's InferenceClusters while the operator still runs, then stop it.
        devcluster.kubectl("delete", "icl", "--all", "-n", namespace, "--wait=false", check=False)
        proc.stop()


class _SharedOperators:
    """The session's shared operators, one per set of extra flags, started when first asked."""

    def __init__(self, devcluster: DevCluster, log_dir: pathlib.Path) -> None:
        self.devcluster = devcluster
        self.log_dir = log_dir
        self.running: dict[tuple[str, ...], OperatorProcess] = {}

    def get(self, args: tuple[str, ...]) -> OperatorProcess:
        if args not in self.running:
            _install_crds(self.devcluster)
            prefix = shared_prefix(args)
            proc = OperatorProcess(
                self.devcluster, [f"{prefix}-*"], str(self.log_dir / f"operator-{prefix}.log")
            )
            proc.start(*args)
            self.running[args] = proc
        return self.running[args]

    def stop(self) -> None:
        for proc in self.running.values():
            proc.stop()


@pytest.fixture(scope="session")
def _shared_operators(
    devcluster: DevCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[_SharedOperators]:
    operators = _SharedOperators(devcluster, tmp_path_factory.mktemp("shared-operators"))
    yield operators
    operators.stop()


@pytest.fixture
def shared_operator(
    _shared_operators: _SharedOperators,
    devcluster: DevCluster,
    namespace: str,
    tmp_path: pathlib.Path,
    request: pytest.FixtureRequest,
) -> Iterator[OperatorProcess]:
    """The session's operator for the test's ``operator_args``, watching this namespace
    among others (``ts<N>-*``), and this test's own engine harness.

    What it returns is a view: ``log()`` is what the operator wrote since the test began,
    ``stop()``/``start()`` refuse (a test that restarts the operator uses ``operator``).
    Afterwards the test's InferenceClusters are deleted (waiting until they are gone) and
    the harness stops their simulators.
    """
    shared = _shared_operators.get(_operator_args(request))
    if shared.proc is None or shared.proc.poll() is not None:
        pytest.fail(f"the shared operator exited; its log: {shared.log_path}")
    view = SharedOperatorView(shared, namespace)
    with _engines(devcluster, namespace, tmp_path, request) as view.engines:
        yield view
        # Gone before the namespace goes: its watch ends with the namespace, and a deletion
        # the operator never saw would leave it re-checking the object every resync.
        devcluster.kubectl("delete", "icl", "--all", "-n", namespace, "--timeout=60s", check=False)
