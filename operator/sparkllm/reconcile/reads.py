"""The observe step's reads of the API server, one function per fact ``decide`` needs.

Why here and not beside the decisions they feed: ``decide`` is a package that imports
nothing doing I/O, so every read lives on this side of the seam and hands decide plain
facts — the owned objects, nodes and rank pods (``read_owned``), whether the Secrets the
spec names are marked for their use (``read_secret_lanes``), the engine-key Secret
(``read_engine_key``), whether the Jobs' key Secret exists (``read_bench_key``), and a
run on demand's Jobs, their pods and the users' key names (``read_on_demand``; only what
the decision can use: nothing without a request or a run in flight, the key names and
rivals' Jobs only when a Job may be created). Reads only; ``observation.observe`` calls
them in one pass.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from sparkllm.api import InferenceCluster
from sparkllm.api.secret_refs import lane_problem, laned_references
from sparkllm.errors import ClusterAPIError, SpecError
from sparkllm.kube.client import KubeAPI
from sparkllm.kube.kinds import JSON
from sparkllm.reconcile.decide.acceptance import ACCEPTANCE_STEP
from sparkllm.reconcile.decide.benchmark import BENCHMARK_STEP, BenchmarkSeen, StepKind
from sparkllm.reconcile.decide.benchmark_plan import in_flight
from sparkllm.reconcile.decide.job_result import JobResult, job_result
from sparkllm.reconcile.decide.owned import JOB, MAY_BE_FORBIDDEN, NODE, OWNED, POD, SECRET
from sparkllm.reconcile.decide.replicas import Observed
from sparkllm.reconcile.decide.run_exclusion import rival_active
from sparkllm.reconcile.decide.secrets import EngineKeySeen, engine_key_ref
from sparkllm.reconcile.decide.staging_seen import (
    LOG_LIMIT_BYTES,
    LOG_TAIL_LINES,
    StagingJob,
    latest_pod,
    staging_job,
)
from sparkllm.render.model_staging import STAGING_CONTAINER, staging_job_name, staging_selector
from sparkllm.render.names import bench_key_secret_name, cluster_selector
from sparkllm.render.placement import node_facts


async def read_owned(api: KubeAPI, ic: InferenceCluster) -> Observed:
    """Nodes, the cluster's owned objects by kind, and its pods, read fresh; a kind the
    operator may be refused (``owned.MAY_BE_FORBIDDEN``) and is, is read as none and named
    in ``forbidden``."""
    namespace = ic.metadata.namespace or "default"
    selector = cluster_selector(ic.metadata.name)
    nodes = {f.name: f for f in map(node_facts, await api.list(NODE))}
    owned: dict[str, list[JSON]] = {}
    forbidden: set[str] = set()
    for kind in OWNED:
        try:
            items = await api.list(kind, namespace, selector=selector)
        except ClusterAPIError as exc:
            if exc.status != 403 or kind not in MAY_BE_FORBIDDEN:
                raise
            items = []  # the operator may not list them: none it could manage
            forbidden.add(kind.kind)
        owned[kind.kind] = [_with_kind(o, kind.kind) for o in items]
    pods = await api.list(POD, namespace, selector=selector)
    return Observed(nodes=nodes, pods=pods, owned=owned, forbidden=frozenset(forbidden))


def _with_kind(obj: JSON, kind: str) -> JSON:
    """List items come without apiVersion/kind; add the kind for lookups."""
    return {**obj, "kind": kind}


async def read_secret_lanes(api: KubeAPI, ic: InferenceCluster) -> str | None:
    """Why a Secret the spec names may not be used as it is named (its labels only:
    ``api.secret_refs``), or None; read before any Secret's value is."""
    namespace = ic.metadata.namespace or "default"
    for ref in laned_references(ic.spec):
        live = await api.get(SECRET, ref.name, namespace)
        labels = None if live is None else (live["metadata"].get("labels") or {})
        problem = lane_problem(ref, labels)
        if problem is not None:
            return problem
    return None


async def read_engine_key(api: KubeAPI, ic: InferenceCluster) -> EngineKeySeen:
    """The engine key's Secret: whether it exists, and the key's value."""
    ref = engine_key_ref(ic)
    live = await api.get(SECRET, ref.secret, ic.metadata.namespace or "default")
    if live is None:
        return EngineKeySeen(ref=ref)
    encoded = (live.get("data") or {}).get(ref.key)
    return EngineKeySeen(
        ref=ref, exists=True, value=base64.b64decode(encoded).decode() if encoded else None
    )


async def read_bench_key(api: KubeAPI, ic: InferenceCluster) -> bool:
    """Whether the operator's Jobs' key Secret exists (its value is never read here)."""
    name = bench_key_secret_name(ic.metadata.name)
    return await api.get(SECRET, name, ic.metadata.namespace or "default") is not None


