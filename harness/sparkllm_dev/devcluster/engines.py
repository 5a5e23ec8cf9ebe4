"""The engine harness: kwok runs the pod, the SGLang simulator runs the engine.

Why: in the dev cluster kwok plays every kubelet. It marks pods Running but executes
nothing, so without help no engine would ever answer, crash or turn unready. The harness
does the part of a kubelet that matters to the operator: for each Running engine pod
(label ``app.kubernetes.io/component=engine``) on a simulated node it runs ONE
``python -m sparkllm_dev.sim`` with the pod's own command line (``$(VAR)`` expanded from the
container env and its Secrets), on the node's 127.0.0.x address; it is the readiness
prober (the pod's Ready follows ``/health``); and it reports a simulator that dies the
way a kubelet reports a container exit. Before the engine it runs the pod's init
containers that are our own CLI (``sparkllm verify-model``: ``init_containers.py``),
with each simulated node's files under ``<hosts root>/<node>/`` (``hostpaths.py``), so
their termination messages are real. What a kubelet would decide is ``kubelet.py``
(pure); this module owns the threads, the processes and the API calls.

Threads: the pod cache (``engine_io.PodCache``); a supervisor that reconciles
processes against the cache every tick (0.5 s, or at once on a pod event) — level-based,
so a missed event costs one tick, never a stray process; one prober per engine with an
HTTP readiness probe. Only the supervisor starts or stops processes and writes status.
The thread, the tick and the pod -> engine map are ``pod_supervisor.PodSupervisor``'s,
shared with the gateway pods and benchmark Jobs; this module supplies the engine's part.

Safety: a lock file admits one all-namespaces harness XOR any number of namespaced ones;
processes run in their own session and, on Linux, die with the thread that started them
(PR_SET_PDEATHSIG), so even a killed harness leaves no engine behind. ``stop()`` sends
SIGTERM, waits (the simulator drains for up to 5 s) and SIGKILLs what is left. Not done,
on purpose: liveness and startup probes, resource accounting, images (docs/devcluster.md).
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import sys
import time
from collections import deque
from collections.abc import Mapping, Sequence
from contextlib import ExitStack, closing
from dataclasses import dataclass, replace
from pathlib import Path

from sparkllm.errors import ClusterAPIError
from sparkllm_dev.devcluster import engine_io, hostpaths, init_containers, kubelet, launch_step
from sparkllm_dev.devcluster.cluster import DevCluster
from sparkllm_dev.devcluster.engine_cache_dir import sim_cache_env
from sparkllm_dev.devcluster.init_containers import InitRun, InitSequence, InitView
from sparkllm_dev.devcluster.kubelet import JSON, ContainerView
from sparkllm_dev.devcluster.pod_supervisor import (
    PodSupervisor,
    cli_logging,
    pod_key,
    stop_signal,
    utc_timestamp,
    wait_or_kill,
)
from sparkllm_dev.errors import DevClusterError

logger = logging.getLogger(__name__)

STOP_GRACE_SECONDS = 8.0  # the simulator drains in-flight requests for up to 5 s
# How often the harness probes at most. A kubelet probes at the pod's periodSeconds (10 s
# for our ranks); the harness is faster, so tests do not wait a period for readiness, and
# no faster than this: each probe costs CPU in the tests' process and the simulator, and
# the cluster tests are CPU-bound on 2 cores (issue 30). 0.5 s probed twice as often for
# at most 0.5 s less per readiness wait (one period; 6 s instead of 3 s to unready).
PROBE_INTERVAL_SECONDS = 1.0
CONFIG_RETRY_SECONDS = 2.0


@dataclass(frozen=True)
class EngineInfo:
    """One engine the harness runs (a snapshot, for tests and the CLI)."""

    namespace: str
    pod: str
    uid: str
    node_ip: str
    pid: int | None  # None while init containers run or the container backs off
    ready: bool
    restarts: int
    log_path: Path
    initializing: bool = False  # init containers have not all passed yet


@dataclass
class _Engine:
    """One pod's engine container, stood in for by one simulator process at a time."""

    pod_key: tuple[str, str]
    uid: str
    node_ip: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    probe: kubelet.ReadinessProbe | None
    view: ContainerView
    written: ContainerView | None
    header: str
    container: str  # its name in the pod spec
    init: InitSequence | None = None
    written_init: tuple[InitView, ...] | None = None
    process: subprocess.Popen[bytes] | None = None
    prober: engine_io.Prober | None = None
    probe_period: float | None = None  # the readiness probe's periodSeconds, if set
    restart_at: float = 0.0
    kill_at: float = 0.0


