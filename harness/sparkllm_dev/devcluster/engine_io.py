"""The engine harness's I/O: API calls, the pod cache, probes, processes, a lock.

Why apart from ``engines.py``: these are the parts that block on a socket — the API
server (through the ``kubernetes`` client, errors translated to ``ClusterAPIError`` here
and nowhere else) and the simulators' HTTP ports — each on a thread of its own, so the
supervisor in ``engines.py`` only ever reads their latest results and never waits.

- ``KubeClient``: list/watch engine pods, read a Secret or ConfigMap key or a whole
  ConfigMap (a volume), patch a pod's status (strategic merge, subresource ``status``),
  create a custom object (kwok's ``Logs`` for a pod: ``pod_logs.py``) —
  raw JSON in and out, since the pure ``kubelet`` module works on plain dicts.
- ``PodCache``: list, then watch from the list's resourceVersion; a watch that ends is
  resumed, an expired one (410) relisted, a failing API retried every second — and so
  is anything unforeseen, logged with its traceback, as client-go's reflector does.
- ``Prober``: one thread per engine doing what the kubelet's readiness worker does.
- ``spawn_process``: a simulator or an init container in its own session, output
  appended to its log; on Linux it first sets PR_SET_PDEATHSIG, so it dies with the
  harness thread that started it even when the harness itself is killed.
- ``HarnessLock``: a ``flock`` that admits one all-namespaces harness XOR any number of
  namespaced ones, so two harnesses never run two simulators for one pod.
"""

from __future__ import annotations

import base64
import binascii
import fcntl
import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import kubernetes.client
import kubernetes.config
import kubernetes.watch
import urllib3.exceptions
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from sparkllm.errors import ClusterAPIError
from sparkllm_dev.devcluster.kubelet import (
    ENGINE_COMPONENT_SELECTOR,
    JSON,
    KeyRef,
    ReadinessProbe,
    probe_succeeded,
)
from sparkllm_dev.errors import DevClusterError

logger = logging.getLogger(__name__)

WATCH_WINDOW_SECONDS = 10  # server-side watch timeout: bounds how long stop() can wait
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
MERGE_PATCH = "application/merge-patch+json"
USER_AGENT = "sparkllm-engine-harness"
_TRANSPORT_ERRORS = (urllib3.exceptions.HTTPError, OSError)


class WatchExpiredError(ClusterAPIError):
    """The watch's resourceVersion is too old (HTTP 410): list again."""


