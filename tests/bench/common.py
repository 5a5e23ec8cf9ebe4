"""Shared pieces of the benchmarks: statistics, tables, machine facts, an API timeline,
predicates over pods, and the operator under test (own namespace, operator, engines).

Why a timeline: the cluster benchmarks time control-plane reactions of a few hundred
milliseconds, where polling with kubectl (a process start per look, ~0.2 s) would
measure kubectl. ``Timeline`` keeps one raw ``kubernetes`` watch per kind on a thread
of its own and stamps every event with ``time.perf_counter()`` the moment it arrives;
``wait_for`` replays that record and returns the arrival time of the first event after
which a predicate over the namespace's objects held. So a figure is "when a watcher
(the same view the operator has) first saw it", independent of how often we look.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import platform
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import kubernetes.client
import kubernetes.config
from kubernetes.watch.watch import iter_resp_lines

from sparkllm.api import CRD_NAME, GROUP, PLURAL, VERSION
from sparkllm.errors import ClusterAPIError
from sparkllm_dev.devcluster import DevCluster, wait_until
from sparkllm_dev.devcluster.engines import EngineHarness
from sparkllm_dev.errors import DevClusterError
from sparkllm_dev.testing import OperatorProcess

ROOT = Path(__file__).resolve().parents[2]

JSON = dict[str, Any]
State = dict[tuple[str, str], JSON]  # (kind, name) -> the object as last seen
T = TypeVar("T")
WATCH_WINDOW_SECONDS = 30


def percentile(samples: Sequence[float], fraction: float) -> float:
    """Nearest-rank, never interpolated: below 100 samples p99 is the maximum, and we say so."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def spread_cells(samples: Sequence[float]) -> list[str]:
    """n, p50, p99, max in milliseconds, or dashes when nothing was measured."""
    if not samples:
        return ["0", "-", "-", "-"]
    values = (percentile(samples, 0.5), percentile(samples, 0.99), max(samples))
    return [str(len(samples)), *(str(round(v * 1000)) for v in values)]  # no "-0"