class EngineHarness(PodSupervisor[_Engine]):
    """Run the simulator for every Running engine pod of the dev cluster, like a kubelet."""

    name, noun = "engine harness", "engine"
    stop_grace_seconds = STOP_GRACE_SECONDS
    retry_seconds = CONFIG_RETRY_SECONDS

    def __init__(
        self,
        cluster: DevCluster,
        *,
        sim_args: Sequence[str] = (),
        log_dir: Path | None = None,
        namespace: str | None = None,
        probe_interval: float = PROBE_INTERVAL_SECONDS,
        crash_backoff_seconds: float = kubelet.BACKOFF_INITIAL_SECONDS,
        hosts_root: Path | None = None,
        serve_logs: bool = False,
    ) -> None:
        super().__init__()
        self.cluster, self.serve_logs = cluster, serve_logs
        self.sim_args = tuple(sim_args)
        self.log_dir = log_dir or cluster.paths.state_dir / "engines"
        self.hosts_root = hosts_root or cluster.paths.state_dir / "hosts"
        self.namespace = namespace
        self.probe_interval = probe_interval  # at most; a shorter periodSeconds wins
        self.crash_backoff_seconds = crash_backoff_seconds
        self._stopping: list[_Engine] = []
        self._snapshot: tuple[EngineInfo, ...] = ()
        self._init_runs: deque[InitRun] = deque(maxlen=1000)
        self._lock = engine_io.HarnessLock(cluster.paths.state_dir, namespace=namespace)
        self._kube: engine_io.KubeClient | None = None
        self._cache: engine_io.PodCache | None = None

    def engines(self) -> tuple[EngineInfo, ...]:
        """The engines as of the supervisor's last tick."""
        return self._snapshot

    def init_runs(self) -> tuple[InitRun, ...]:
        """Every init container run that ended (the last 1000), oldest first."""
        return tuple(self._init_runs)

    # --- resources (before and after the supervisor thread) --------------------------

    def _open(self, resources: ExitStack) -> None:
        """Take the lock and fill the pod cache; ``start()`` returns once the list is in."""
        self._lock.acquire()
        resources.callback(self._lock.release)
        self._kube = resources.enter_context(
            closing(engine_io.KubeClient(self.cluster.paths.kubeconfig))
        )
        self._cache = engine_io.PodCache(
            self._kube, namespace=self.namespace, on_change=self._wake.set
        )
        self._cache.start()
        resources.callback(self._cache.stop)
        if self.serve_logs:
            self._serve_logs(self._kube, root=self.cluster.paths.pod_logs_dir)
        if not self._cache.synced.wait(timeout=30):
            raise DevClusterError("engine harness: no pod list from the API server in 30 s")
        logger.info("engine harness started; simulator logs in %s", self.log_dir)

    def _close(self) -> None:
        """Kill what is left: only if the thread did not end in time (its join failed)."""
        for engine in [*self._pod_states.values(), *self._stopping]:
            _stop_prober(engine)
            if engine.init is not None:
                engine.init.close()
            if engine.process is not None and engine.process.poll() is None:
                engine.process.kill()
                engine.process.wait()
        self._pod_states.clear()
        self._stopping.clear()
        self._snapshot = ()

    # --- the supervisor's hooks --------------------------------------------------------

    def _list_pods(self) -> dict[str, JSON]:
        assert self._cache is not None
        return self._cache.snapshot()

    def _housekeep(self, pods: Mapping[str, JSON]) -> None:
        self._reap_stopping()

    def _after_tick(self) -> None:
        self._snapshot = tuple(_info(engine) for engine in self._pod_states.values())

    def _container_outputs(self, engine: _Engine) -> dict[str, Path]:
        """The simulator's file as the engine container's; each init container run's."""
        inits = engine.init.outputs() if engine.init is not None else {}
        return {**inits, engine.container: engine.log_path}

    def _start_pod(self, uid: str, pod: JSON) -> _Engine | None:
        """The pod's engine: its init containers first if it has any, else the simulator."""
        key, node_ip = pod_key(pod), kubelet.host_ip(pod)
        container = kubelet.engine_container(pod)
        assert node_ip is not None
        assert container is not None
        if any(engine.node_ip == node_ip for engine in self._stopping):
            return None  # the node's previous engine still holds its address
        base_env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
        assert self._kube is not None
        refs = kubelet.key_refs(container)
        values = {ref: self._kube.read_key(ref, namespace=key[0]) for ref in refs}
        env = kubelet.container_env(pod, container, values=values)
        init = init_containers.build_sequence(
            pod, kube=self._kube, hosts_root=self.hosts_root, log_dir=self.log_dir,
            python=sys.executable, base_env=base_env,
            backoff_initial=self.crash_backoff_seconds, now=utc_timestamp(),
        )  # fmt: skip
        command = kubelet.command_line(container, env)
        restarts, last = kubelet.observed_restarts(pod, str(container["name"]))
        probe = kubelet.readiness_probe(pod, container)
        view = ContainerView(
            running_since=None if init else utc_timestamp(),
            ready=probe is None and init is None,
            restart_count=restarts,
            last_terminated=last,
            waiting_reason="PodInitializing",
            image_id=kubelet.image_id(
                str(container.get("image") or ""),
                node_digest=launch_step.node_image(pod, hosts_root=self.hosts_root).get("digest"),
            ),
        )
        env |= hostpaths.model_dir_env(pod, container, command, hosts_root=self.hosts_root)
        env |= sim_cache_env(pod, container, env, hosts_root=self.hosts_root)
        as_written = [*(container.get("command") or []), *(container.get("args") or [])]
        sim = shlex.join(["--sim-host", node_ip, *self.sim_args])  # logged: no Secret values
        engine = _Engine(
            pod_key=key,
            uid=uid,
            node_ip=node_ip,
            argv=kubelet.simulator_argv(
                python=sys.executable, node_ip=node_ip, sim_args=self.sim_args, command=command
            ),
            env={**base_env, **env},
            log_path=self.log_dir / f"{key[0]}_{key[1]}_{uid}.log",
            probe=probe,
            view=view,
            # no probe, no init containers: kwok's Running+Ready already says it all
            written=None if probe or init else view,
            header=f"pod uid {uid}: {sim} -- {shlex.join(as_written)}",
            container=str(container["name"]),
            init=init,
            probe_period=_period_seconds(container),
        )
        if init is None:
            self._run(engine, header=engine.header)
        return engine

    def _run(self, engine: _Engine, *, header: str) -> None:
        """Start (or restart) the simulator process and, with a probe, its prober."""
        engine.process = engine_io.spawn_simulator(
            engine.argv,
            env=engine.env,
            log_path=engine.log_path,
            header=f"--- {utc_timestamp()} engine harness: {header}",
        )
        if engine.probe is not None:
            engine.prober = engine_io.Prober(
                engine.probe,
                interval=min(self.probe_interval, engine.probe_period or self.probe_interval),
                on_change=self._wake.set,
            )
            engine.prober.start()
        pid = engine.process.pid
        logger.info("engine %s/%s started: pid %d on %s", *engine.pod_key, pid, engine.node_ip)

    def _follow(self, engine: _Engine, pod: JSON) -> None:
        """Notice a crash, restart after back-off, follow the probe, write status."""
        now = time.monotonic()
        if engine.init is not None and not engine.init.done:
            finished = engine.init.poll(now=utc_timestamp())
            if finished is not None:
                self._init_runs.append(finished)
            if engine.init.done:  # the last init container passed: the engine starts
                engine.view = replace(
                    engine.view, running_since=utc_timestamp(), ready=engine.probe is None
                )
                self._run(engine, header=engine.header)
        elif engine.process is not None and engine.process.poll() is not None:
            returncode, engine.process = engine.process.returncode, None
            _stop_prober(engine)
            backoff = kubelet.crash_backoff_seconds(
                engine.view.restart_count + 1, initial=self.crash_backoff_seconds
            )
            engine.restart_at = now + backoff
            engine.view = kubelet.after_exit(
                engine.view,
                returncode=returncode,
                finished_at=utc_timestamp(),
                backoff_seconds=backoff,
            )
            logger.warning("engine %s/%s exited with %d", *engine.pod_key, returncode)
        elif engine.process is None and now >= engine.restart_at:
            engine.view = replace(
                engine.view, running_since=utc_timestamp(), ready=engine.probe is None
            )
            self._run(engine, header=f"restart {engine.view.restart_count}")
        if engine.prober is not None:
            engine.view = replace(engine.view, ready=engine.prober.ready)
        self._write_status(engine, pod)

    def _write_status(self, engine: _Engine, pod: JSON) -> None:
        """Patch the pod status when the engine's view changed since the last write."""
        name = _container_name(pod)
        engine.view = kubelet.with_observed_restarts(engine.view, pod, name)
        if engine.written is not None:  # adopting a count the pod shows is not a change
            engine.written = kubelet.with_observed_restarts(engine.written, pod, name)
        init_views = engine.init.views if engine.init is not None else None
        if engine.view == engine.written and init_views == engine.written_init:
            return
        assert self._kube is not None
        body = kubelet.status_patch(pod, name, engine.view, now=utc_timestamp())
        if init_views is not None:
            body = init_containers.with_init_status(body, pod, init_views, now=utc_timestamp())
        try:
            self._kube.patch_pod_status(*engine.pod_key, body=body)
        except ClusterAPIError as exc:
            logger.warning("engine %s/%s: status write failed: %s", *engine.pod_key, exc)
            return
        engine.written, engine.written_init = engine.view, init_views

    # --- stopping -------------------------------------------------------------------

    def _retire(self, engine: _Engine, *, why: str) -> None:
        """SIGTERM the simulator; ``_reap_stopping`` SIGKILLs it after the grace period."""
        _stop_prober(engine)
        if engine.init is not None:
            engine.init.close()
        if engine.process is not None and engine.process.poll() is None:
            engine.process.terminate()
            engine.kill_at = time.monotonic() + STOP_GRACE_SECONDS
            self._stopping.append(engine)
        logger.info("engine %s/%s stopping: %s", *engine.pod_key, why)

    def _reap_stopping(self) -> None:
        for engine in list(self._stopping):
            assert engine.process is not None
            if engine.process.poll() is not None:
                self._stopping.remove(engine)
                logger.info("engine %s/%s stopped", *engine.pod_key)
            elif time.monotonic() >= engine.kill_at:
                engine.process.kill()

    def _drain(self) -> None:
        wait_or_kill(
            [engine.process for engine in self._stopping if engine.process is not None],
            grace_seconds=STOP_GRACE_SECONDS,
        )
        self._stopping.clear()
        self._snapshot = ()