async def read_on_demand(
    api: KubeAPI, ic: InferenceCluster, obj: Mapping[str, Any], *, kind: StepKind
) -> BenchmarkSeen:
    """What a run on demand's decision needs; without a request and nothing in flight,
    nothing."""
    try:
        request = kind.request(ic, obj)
    except SpecError:
        return BenchmarkSeen()
    if request is None and not in_flight((obj.get("status") or {}).get(kind.status_field)):
        return BenchmarkSeen()
    jobs = await _job_results(api, ic, selector=kind.selector(ic.metadata.name))
    if request is None or request.job in jobs:
        return BenchmarkSeen(jobs=jobs)
    name = ic.spec.admission.api_keys_secret_ref.name
    secret = await api.get(SECRET, name, ic.metadata.namespace or "default")
    keys = None if secret is None else frozenset((secret.get("data") or {}).keys())
    rivals = {
        rival.noun: await _job_results(api, ic, selector=rival.selector(ic.metadata.name))
        for rival in kind.rivals
        if rival_active(rival, obj)
    }
    return BenchmarkSeen(jobs=jobs, user_keys=keys, rival_jobs=rivals)


async def read_benchmark(
    api: KubeAPI, ic: InferenceCluster, obj: Mapping[str, Any]
) -> BenchmarkSeen:
    """The benchmark's reads."""
    return await read_on_demand(api, ic, obj, kind=BENCHMARK_STEP)


async def read_acceptance(
    api: KubeAPI, ic: InferenceCluster, obj: Mapping[str, Any]
) -> BenchmarkSeen:
    """The acceptance checklist's reads."""
    return await read_on_demand(api, ic, obj, kind=ACCEPTANCE_STEP)


async def read_staging(
    api: KubeAPI, ic: InferenceCluster, obj: Mapping[str, Any]
) -> tuple[StagingJob, ...]:
    """The model staging Jobs (spec.model.source only), each with its pod's latest
    progress record from the tail of its log (decide/staging_seen.py says why the log).
    A stage the last status already shows Ready, with its bytes, is not read again.
    Without a source nothing is read, unless the last status shows one was staged (its
    Jobs are then deleted)."""
    if ic.spec.model.source is None and not (obj.get("status") or {}).get("modelStaging"):
        return ()
    namespace = ic.metadata.namespace or "default"
    selector = staging_selector(ic.metadata.name)
    jobs = await api.list(JOB, namespace, selector=selector)
    if not jobs:
        return ()
    pods = await api.list(POD, namespace, selector=selector)
    by_owner: dict[str, list[JSON]] = {}
    for pod in pods:
        for owner in pod["metadata"].get("ownerReferences") or []:
            by_owner.setdefault(str(owner.get("uid")), []).append(pod)
    staged = _staged_jobs(obj)
    seen: list[StagingJob] = []
    for job in jobs:
        own = by_owner.get(str(job["metadata"].get("uid")), [])
        newest = latest_pod(own)
        log = None
        if newest is not None and job["metadata"]["name"] not in staged:
            log = await _staging_log(api, newest)
        fact = staging_job(job, own, log=log)
        if fact is not None:
            seen.append(fact)
    return tuple(seen)


def _staged_jobs(obj: Mapping[str, Any]) -> frozenset[str]:
    """The stage Jobs the last status shows Ready with their bytes, and the clean Jobs of
    groups whose bytes freed it shows: nothing left to read."""
    staging = (obj.get("status") or {}).get("modelStaging") or {}
    name = str(obj.get("metadata", {}).get("name", ""))
    digest = str(staging.get("digest", ""))
    staged = {
        str(n.get("job"))
        for g in staging.get("groups") or []
        for n in g.get("nodes") or []
        if n.get("stage") == "Ready" and n.get("bytesTotal") is not None
    }
    cleaned = {
        staging_job_name(
            name,
            replica=int(g.get("replica", 0)),
            rank=int(n.get("rank", 0)),
            role="clean",
            digest=digest,
            node=str(n.get("node")),
        )
        for g in staging.get("groups") or []
        if g.get("bytesFreed") is not None
        for n in g.get("nodes") or []
    }
    return frozenset(staged | cleaned)


async def _staging_log(api: KubeAPI, pod: Mapping[str, Any]) -> str | None:
    """The tail of a staging pod's log; None when it cannot be read (the termination
    message stands in)."""
    meta = pod["metadata"]
    try:
        return await api.pod_log(
            str(meta["name"]), str(meta.get("namespace") or "default"),
            container=STAGING_CONTAINER, tail_lines=LOG_TAIL_LINES, limit_bytes=LOG_LIMIT_BYTES,
        )  # fmt: skip
    except ClusterAPIError:
        return None


async def _job_results(
    api: KubeAPI, ic: InferenceCluster, *, selector: str
) -> dict[str, JobResult]:
    namespace = ic.metadata.namespace or "default"
    jobs = await api.list(JOB, namespace, selector=selector)
    if not jobs:
        return {}
    pods = await api.list(POD, namespace, selector=selector)
    by_owner: dict[str, list[JSON]] = {}
    for pod in pods:
        for owner in pod["metadata"].get("ownerReferences") or []:
            by_owner.setdefault(str(owner.get("uid")), []).append(pod)
    return {
        str(job["metadata"]["name"]): job_result(job, by_owner.get(job["metadata"]["uid"], []))
        for job in jobs
    }
