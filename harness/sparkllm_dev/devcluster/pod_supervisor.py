"""The lifecycle the dev cluster's kubelet stand-ins share: a thread, a tick, a pod map.

Why: kwok runs no containers, so three harnesses play the kubelet for three kinds of pods
— ``engines.py`` (one SGLang simulator per engine pod, and its readiness prober),
``gateway_pods.py`` (a gateway pod's router and admission processes) and
``bench_jobs.py`` (a benchmark Job's pod, run once). They differ in which pods they take
and what they run for one; the loop around that is the same, and lives here once:

- ``PodSupervisor``: ``start``/``stop``/``with``; what the thread needs (API client, lock,
  scratch directory) is entered on an ``ExitStack`` and closed in reverse after the
  thread ends (at once, when opening fails). The thread ticks every ``tick_seconds`` (or
  at once after ``_wake.set()``) and per tick, level-based — a missed pod event costs a
  tick, never a stray process — (1) retires the state of every pod that is gone or no
  longer runs, (2) starts what a newly Running pod needs, logging once per reason why
  it cannot start yet and retrying after ``retry_seconds``, (3) follows every pod it
  runs (restarts, probes, status). A failed tick is logged and the next one retries;
  nothing but this thread touches the uid -> state map. When the thread ends it retires
  everything, so ``stop()`` leaves no process behind.
- ``stop_processes`` / ``wait_or_kill``: SIGTERM, wait to one deadline, SIGKILL.
- ``stop_signal``: what a ``run_*`` CLI entry needs to end on SIGINT/SIGTERM.

A harness subclasses ``PodSupervisor`` and supplies the hooks (the ``_``-methods below
marked "hook"); its log lines go to its own module's logger, as before the split.

``kubectl logs`` (``pod_logs.py``), when a harness asks for it (``_serve_logs`` in its
``_open``; the ``sparkllm-dev`` commands the demo runs do): each pod it starts gets its
``Logs`` object, naming the files ``_container_outputs`` gives, and every tick copies what
the processes wrote into them; a retired pod's last lines too.
"""

from __future__ import annotations

import logging
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar, Generic, Self, TypeVar

from sparkllm.errors import ClusterAPIError
from sparkllm_dev.devcluster import engine_io, kubelet
from sparkllm_dev.devcluster.kubelet import JSON
from sparkllm_dev.devcluster.pod_logs import PodLogs
from sparkllm_dev.errors import DevClusterError

TICK_SECONDS = 0.5
POD_GONE, POD_ENDED, SHUTTING_DOWN = "pod gone", "pod ended", "harness stopping"
# Why a pod's processes cannot start yet (a missing key, an API error, a busy port, a
# failed exec): logged once per message, retried after ``retry_seconds``.
START_ERRORS = (kubelet.ContainerConfigError, ClusterAPIError, DevClusterError, OSError)

StateT = TypeVar("StateT")