def _stop_prober(engine: _Engine) -> None:
    if engine.prober is not None:
        engine.prober.stop()
        engine.prober = None


def _period_seconds(container: Mapping[str, object]) -> float | None:
    """The readiness probe's periodSeconds (a kubelet's interval), None when unset."""
    probe = container.get("readinessProbe")
    period = probe.get("periodSeconds") if isinstance(probe, Mapping) else None
    return float(period) if isinstance(period, int | float) and period > 0 else None


def _container_name(pod: JSON) -> str:
    container = kubelet.engine_container(pod) or {}
    return str(container.get("name", kubelet.ENGINE_CONTAINER))


def _info(engine: _Engine) -> EngineInfo:
    return EngineInfo(
        namespace=engine.pod_key[0],
        pod=engine.pod_key[1],
        uid=engine.uid,
        node_ip=engine.node_ip,
        pid=engine.process.pid if engine.process is not None else None,
        ready=engine.view.ready,
        restarts=engine.view.restart_count,
        log_path=engine.log_path,
        initializing=engine.init is not None and not engine.init.done,
    )


def run_engine_harness(
    cluster: DevCluster, *, sim_args: Sequence[str] = (), namespace: str | None = None
) -> int:
    """``sparkllm-dev engines``: run the harness (all namespaces) until SIGINT/SIGTERM."""
    if not logging.getLogger().handlers:
        cli_logging("engines")
        logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per probe otherwise
    if not cluster.is_running():
        print("[engines] the dev cluster is not running: `sparkllm-dev up`", file=sys.stderr)
        return 1
    with stop_signal() as stop:
        try:
            with EngineHarness(cluster, sim_args=sim_args, namespace=namespace, serve_logs=True):
                print("[engines] running simulators for engine pods; Ctrl-C stops", flush=True)
                while not stop.wait(timeout=1.0):
                    pass
        except DevClusterError as exc:
            print(f"[engines] {exc}", file=sys.stderr)
            return 1
    print("[engines] stopped; no simulator left running", flush=True)
    return 0