def print_table(
    title: str, header: Sequence[str], rows: Sequence[Sequence[str]], notes: Sequence[str] = ()
) -> None:
    """A plain text table: first column left-aligned, the rest right-aligned."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        first = str(cells[0]).ljust(widths[0])
        return "  ".join(
            [first, *(str(c).rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))]
        )

    print(f"\n== {title}")
    print(line(header))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(line(row))
    for note in notes:
        print(f"   {note}")
    print(flush=True)


def machine_facts(cluster: DevCluster | None = None) -> dict[str, str]:
    """What the numbers were measured on (cores, load, Python, Kubernetes)."""
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    facts = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cores": str(os.cpu_count()),
        "load average (1/5/15 min)": load,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(terse=True),
    }
    if cluster is not None and cluster.is_running():
        version = json.loads(cluster.kubectl("version", "-o", "json").stdout)
        facts["kubernetes"] = str(version.get("serverVersion", {}).get("gitVersion", "?"))
        facts["kubelets"] = "kwok (simulated), engines: sparkllm_dev.sim processes"
    return facts


def condition(obj: JSON, kind: str) -> JSON | None:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((dict(c) for c in conditions if c.get("type") == kind), None)


def ready_current(obj: JSON | None) -> bool:
    """Ready=True for the current spec generation (status.observedGeneration)."""
    if obj is None:
        return False
    current = (obj.get("status") or {}).get("observedGeneration") == obj["metadata"]["generation"]
    return current and _pod_ready(obj)


def label_of(obj: JSON, key: str) -> str:
    return str((obj["metadata"].get("labels") or {}).get(key))


def generation_of(pod_or_template: JSON) -> str:
    return label_of(pod_or_template, "sparkllm.io/restart-generation")


def engine_pods(state: State, *, cluster: str) -> list[JSON]:
    """The rank pods of InferenceCluster ``cluster`` (not its gateway's)."""
    return [
        obj
        for (kind, _), obj in state.items()
        if kind == "pods"
        and label_of(obj, "sparkllm.io/cluster") == cluster
        and label_of(obj, "app.kubernetes.io/component") == "engine"
    ]


def _pod_ready(obj: JSON) -> bool:  # a pod's, or an InferenceCluster's
    return (condition(obj, "Ready") or {}).get("status") == "True"


def _running(pod: JSON) -> bool:
    status = pod.get("status") or {}
    states = [c.get("state") or {} for c in status.get("containerStatuses") or []]
    alive = pod["metadata"].get("deletionTimestamp") is None and status.get("phase") == "Running"
    return alive and bool(states) and all("running" in state for state in states)


def _probed(pod: JSON) -> bool:
    return any("readinessProbe" in c for c in (pod.get("spec") or {}).get("containers") or [])


class RanksServing:
    """Predicate: exactly three rank pods, all of ``generation``, Running and Ready.

    kwok marks every pod Ready the moment it runs; for rank 0 (the one with a readiness
    probe) the engine harness then writes Ready=False and, once /health answers, True.
    So a probed pod counts as Ready only after it was seen Running and not Ready: the
    Ready that follows is the probe's, not kwok's. Called in event order (stateful).
    """

    def __init__(self, cluster: str, *, generation: int, ranks: int = 3) -> None:
        self.cluster, self.generation, self.ranks = cluster, str(generation), ranks
        self.probed_unready: set[str] = set()  # uids seen Running with Ready=False

    def __call__(self, state: State) -> bool:
        pods = engine_pods(state, cluster=self.cluster)
        for pod in pods:
            if _probed(pod) and _running(pod) and not _pod_ready(pod):
                self.probed_unready.add(pod["metadata"]["uid"])
        return (
            len(pods) == self.ranks
            and all(generation_of(p) == self.generation for p in pods)
            and all(_running(p) and _pod_ready(p) for p in pods)
            and all(p["metadata"]["uid"] in self.probed_unready for p in pods if _probed(p))
        )


@dataclass(frozen=True)
class Event:
    at: float  # time.perf_counter() when the event reached us
    kind: str
    type: str  # ADDED | MODIFIED | DELETED | SYNC (a (re)list: obj = {"items": [...]})
    obj: JSON


@dataclass
class _Replay:
    """A cursor over the timeline with the namespace's state as of that cursor."""

    index: int = 0
    state: State = field(default_factory=dict)

    def step(self, event: Event) -> None:
        self.index += 1
        if event.type == "SYNC":
            for key in [k for k in self.state if k[0] == event.kind]:
                del self.state[key]
            for item in event.obj["items"]:
                self.state[(event.kind, item["metadata"]["name"])] = item
        elif event.type == "DELETED":
            self.state.pop((event.kind, event.obj["metadata"]["name"]), None)
        elif event.type in ("ADDED", "MODIFIED"):
            self.state[(event.kind, event.obj["metadata"]["name"])] = event.obj


class Timeline:
    """Watch pods, StatefulSets and InferenceClusters of one namespace; time what happens."""

    KINDS = ("pods", "statefulsets", "inferenceclusters")

    def __init__(self, cluster: DevCluster, *, namespace: str) -> None:
        config = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(cluster.paths.kubeconfig), client_configuration=config
        )
        self._client = kubernetes.client.ApiClient(config)
        core = kubernetes.client.CoreV1Api(self._client)
        apps = kubernetes.client.AppsV1Api(self._client)
        custom = kubernetes.client.CustomObjectsApi(self._client)
        self._lists: dict[str, Callable[..., Any]] = {
            "pods": lambda **kw: core.list_namespaced_pod(namespace, **kw),
            "statefulsets": lambda **kw: apps.list_namespaced_stateful_set(namespace, **kw),
            "inferenceclusters": lambda **kw: custom.list_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, **kw
            ),
        }
        self._events: list[Event] = []
        self._changed = threading.Condition()
        self._stopped = threading.Event()
        self._synced = {kind: threading.Event() for kind in self.KINDS}
        self._responses: dict[str, Any] = {}
        self._threads = [
            threading.Thread(
                target=self._run, args=(kind,), name=f"bench-watch-{kind}", daemon=True
            )
            for kind in self.KINDS
        ]

    def __enter__(self) -> Timeline:
        for thread in self._threads:
            thread.start()
        for kind, synced in self._synced.items():
            if not synced.wait(timeout=30):
                raise DevClusterError(f"bench timeline: no {kind} list in 30 s")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stopped.set()
        for response in list(self._responses.values()):
            with contextlib.suppress(Exception):  # best effort: the window ends it anyway
                response.shutdown()  # unblocks the thread's read at once
        for thread in self._threads:
            thread.join(timeout=WATCH_WINDOW_SECONDS + 5)
        self._client.close()  # type: ignore[no-untyped-call]

    @staticmethod
    def now() -> float:
        return time.perf_counter()

    def state(self) -> State:
        """The namespace's objects as of the latest event."""
        replay = _Replay()
        for event in self._snapshot():
            replay.step(event)
        return replay.state

    def wait_for(
        self,
        predicate: Callable[[State], T | None],
        *,
        since: float,
        timeout: float,
        what: str,
    ) -> tuple[float, T]:
        """(arrival time of the first event at or after ``since`` making it true, its value).

        If the predicate already holds at ``since`` the answer is ``since``.
        """
        deadline = time.perf_counter() + timeout
        replay = _Replay()
        reached = False  # the replay has passed ``since``: every step is now a candidate
        while True:
            for event in self._snapshot()[replay.index :]:
                if not reached and event.at >= since:
                    reached = True
                    if value := predicate(replay.state):
                        return since, value
                replay.step(event)
                if reached and (value := predicate(replay.state)):
                    return event.at, value
            if not reached and time.perf_counter() >= since:
                reached = True  # nothing arrived after ``since`` yet: check the state then
                if value := predicate(replay.state):
                    return since, value
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise DevClusterError(f"timed out after {timeout:.0f} s waiting for {what}")
            with self._changed:
                if len(self._events) == replay.index:
                    self._changed.wait(timeout=min(remaining, 1.0))

    def _snapshot(self) -> list[Event]:
        with self._changed:
            return list(self._events)

    def _record(self, kind: str, type_: str, obj: JSON) -> None:
        with self._changed:  # stamped under the lock: arrival times never go backwards
            self._events.append(Event(at=time.perf_counter(), kind=kind, type=type_, obj=obj))
            self._changed.notify_all()

    def _run(self, kind: str) -> None:
        while not self._stopped.is_set():
            try:
                self._watch(kind, self._list(kind))
            except Exception:  # expired (410), a dropped connection, the cut at exit: relist
                self._stopped.wait(0.5)

    def _list(self, kind: str) -> str:
        response = self._lists[kind](_preload_content=False, _request_timeout=30)
        listing = json.loads(response.data)
        self._record(kind, "SYNC", {"items": listing.get("items") or []})
        self._synced[kind].set()
        return str(listing["metadata"]["resourceVersion"])

    def _watch(self, kind: str, version: str) -> None:
        """Watch window after window from ``version`` until stopped."""
        while not self._stopped.is_set():
            response = self._lists[kind](
                watch=True,
                resource_version=version,
                allow_watch_bookmarks=True,
                timeout_seconds=WATCH_WINDOW_SECONDS,
                _preload_content=False,
                _request_timeout=(10, WATCH_WINDOW_SECONDS + 10),
            )
            self._responses[kind] = response
            try:
                for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
                    event = json.loads(line)
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        raise ClusterAPIError(f"watch {kind}: {obj.get('message')}")
                    version = str(obj.get("metadata", {}).get("resourceVersion") or version)
                    if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                        self._record(kind, str(event["type"]), obj)
            finally:
                self._responses.pop(kind, None)