class PodSupervisor(ABC, Generic[StateT]):
    """Keep one ``StateT`` (the processes a harness runs for a pod) per pod it runs."""

    name: ClassVar[str]  # "engine harness": in errors, log lines and the thread's name
    noun: ClassVar[str]  # "engine": what one pod's processes are called in log lines
    tick_seconds: ClassVar[float] = TICK_SECONDS
    stop_grace_seconds: ClassVar[float] = 8.0  # stop() waits this + 10 s for the thread
    retry_seconds: ClassVar[float] = 2.0  # after a pod could not start

    def __init__(self) -> None:
        self._log = logging.getLogger(type(self).__module__)
        self._pod_states: dict[str, StateT] = {}
        self._deferred: dict[str, tuple[float, str]] = {}  # uid -> (retry at, why not)
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._resources = ExitStack()
        self._pod_logs: PodLogs | None = None  # set by _serve_logs: kubectl logs served

    # --- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        """Open the harness's resources and start ticking."""
        if self._thread is not None:
            raise DevClusterError(f"{self.name} already started")
        self._resources = ExitStack()
        try:
            self._open(self._resources)
        except BaseException:
            self._resources.close()
            raise
        self._stopped.clear()
        self._thread = threading.Thread(
            target=self._supervise, name=self.name.replace(" ", "-"), daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop every process and the thread, then close the resources. Idempotent."""
        self._stopped.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self.stop_grace_seconds + 10)
            self._thread = None
        self._close()
        self._resources.close()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- the loop -------------------------------------------------------------------

    def _supervise(self) -> None:
        try:
            while not self._stopped.is_set():
                self._wake.wait(timeout=self.tick_seconds)
                self._wake.clear()
                if self._stopped.is_set():
                    break
                try:
                    self._tick()
                except (ClusterAPIError, DevClusterError) as exc:
                    self._log.warning("%s tick failed (retrying): %s", self.name, exc)
                except Exception:  # one bad tick must not end the harness
                    self._log.exception("%s tick failed; retrying", self.name)
        finally:
            for uid in list(self._pod_states):
                self._retire(self._pod_states.pop(uid), why=SHUTTING_DOWN)
                self._ship_logs(final_uid=uid)
            self._drain()

    def _tick(self) -> None:
        pods = self._list_pods()
        for uid, state in list(self._pod_states.items()):
            why = self._stop_reason(state, pods.get(uid))
            if why is not None:
                self._retire(state, why=why)  # first: if it raises, the next tick retries
                del self._pod_states[uid]
                self._ship_logs(final_uid=uid)
        self._housekeep(pods)
        self._deferred = {uid: v for uid, v in self._deferred.items() if uid in pods}
        for uid, pod in pods.items():
            if uid not in self._pod_states and self._may_start(uid, pod):
                self._try_start(uid, pod)
        for uid, state in self._pod_states.items():
            self._follow(state, pods[uid])
        self._ship_logs()
        self._after_tick()

    def _try_start(self, uid: str, pod: JSON) -> None:
        retry_at, said = self._deferred.get(uid, (0.0, ""))
        if time.monotonic() < retry_at:
            return
        try:
            state = self._start_pod(uid, pod)
        except START_ERRORS as exc:
            if str(exc) != said:
                self._log.warning("%s %s/%s cannot start yet: %s", self.noun, *pod_key(pod), exc)
                self._cannot_start(pod, exc)
            self._deferred[uid] = (time.monotonic() + self.retry_seconds, str(exc))
            return
        if state is not None:
            if uid in self._deferred:
                self._started_after_all(pod)
            self._deferred.pop(uid, None)
            self._pod_states[uid] = state
            if self._pod_logs is not None:
                try:
                    self._pod_logs.add(pod, self._container_outputs(state))
                except OSError as exc:  # the pod runs; only its logs are not served
                    self._log.warning("%s %s/%s: logs not served: %s", self.noun,
                                      *pod_key(pod), exc)  # fmt: skip

    def _serve_logs(self, kube: engine_io.KubeClient, *, root: Path) -> None:
        """Call from ``_open``: serve ``kubectl logs`` for the pods run (files under ``root``)."""
        self._pod_logs = PodLogs(kube, root=root)

    def _ship_logs(self, *, final_uid: str | None = None) -> None:
        if self._pod_logs is not None:
            try:
                self._pod_logs.ship(final_uid=final_uid)
            except OSError as exc:
                self._log.warning("%s: logs not copied: %s", self.name, exc)

    # --- hooks ------------------------------------------------------------------------

    def _open(self, resources: ExitStack) -> None:
        """Hook: acquire what the thread needs, each with its release on ``resources``."""

    def _close(self) -> None:
        """Hook: after the thread has ended, before ``resources`` close (clear snapshots)."""

    @abstractmethod
    def _list_pods(self) -> dict[str, JSON]:
        """Hook: the pods of this harness's kind by uid, as of now."""

    def _stop_reason(self, state: StateT, pod: JSON | None) -> str | None:
        """Hook: why the pod's processes must go (None: keep them); ``pod`` None if gone."""
        if pod is None:
            return POD_GONE
        return None if kubelet.should_run(pod) else POD_ENDED

    def _housekeep(self, pods: Mapping[str, JSON]) -> None:
        """Hook: after the stops, before the starts (reap, prune what the harness keeps)."""

    def _may_start(self, uid: str, pod: JSON) -> bool:
        """Hook: whether a pod the harness does not run yet needs its processes."""
        return kubelet.should_run(pod)

    @abstractmethod
    def _start_pod(self, uid: str, pod: JSON) -> StateT | None:
        """Hook: start what the pod needs; None to try again next tick without a word.

        Raise one of ``START_ERRORS`` (leaving nothing behind) when it cannot start yet.
        """

    def _cannot_start(self, pod: JSON, exc: Exception) -> None:
        """Hook: the pod could not start, for a reason not said before (say it in status)."""

    def _started_after_all(self, pod: JSON) -> None:
        """Hook: a pod that could not start at first now runs (undo ``_cannot_start``)."""

    def _follow(self, state: StateT, pod: JSON) -> None:
        """Hook: per tick, for each pod run (new ones included): restarts, probes, status."""

    @abstractmethod
    def _retire(self, state: StateT, *, why: str) -> None:
        """Hook: stop the pod's processes (or begin to: ``_drain`` finishes) and clean up."""

    def _container_outputs(self, state: StateT) -> Mapping[str, Path]:
        """Hook: container name -> the file its process writes (what ``kubectl logs`` shows)."""
        return {}

    def _after_tick(self) -> None:
        """Hook: publish what the tick found (the harness's snapshot for readers)."""

    def _drain(self) -> None:
        """Hook: at the thread's end, after every pod was retired: wait for what is left."""


# --- helpers the harnesses share ------------------------------------------------------


def pod_key(pod: JSON) -> tuple[str, str]:
    """(namespace, name) of a pod."""
    meta = pod["metadata"]
    return str(meta["namespace"]), str(meta["name"])


def pods_by_uid(pods: Iterable[JSON]) -> dict[str, JSON]:
    return {str(pod["metadata"]["uid"]): pod for pod in pods}


def scratch_directory(resources: ExitStack, *, prefix: str) -> Path:
    """A fresh temporary directory, removed with what is in it when ``resources`` close."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    resources.callback(shutil.rmtree, path, ignore_errors=True)
    return path


def utc_timestamp() -> str:
    """Now, as the API server writes times (``startedAt``, log headers)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def stop_processes(processes: Iterable[subprocess.Popen[bytes]], *, grace_seconds: float) -> None:
    """SIGTERM every process still running, then ``wait_or_kill`` them."""
    running = [process for process in processes if process.poll() is None]
    for process in running:
        process.terminate()
    wait_or_kill(running, grace_seconds=grace_seconds)


def wait_or_kill(processes: Iterable[subprocess.Popen[bytes]], *, grace_seconds: float) -> None:
    """Wait for the processes until one deadline ``grace_seconds`` away; SIGKILL the rest."""
    deadline = time.monotonic() + grace_seconds
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def stop_signal() -> Iterator[threading.Event]:
    """An Event SIGINT or SIGTERM sets while the block runs (the old handlers come back)."""
    stop = threading.Event()
    signals = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in signals}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def cli_logging(tag: str) -> None:
    """Log lines as ``[tag] time message`` unless the process configured logging itself."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format=f"[{tag}] %(asctime)s %(message)s")
