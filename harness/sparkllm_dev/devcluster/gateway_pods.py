"""Gateway pods in the dev cluster: kwok runs the pod, this module runs its two containers.

Why: kwok marks a gateway pod (``app.kubernetes.io/component=gateway``) Running but runs
nothing. To exercise the front door for real, this does for it what ``engines.py`` does
for engine pods: for every Running gateway pod on a simulated node it runs the pod's own
``router`` (smg) and ``admission`` containers as local processes, from the pod spec
(``$(VAR)`` and ``secretKeyRef`` resolved by the pure ``kubelet`` helpers), with what a
kubelet would provide:

- volumes: Secret, ConfigMap and projected volumes (the users' keys with the operator's
  Jobs' key, the governance policy) are written in the kubelet's layout (``..data``
  swapped atomically, ``items`` and ``optional`` honoured) and re-written when their
  object changes, so key and policy reloads are real; a missing non-optional one keeps
  the pod from starting, said in the harness's log ("cannot start yet:
  MountVolume.SetUp failed ..."). The model volume
  (hostPath/PVC) is the local ``tokenizer_dir``; an emptyDir a temp dir. Env values
  pointing into a mount are rewritten to the local directory.
- the pod's loopback: its ports become free loopback ports (pods and engineers share
  this machine); the admission layer's address is reported by ``endpoint``.
- in-cluster credentials: smg's ``KUBECONFIG`` authenticates as the pod's
  ServiceAccount (a TokenRequest token), so the gateway Role is what allows its watch.

- probes and pod status: the admission container's readiness probe (httpGet, as
  rendered) is run against its local port, the router (no readiness probe) is ready while
  it runs, and the pod status shows both (``gateway_status``), so a healthy gateway pod
  is 2/2 Ready and an unready admission layer is seen.

Level-based: the supervisor thread (``pod_supervisor.PodSupervisor``, shared with the
engine harness and the benchmark Jobs) lists gateway pods every tick and starts, restarts
(after a back-off) or stops processes. Not done: liveness and startup probes, resources,
images.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack, closing
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import yaml

from sparkllm.errors import ClusterAPIError
from sparkllm.gateway_settings import ENV_PREFIX, env_var_name
from sparkllm_dev.devcluster import engine_io, gateway_status, kubelet
from sparkllm_dev.devcluster.cluster import DevCluster
from sparkllm_dev.devcluster.gateway_io import (
    ROUTER_PORT_FLAGS,
    SELECTOR,
    GatewayKube,
    SourceVolume,
    free_port,
    localize_router_args,
    pod_volumes,
    service_account_kubeconfig,
    sync_volumes,
)
from sparkllm_dev.devcluster.kubelet import JSON, ContainerView, ReadinessProbe
from sparkllm_dev.devcluster.pod_supervisor import (
    PodSupervisor,
    cli_logging,
    pod_key,
    pods_by_uid,
    scratch_directory,
    stop_processes,
    stop_signal,
    utc_timestamp,
)
from sparkllm_dev.errors import DevClusterError

logger = logging.getLogger(__name__)

ROUTER, ADMISSION = "router", "admission"
STOP_GRACE_SECONDS = 8.0
RESTART_SECONDS = 2.0
PROBE_SECONDS = 0.5  # the probe's period, shortened as for engine pods (engines.py)


@dataclass(frozen=True)
class GatewayInfo:
    """One gateway pod as run here (a snapshot, for tests and the benchmark)."""

    namespace: str
    pod: str
    uid: str
    admission_url: str  # the pod's entry point, as the Service would reach it
    router_url: str  # smg, on loopback as in the pod
    router_metrics_url: str
    log_dir: Path  # router.log and admission.log
    metrics_url: str  # the admission layer's /metrics, on its own port (not admission_url's)


@dataclass
class _Container:
    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    probe: ReadinessProbe | None = None  # its readiness probe, aimed at the local port
    process: subprocess.Popen[bytes] | None = None
    restart_at: float = 0.0
    prober: engine_io.Prober | None = None
    view: ContainerView = field(
        default_factory=lambda: ContainerView(running_since=None, ready=False, restart_count=0)
    )


@dataclass
class _Gateway:
    key: tuple[str, str]
    workdir: Path
    info: GatewayInfo
    containers: list[_Container]
    volumes: list[SourceVolume]  # its Secret, ConfigMap and projected volumes, synced each tick
    written: dict[str, ContainerView] | None = None  # the views the pod status shows


class GatewayPods(PodSupervisor[_Gateway]):
    """Run the router and admission containers of every Running gateway pod, like a kubelet."""

    name, noun = "gateway pods", "gateway"
    stop_grace_seconds = STOP_GRACE_SECONDS

    def __init__(
        self,
        cluster: DevCluster,
        *,
        tokenizer_dir: Path,
        namespace: str | None = None,
        host: str = "127.0.0.1",
        log_dir: Path | None = None,
        serve_logs: bool = False,
    ) -> None:
        super().__init__()
        self.cluster, self.serve_logs = cluster, serve_logs
        self.tokenizer_dir = tokenizer_dir
        self.namespace = namespace
        self.host = host
        self.log_dir = log_dir or cluster.paths.state_dir / "gateways"
        self._snapshot: dict[tuple[str, str], GatewayInfo] = {}
        self._kube: GatewayKube | None = None
        self._workdir: Path | None = None

    def gateways(self) -> tuple[GatewayInfo, ...]:
        """The gateway pods running here, as of the supervisor's last tick."""
        return tuple(self._snapshot.values())

    def endpoint(self, namespace: str, pod: str) -> str:
        """The admission layer's base URL for ``namespace/pod``; DevClusterError if not run."""
        info = self._snapshot.get((namespace, pod))
        if info is None:
            raise DevClusterError(f"gateway pod {namespace}/{pod} is not running here")
        return info.admission_url

    # --- the supervisor's hooks --------------------------------------------------------

    def _open(self, resources: ExitStack) -> None:
        self._kube = resources.enter_context(closing(GatewayKube(self.cluster.paths.kubeconfig)))
        self._workdir = scratch_directory(resources, prefix="sparkllm-gateways-")
        if self.serve_logs:
            self._serve_logs(self._kube, root=self.cluster.paths.pod_logs_dir)

    def _close(self) -> None:
        self._snapshot = {}

    def _list_pods(self) -> dict[str, JSON]:
        assert self._kube is not None
        return pods_by_uid(self._kube.list_pods_by_selector(SELECTOR, namespace=self.namespace))

    def _start_pod(self, uid: str, pod: JSON) -> _Gateway:
        """The pod's processes, ready to run: ``_follow`` starts them in this same tick."""
        gateway = self._prepare(pod, uid=uid, key=pod_key(pod))
        logger.info("gateway %s/%s started: %s", *gateway.key, gateway.info.admission_url)
        return gateway

    def _follow(self, gateway: _Gateway, pod: JSON) -> None:
        self._sync_volumes(gateway, starting=False)
        _keep_running(gateway, on_change=self._wake.set)
        self._write_status(gateway, pod)

    def _write_status(self, gateway: _Gateway, pod: JSON) -> None:
        """Patch the pod status when a container's view changed since the last write."""
        assert self._kube is not None
        views = {c.name: c.view for c in gateway.containers}
        if views == gateway.written:
            return
        body = gateway_status.pod_status_patch(pod, views, now=utc_timestamp())
        try:
            self._kube.patch_pod_status(*gateway.key, body=body)
        except ClusterAPIError as exc:
            logger.warning("gateway %s/%s: status write failed: %s", *gateway.key, exc)
            return
        gateway.written = views

    def _retire(self, gateway: _Gateway, *, why: str) -> None:
        logger.info("gateway %s/%s stopping: %s", *gateway.key, why)
        _stop_containers(gateway.containers)
        shutil.rmtree(gateway.workdir, ignore_errors=True)

    def _after_tick(self) -> None:
        self._snapshot = {g.key: g.info for g in self._pod_states.values()}

    def _container_outputs(self, gateway: _Gateway) -> dict[str, Path]:
        return {c.name: c.log_path for c in gateway.containers}

    def _prepare(self, pod: JSON, *, uid: str, key: tuple[str, str]) -> _Gateway:
        assert self._kube is not None
        assert self._workdir is not None
        containers = {c["name"]: c for c in pod["spec"].get("containers") or []}
        if ROUTER not in containers or ADMISSION not in containers:
            raise DevClusterError(f"pod has no {ROUTER!r} and {ADMISSION!r} containers")
        workdir = self._workdir / f"{key[0]}_{key[1]}_{uid}"
        paths, volumes = pod_volumes(
            pod, containers[ADMISSION], workdir=workdir, model_dir=self.tokenizer_dir
        )
        ports = {flag: free_port("127.0.0.1") for flag in ROUTER_PORT_FLAGS}
        admission_port = free_port(self.host)
        router_env = self._env(pod, containers[ROUTER])
        router_env["KUBECONFIG"] = str(self._kubeconfig(pod, workdir=workdir))
        admission_env = {
            name: _map_path(value, paths)
            for name, value in self._env(pod, containers[ADMISSION]).items()
        }
        declared_port = int(admission_env.get(env_var_name("listen_port")) or 0)
        admission_env[env_var_name("listen_host")] = self.host
        admission_env[env_var_name("listen_port")] = str(admission_port)
        # Every gateway pod shares this machine: its metrics port, like its listen port,
        # becomes a free one (served on the same host, never on admission_port).
        metrics_port = free_port(self.host)
        admission_env[env_var_name("metrics_port")] = str(metrics_port)
        # The admission layer reads its InferenceCluster as the pod's ServiceAccount too.
        admission_env["KUBECONFIG"] = router_env["KUBECONFIG"]
        admission_env[env_var_name("upstream_url")] = f"http://127.0.0.1:{ports['--port']}"
        base = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", ENV_PREFIX))}
        logs = self.log_dir / f"{key[0]}_{key[1]}_{uid}"
        router_words = kubelet.command_line(containers[ROUTER], router_env)
        admission_words = kubelet.command_line(containers[ADMISSION], admission_env)
        router_argv = localize_router_args(router_words[1:], ports=ports)
        router = _Container(ROUTER, [_executable(router_words[0]), *router_argv],
                            {**base, **router_env}, logs / "router.log")  # fmt: skip
        admission = _Container(ADMISSION, [_executable(admission_words[0]), *admission_words[1:]],
                               {**base, **admission_env}, logs / "admission.log")  # fmt: skip
        admission.probe = gateway_status.local_readiness_probe(
            pod, containers[ADMISSION], host=self.host, ports={declared_port: admission_port}
        )
        info = GatewayInfo(
            namespace=key[0], pod=key[1], uid=uid, log_dir=logs,
            admission_url=f"http://{self.host}:{admission_port}",
            router_url=f"http://127.0.0.1:{ports['--port']}",
            router_metrics_url=f"http://127.0.0.1:{ports['--prometheus-port']}/metrics",
            metrics_url=f"http://{self.host}:{metrics_port}/metrics",
        )  # fmt: skip
        gateway = _Gateway(
            key=key, workdir=workdir, info=info, containers=[router, admission],
            volumes=volumes,
        )  # fmt: skip
        try:  # a missing non-optional source: the kubelet keeps the pod in ContainerCreating
            self._sync_volumes(gateway, starting=True)
        except BaseException:
            shutil.rmtree(workdir, ignore_errors=True)  # retried from scratch next time
            raise
        return gateway

    def _kubeconfig(self, pod: JSON, *, workdir: Path) -> Path:
        """A kubeconfig as the pod's ServiceAccount (what in-cluster config would give)."""
        assert self._kube is not None
        account = str(pod["spec"].get("serviceAccountName") or "default")
        token = self._kube.service_account_token(account, namespace=pod["metadata"]["namespace"])
        dev = yaml.safe_load(self.cluster.paths.kubeconfig.read_text(encoding="utf-8"))
        path = workdir / "kubeconfig"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(service_account_kubeconfig(dev, token=token)))
        path.chmod(0o600)
        return path

    def _env(self, pod: JSON, container: JSON) -> dict[str, str]:
        assert self._kube is not None
        namespace = str(pod["metadata"]["namespace"])
        refs = kubelet.key_refs(container)
        values = {ref: self._kube.read_key(ref, namespace=namespace) for ref in refs}
        return kubelet.container_env(pod, container, values=values)

    def _sync_volumes(self, gateway: _Gateway, *, starting: bool) -> None:
        kube = self._kube
        assert kube is not None
        sync_volumes(
            gateway.volumes, starting=starting, pod="/".join(gateway.key),
            read=lambda kind, name: kube.read_volume_source(kind, name, namespace=gateway.key[0]),
        )  # fmt: skip