@dataclass(frozen=True)
class Stack:
    namespace: str  # ours alone, deleted at the end
    pid: int  # the operator's
    logs: Path  # ~/.cache/sparkllm/bench/<name>: this run's operator, harness, engine logs


@contextlib.contextmanager
def operator_stack(cluster: DevCluster, *, name: str) -> Iterator[Stack]:
    """A namespace of our own, the real operator (a child process) and an engine harness.

    Yields once kopf's node watch has delivered (its watches run). At the end the
    namespace's InferenceClusters are deleted while the operator still runs, then the
    harness and the operator stop and the namespace is deleted (without waiting).
    """
    logs = cluster.paths.state_dir.parent / "bench" / name
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    namespace = f"bench-{name}-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    cluster.wait_established(CRD_NAME)
    cluster.kubectl("create", "namespace", namespace)
    harness_log = logging.getLogger("sparkllm_dev.devcluster")
    handler = logging.FileHandler(logs / "harness.log")
    harness_log.addHandler(handler)
    harness_log.setLevel(logging.INFO)
    harness_log.propagate = False  # its warnings belong in the log, not in the tables
    operator = OperatorProcess(cluster, [namespace], str(logs / "operator.log"))
    try:
        wait_until(  # pods need the namespace's default ServiceAccount
            lambda: cluster.kubectl_json("get", "sa", "default", "-n", namespace),
            timeout=60,
            what=f"default ServiceAccount in {namespace}",
        )
        operator.start()
        with EngineHarness(cluster, namespace=namespace, log_dir=logs / "engines"):
            wait_until(
                lambda: "Handler 'on_node' succeeded" in operator.log(),
                timeout=60,
                what="operator start-up",
            )
            assert operator.proc is not None
            yield Stack(namespace=namespace, pid=operator.proc.pid, logs=logs)
            cluster.kubectl("delete", "icl", "--all", "-n", namespace, "--wait=false", check=False)
            wait_until(
                lambda: not cluster.kubectl_json("get", "icl", "-n", namespace)["items"],
                timeout=60,
                what="the benchmark's InferenceClusters deleted",
            )
    finally:
        operator.stop()
        harness_log.removeHandler(handler)
        handler.close()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
