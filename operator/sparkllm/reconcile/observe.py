"""The observe step of a pass: everything the decision needs, read once, frozen.

Why one read step: ``decide`` is pure, so every fact it uses must be in its input — the
InferenceCluster, nodes, owned objects and rank pods, the engine-key Secret, whether the
Jobs' key Secret exists, benchmark Jobs and the users' key names, the running-request
counts of replicas being removed, rank 0's ``/get_server_info`` replies, and the clock's
``now``. All cluster reads go through ``KubeAPI``; the two engine reads (``/metrics``,
``/get_server_info``) go to the engines (``engines.py``), the API reads through
``reads.py``. Nothing here writes, and nothing here judges: what a fact means for the
plan is decide's. A unit test builds an ``Observation`` (``decide/observation.py``) by
hand instead.

The other InferenceClusters are read too (across namespaces when RBAC allows, else this
one's), because nodes are shared: placement must not give a replica a group another
object holds. A ``SpecError`` met by any read (a spec that validates but cannot be
rendered or probed) makes the observation an invalid-spec one, like a failed validation.

Which optional APIs ``spec.exposure`` needs (HTTPRoute, InferencePool) the cluster does
not serve is read here too (API discovery), so decide can leave those objects out and
say why in status instead of failing the pass at their apply; so is whether it serves
PodMonitor, while ``spec.monitoring`` wants them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from sparkllm.api import ENGINE_HTTP_PORT, InferenceCluster, Reason, validate_inference_cluster
from sparkllm.api.admin_policy import AdminPolicy, PolicyDeniedError
from sparkllm.errors import ClusterAPIError, SpecError
from sparkllm.keys import LABEL_GENERATION, LABEL_REPLICA
from sparkllm.kube.client import KubeAPI
from sparkllm.kube.kinds import JSON, OPTIONAL_API_GROUPS, lookup_kind
from sparkllm.reconcile.decide import owned
from sparkllm.reconcile.decide.drain import draining_replicas, rank0_address
from sparkllm.reconcile.decide.observation import ApiKind, Key, Observation, ServerInfo
from sparkllm.reconcile.decide.replica_state import pod_ready, pods_by_rank
from sparkllm.reconcile.decide.replicas import Observed, label
from sparkllm.reconcile.decide.start_stages import (
    ENGINE_CONTAINER,
    LOG_LIMIT_BYTES,
    LOG_TAIL_LINES,
    pods_to_read,
)
from sparkllm.reconcile.engines import ConfigProbe, Engines
from sparkllm.reconcile.reads import (
    read_acceptance,
    read_bench_key,
    read_benchmark,
    read_engine_key,
    read_owned,
    read_secret_lanes,
    read_staging,
)
from sparkllm.render.exposure import render_exposure


async def observe(
    api: KubeAPI,
    key: Key,
    *,
    engines: Engines,
    clock: Callable[[], datetime],
    policy: AdminPolicy | None = None,
) -> Observation:
    """Read everything a pass decides from; reads only. A spec that validates but fails a
    later read (SpecError) is observed as invalid, with the error's message; one outside
    the administrator's ``policy`` is observed as denied, before any other read."""
    try:
        observation = await _read(api, key, engines=engines, clock=clock, policy=policy)
    except SpecError as exc:
        obj = await api.get(owned.IC, key[1], key[0])
        return Observation(key=key, obj=obj, now=clock(), spec_error=str(exc))
    if observation.ic is None:
        return observation
    return replace(observation, others=await read_other_clusters(api, key))


async def read_other_clusters(api: KubeAPI, key: Key) -> tuple[JSON, ...]:
    """Every other InferenceCluster, of the whole cluster (the chart grants that list
    also with watchNamespaces); of this namespace only under hand-made RBAC without it."""
    try:
        items = await api.list(owned.IC, None)
    except ClusterAPIError as exc:
        if exc.status != 403:
            raise
        items = await api.list(owned.IC, key[0])
    return tuple(
        item
        for item in items
        if (item["metadata"].get("namespace") or "default", item["metadata"]["name"]) != key
    )