def _map_path(value: str, paths: Mapping[str, Path]) -> str:
    for mount, local in paths.items():
        if value == mount or value.startswith(mount.rstrip("/") + "/"):
            return str(local) + value[len(mount.rstrip("/")) :]
    return value


def _executable(word: str) -> str:
    """The image's ``python``/``smg`` as this environment's (exec needs absolute paths)."""
    if word in ("python", "python3"):
        return sys.executable
    local = Path(sys.executable).parent / word
    return str(local) if local.exists() else word


def _keep_running(gateway: _Gateway, *, on_change: Callable[[], None]) -> None:
    """Start what is not running; restart an exited container after a short back-off;
    follow each container's readiness (its probe's, or running without one)."""
    for container in gateway.containers:
        process = container.process
        if process is not None and process.poll() is not None:
            container.process, container.restart_at = None, time.monotonic() + RESTART_SECONDS
            _stop_prober(container)
            container.view = kubelet.after_exit(
                container.view, returncode=process.returncode, finished_at=utc_timestamp(),
                backoff_seconds=RESTART_SECONDS,
            )  # fmt: skip
            logger.warning("gateway %s/%s: %s exited with %d", *gateway.key, container.name,
                           process.returncode)  # fmt: skip
        if container.process is None and time.monotonic() >= container.restart_at:
            header = f"--- {datetime.now(UTC).isoformat()} gateway pods: {container.name}"
            container.process = engine_io.spawn_simulator(
                container.argv, env=container.env, log_path=container.log_path, header=header
            )
            container.view = gateway_status.started(
                container.view, now=utc_timestamp(), has_probe=container.probe is not None
            )
            if container.probe is not None:
                container.prober = engine_io.Prober(
                    container.probe, interval=PROBE_SECONDS, on_change=on_change
                )
                container.prober.start()
        if container.prober is not None:
            container.view = replace(container.view, ready=container.prober.ready)