class KubeClient:
    """The few API calls the harness makes, on the dev cluster's kubeconfig."""

    def __init__(self, kubeconfig: Path) -> None:
        config = kubernetes.client.Configuration()
        try:
            kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(kubeconfig), client_configuration=config
            )
        except (ConfigException, OSError) as exc:
            raise DevClusterError(f"cannot load the dev cluster kubeconfig: {exc}") from exc
        self._client = kubernetes.client.ApiClient(config)
        self._client.user_agent = USER_AGENT  # tells its writes apart in the audit log
        self.core = kubernetes.client.CoreV1Api(self._client)

    def close(self) -> None:
        self._client.close()  # type: ignore[no-untyped-call]

    def list_pods_by_selector(self, selector: str, *, namespace: str | None) -> list[JSON]:
        """The pods matching ``selector`` (all namespaces when ``namespace`` is None)."""
        listing = self._json(
            self._list_function(namespace), *_scope(namespace), label_selector=selector
        )
        return list(listing.get("items") or [])

    def list_pods(self, *, namespace: str | None) -> tuple[list[JSON], str]:
        """(engine pods, the list's resourceVersion)."""
        listing = self._json(
            self._list_function(namespace),
            *_scope(namespace),
            label_selector=ENGINE_COMPONENT_SELECTOR,
        )
        return list(listing.get("items") or []), str(listing["metadata"]["resourceVersion"])

    def watch_pods(
        self, *, namespace: str | None, resource_version: str, watch: kubernetes.watch.Watch
    ) -> Iterator[JSON]:
        """Watch events (``type``, ``object`` as raw JSON) from ``resource_version`` for a window.

        The events are deserialised, though only ``raw_object`` is used: with
        ``deserialize=False`` the client (kubernetes 37) looks for ``raw_object`` in an
        in-stream ERROR event it never added, so the apiserver's 410 "too old resource
        version" — which comes as an event once its watch cache has dropped the version —
        raised a KeyError and ended the watch thread instead of a relist.
        """
        try:
            events = watch.stream(  # type: ignore[no-untyped-call]
                self._list_function(namespace),
                *_scope(namespace),
                label_selector=ENGINE_COMPONENT_SELECTOR,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=WATCH_WINDOW_SECONDS,
                _request_timeout=(10, WATCH_WINDOW_SECONDS + 20),
            )
            for event in events:
                yield {"type": event["type"], "object": event["raw_object"]}
        except ApiException as exc:
            if exc.status == 410:
                raise WatchExpiredError("watch expired", status=410) from exc
            raise ClusterAPIError(f"watching pods: {exc.reason}", status=exc.status) from exc
        except _TRANSPORT_ERRORS as exc:
            raise ClusterAPIError(f"watching pods: {exc}") from exc

    def read_key(self, ref: KeyRef, *, namespace: str) -> str | None:
        """A Secret's (base64-decoded) or ConfigMap's value; None when key or object is missing."""
        read = (
            self.core.read_namespaced_secret
            if ref.kind == "Secret"
            else self.core.read_namespaced_config_map
        )
        try:
            obj = self._json(read, ref.name, namespace)
        except ClusterAPIError as exc:
            if exc.status == 404:
                return None
            raise
        data = obj.get("data") or {}
        if ref.key not in data:
            return None
        if ref.kind == "ConfigMap":
            return str(data[ref.key])
        try:
            return base64.b64decode(data[ref.key], validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise ClusterAPIError(f"secret {ref.name} key {ref.key}: not UTF-8 text") from exc

    def read_config_map(self, name: str, *, namespace: str) -> JSON | None:
        """The ConfigMap as JSON (``data``, ``binaryData``); None when it does not exist."""
        try:
            return self._json(self.core.read_namespaced_config_map, name, namespace)
        except ClusterAPIError as exc:
            if exc.status == 404:
                return None
            raise

    def patch_pod_status(self, namespace: str, name: str, *, body: JSON) -> None:
        """Strategic-merge patch of the pod's status subresource."""
        self._json(
            self.core.patch_namespaced_pod_status,
            name,
            namespace,
            body,
            _content_type=STRATEGIC_MERGE,
        )

    def create_or_replace_custom(
        self, group: str, version: str, plural: str, *, body: JSON
    ) -> None:
        """Create a namespaced custom object; one of that name already there (a pod of the
        same name before) gets this one's metadata owners and spec (merge patch)."""
        custom = kubernetes.client.CustomObjectsApi(self._client)
        meta = body["metadata"]
        where = (group, version, meta["namespace"], plural)
        try:
            self._json(custom.create_namespaced_custom_object, *where, body)
        except ClusterAPIError as exc:
            if exc.status != 409:
                raise
            owners = meta.get("ownerReferences")
            patch = {"metadata": {"ownerReferences": owners}, "spec": body.get("spec")}
            self._json(
                custom.patch_namespaced_custom_object, *where, meta["name"], patch,
                _content_type=MERGE_PATCH,
            )  # fmt: skip

    def _list_function(self, namespace: str | None) -> Callable[..., Any]:
        core = self.core
        return core.list_pod_for_all_namespaces if namespace is None else core.list_namespaced_pod

    @staticmethod
    def _json(function: Callable[..., Any], *args: Any, **kwargs: Any) -> JSON:
        try:
            response = function(*args, _preload_content=False, _request_timeout=30, **kwargs)
            parsed: JSON = json.loads(response.data)
        except ApiException as exc:
            raise ClusterAPIError(f"{exc.status} {exc.reason}", status=exc.status) from exc
        except (*_TRANSPORT_ERRORS, ValueError) as exc:
            raise ClusterAPIError(f"API request failed: {exc}") from exc
        return parsed


def _new_watch() -> kubernetes.watch.Watch:
    return kubernetes.watch.Watch()  # type: ignore[no-untyped-call]


def _scope(namespace: str | None) -> tuple[str, ...]:
    return () if namespace is None else (namespace,)


class PodCache:
    """Engine pods by uid, kept current by list + watch on a thread of its own."""

    def __init__(
        self, kube: KubeClient, *, namespace: str | None, on_change: Callable[[], None]
    ) -> None:
        self.synced = threading.Event()
        self._kube = kube
        self._namespace = namespace
        self._on_change = on_change
        self._pods: dict[str, JSON] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._watch = _new_watch()
        self._thread = threading.Thread(target=self._run, name="engine-pod-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._watch.stop()  # type: ignore[no-untyped-call]
        self._thread.join(timeout=WATCH_WINDOW_SECONDS + 5)

    def snapshot(self) -> dict[str, JSON]:
        with self._lock:
            return dict(self._pods)

    def _run(self) -> None:
        last_error = ""
        while not self._stopped.is_set():
            try:
                self._list_and_watch()
            except WatchExpiredError:
                continue
            except ClusterAPIError as exc:
                if self._stopped.is_set():  # stop() cut the watch's connection
                    return
                if str(exc) != last_error:
                    logger.warning("engine pod watch failed (retrying every second): %s", exc)
                last_error = str(exc)
                self._stopped.wait(1.0)
            except Exception:  # a bug must not leave the harness blind: say so, relist
                if self._stopped.is_set():
                    return
                logger.exception("engine pod watch broke (relisting in a second)")
                self._stopped.wait(1.0)

    def _list_and_watch(self) -> None:
        pods, version = self._kube.list_pods(namespace=self._namespace)
        with self._lock:
            self._pods = {str(p["metadata"]["uid"]): p for p in pods}
        self.synced.set()
        self._on_change()
        while not self._stopped.is_set():
            self._watch = _new_watch()
            if self._stopped.is_set():
                return
            events = self._kube.watch_pods(
                namespace=self._namespace, resource_version=version, watch=self._watch
            )
            for event in events:
                pod = event.get("object") or {}
                version = str((pod.get("metadata") or {}).get("resourceVersion") or version)
                if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                    self._apply(str(event["type"]), pod)
                if self._stopped.is_set():
                    return

    def _apply(self, kind: str, pod: JSON) -> None:
        uid = str(pod["metadata"]["uid"])
        with self._lock:
            if kind == "DELETED":
                self._pods.pop(uid, None)
            else:
                self._pods[uid] = pod
        self._on_change()


class Prober:
    """One engine's readiness prober: ``ready`` follows the probe with its thresholds."""

    def __init__(
        self, probe: ReadinessProbe, *, interval: float, on_change: Callable[[], None]
    ) -> None:
        self.ready = False
        self._probe = probe
        self._interval = interval
        self._on_change = on_change
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engine-prober", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end; it does after its current probe (bounded by the timeout)."""
        self._stopped.set()

    def _run(self) -> None:
        successes = failures = 0
        headers = dict(self._probe.headers)
        with httpx.Client(trust_env=False, timeout=self._probe.timeout_seconds) as client:
            while not self._stopped.is_set():
                try:
                    status = client.get(self._probe.url, headers=headers).status_code
                    succeeded = probe_succeeded(status)
                except httpx.HTTPError:
                    succeeded = False
                successes, failures = (successes + 1, 0) if succeeded else (0, failures + 1)
                ready = self.ready
                if successes >= self._probe.success_threshold:
                    ready = True
                elif failures >= self._probe.failure_threshold:
                    ready = False
                if ready != self.ready and not self._stopped.is_set():
                    self.ready = ready
                    self._on_change()
                self._stopped.wait(self._interval)


# Exec'd in front of the simulator: die with the harness thread that spawned us (Linux).
_ORPHAN_GUARD = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG\n"
    "if os.getppid() != int(sys.argv[1]): sys.exit(143)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


def spawn_process(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    log_path: Path,
    header: str,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start one container's process in its own session; stdout and stderr go to
    ``log_path`` (appended, after ``header``); in ``cwd`` when given (a container's
    working directory), else ours."""
    command = list(argv)
    if sys.platform == "linux":
        command = [sys.executable, "-c", _ORPHAN_GUARD, str(os.getpid()), *command]
    try:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log:
            log.write(header.encode() + b"\n")
            log.flush()
            return subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env),
                cwd=cwd,
                start_new_session=True,
            )
    except OSError as exc:
        raise DevClusterError(f"cannot start {argv[:3]} ({log_path}): {exc}") from exc


spawn_simulator = spawn_process  # the name gateway_pods.py uses


class HarnessLock:
    """One all-namespaces harness XOR any number of namespaced ones (per namespace: one)."""

    def __init__(self, state_dir: Path, *, namespace: str | None) -> None:
        self._state_dir = state_dir
        self._namespace = namespace
        self._fds: list[int] = []
        self._namespace_lock: Path | None = None

    def acquire(self) -> None:
        locks = self._state_dir / "engine-locks"
        locks.mkdir(parents=True, exist_ok=True)
        everywhere = fcntl.LOCK_EX if self._namespace is None else fcntl.LOCK_SH
        wanted = [(locks / "all-namespaces.lock", everywhere)]
        if self._namespace is not None:
            wanted.append((locks / f"namespace-{self._namespace}.lock", fcntl.LOCK_EX))
        for path, mode in wanted:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                if os.fstat(fd).st_ino != os.stat(path).st_ino:  # unlinked by a releaser
                    raise BlockingIOError
            except (BlockingIOError, FileNotFoundError) as exc:
                os.close(fd)
                self.release()
                if mode == fcntl.LOCK_SH:
                    holder = "an engine harness for all namespaces"
                elif self._namespace is None:
                    holder = "another engine harness"
                else:
                    holder = f"another engine harness for namespace {self._namespace}"
                raise DevClusterError(f"{holder} is running (lock {path}); stop it first") from exc
            self._fds.append(fd)
        self._namespace_lock = wanted[1][0] if len(wanted) > 1 else None

    def release(self) -> None:
        if self._namespace_lock is not None:  # one file per namespace: do not pile them up
            self._namespace_lock.unlink(missing_ok=True)  # while still holding its lock
            self._namespace_lock = None
        for fd in self._fds:
            os.close(fd)  # closing the descriptor drops its flock
        self._fds.clear()