async def _read(
    api: KubeAPI,
    key: Key,
    *,
    engines: Engines,
    clock: Callable[[], datetime],
    policy: AdminPolicy | None,
) -> Observation:
    namespace, name = key
    obj = await api.get(owned.IC, name, namespace)
    if obj is None or obj["metadata"].get("deletionTimestamp"):
        return Observation(key=key, obj=None, now=clock())
    try:
        ic = validate_inference_cluster(obj, policy=policy)
    except SpecError as exc:
        reason = Reason.POLICY_DENIED if isinstance(exc, PolicyDeniedError) else None
        return Observation(
            key=key,
            obj=obj,
            now=clock(),
            spec_error=str(exc),
            spec_error_reason=reason or Reason.INVALID_SPEC,
        )
    lane = await read_secret_lanes(api, ic)  # before any Secret's value is read
    if lane is not None:
        return Observation(key=key, obj=obj, now=clock(), spec_error=lane)
    observed = await read_owned(api, ic)
    engine_key = await read_engine_key(api, ic)
    bench_key = await read_bench_key(api, ic)
    benchmark = await read_benchmark(api, ic, obj)
    acceptance = await read_acceptance(api, ic, obj)
    running = {
        index: await engines.running_requests.count(address)
        for index in draining_replicas(observed, ic.spec.replicas)
        if (address := rank0_address(observed, index)) is not None
    }
    server_info = await _server_info(
        ic, observed, probe=engines.config_probe, api_key=engine_key.value
    )
    absent = await absent_apis(api, ic)
    start_logs = await read_start_logs(api, observed)
    staging = await read_staging(api, ic, obj)
    # spec.monitoring's PodMonitors: asked only while wanted (when off, read_owned's list
    # still finds any left to prune).
    monitors = ic.spec.monitoring.service_monitor and await api.kind_served(owned.POD_MONITOR)
    return Observation(
        key=key,
        obj=obj,
        now=clock(),
        ic=ic,
        observed=observed,
        engine_key=engine_key,
        bench_key=bench_key,
        benchmark=benchmark,
        acceptance=acceptance,
        running_requests=running,
        server_info=server_info,
        absent_apis=absent,
        pod_monitors_served=monitors,
        start_logs=start_logs,
        staging=staging,
    )


async def absent_apis(api: KubeAPI, ic: InferenceCluster) -> frozenset[ApiKind]:
    """The optional kinds ``spec.exposure`` asks for whose API the cluster does not serve."""
    wanted = {
        (o["apiVersion"], o["kind"])
        for o in render_exposure(ic)
        if str(o["apiVersion"]).startswith(OPTIONAL_API_GROUPS)
    }
    return frozenset([pair for pair in wanted if not await api.kind_served(lookup_kind(*pair))])


async def read_start_logs(api: KubeAPI, observed: Observed) -> dict[str, str]:
    """The recent engine log of each rank pod of a replica not serving yet, by pod uid:
    its start stage (decide/start_stages.py). Through the API server, not a probe the
    engine pod exposes: SGLang serves nothing during a start (rank 0 opens its port at
    the end, ranks > 0 only a dummy health server), so a probe would mean a sidecar in
    every rank pod; a log read is one bounded GET per starting rank per pass (the last
    400 lines, 128 KiB at most), none once the replica serves. A log that cannot be read
    (the node's kubelet unreachable) leaves the stage to the pod's state."""
    logs: dict[str, str] = {}
    for pod in pods_to_read(observed):
        meta = pod.get("metadata") or {}
        try:
            text = await api.pod_log(
                str(meta.get("name")), str(meta.get("namespace") or "default"),
                container=ENGINE_CONTAINER, tail_lines=LOG_TAIL_LINES,
                limit_bytes=LOG_LIMIT_BYTES,
            )  # fmt: skip
        except ClusterAPIError:
            continue
        if text is not None:
            logs[str(meta.get("uid") or "")] = text
    return logs


def ready_rank0_pods(observed: Observed) -> dict[int, JSON]:
    """Per replica, its rank-0 pod (a live one before one being deleted), when Ready."""
    replicas = {
        int(r) for p in observed.pods if (r := label(p, LABEL_REPLICA)) is not None and r.isdigit()
    }
    ready: dict[int, JSON] = {}
    for index in replicas:
        pod = pods_by_rank(observed.by_replica(observed.pods, index)).get(0)
        if pod is not None and pod_ready(pod):
            ready[index] = pod
    return ready


async def _server_info(
    ic: InferenceCluster,
    observed: Observed,
    *,
    probe: ConfigProbe,
    api_key: str | None,
) -> dict[int, ServerInfo]:
    """ConfigApplied's evidence: each Ready rank 0's server_info, read once per restart
    generation (the comparison with the spec is decide's)."""
    namespace = ic.metadata.namespace or "default"
    results: dict[int, ServerInfo] = {}
    for index, pod in sorted(ready_rank0_pods(observed).items()):
        generation_text = label(pod, LABEL_GENERATION) or ""
        node = observed.nodes.get((pod.get("spec") or {}).get("nodeName") or "")
        address = (node.internal_ip if node else None) or (pod.get("status") or {}).get("hostIP")
        if not generation_text.isdigit() or not address:
            continue
        reply = await probe.read(
            cache_key=(namespace, ic.metadata.name, str(index), generation_text),
            endpoint=f"http://{address}:{ENGINE_HTTP_PORT}",
            api_key=api_key,
        )
        results[index] = ServerInfo(generation=int(generation_text), reply=reply, address=address)
    return results