def _stop_prober(container: _Container) -> None:
    if container.prober is not None:
        container.prober.stop()
        container.prober = None


def _stop_containers(containers: list[_Container]) -> None:
    for container in containers:
        _stop_prober(container)
    processes = [c.process for c in containers if c.process is not None]
    stop_processes(processes, grace_seconds=STOP_GRACE_SECONDS)
    for container in containers:
        container.process = None


def run_gateway_pods(
    cluster: DevCluster, *, tokenizer_dir: Path, namespace: str | None, state_file: Path
) -> int:
    """``sparkllm-dev gateways``: run gateway pods until SIGINT/SIGTERM.

    The admission endpoints (``namespace/pod -> URL``) are written to ``state_file`` as
    JSON whenever they change, so another process (the demo) can tell users where the
    front door is; their ``/metrics`` URLs (a port of their own, chosen at start) likewise
    to :func:`metrics_file` of it, so the demo can say what a Prometheus here scrapes.
    """
    cli_logging("gateways")
    written: dict[str, str] | None = None
    metrics = metrics_file(state_file)
    with (
        stop_signal() as stop,
        GatewayPods(
            cluster, tokenizer_dir=tokenizer_dir, namespace=namespace, serve_logs=True
        ) as pods,
    ):
        while not stop.wait(timeout=0.5):
            gateways = pods.gateways()
            current = {f"{g.namespace}/{g.pod}": g.admission_url for g in gateways}
            if current != written:
                urls = {f"{g.namespace}/{g.pod}": g.metrics_url for g in gateways}
                metrics.write_text(json.dumps(urls, indent=2))
                state_file.write_text(json.dumps(current, indent=2))
                written = current
    state_file.unlink(missing_ok=True)
    metrics.unlink(missing_ok=True)
    return 0


def metrics_file(state_file: Path) -> Path:
    """Where ``run_gateway_pods`` writes the admission layers' ``/metrics`` URLs (a file
    beside ``state_file``, whose format other readers, the Jobs' harness, rely on)."""
    return state_file.with_name(f"{state_file.stem}-metrics.json")


__all__ = [  # free_port and localize_router_args are re-exported for the benchmarks
    "GatewayInfo",
    "GatewayPods",
    "free_port",
    "localize_router_args",
    "metrics_file",
    "run_gateway_pods",
]
