"""The acceptance benchmark on demand: the request annotations and the Job that runs it.

A user asks for a benchmark with annotations on the InferenceCluster ``N``::

    sparkllm.io/benchmark=<user>                   # a data key of the users' keys Secret
    sparkllm.io/benchmark-scenarios=short-c1,niah  # optional; default: the whole matrix

and the operator runs ``sparkllm bench`` once, as a Job ``N-bench-<hash>``, against the
front door (Service ``N``, port 8000) — exactly where users send requests, so admission,
the router and every replica are measured as users meet them. The Job presents the key
the operator generated for its own runs (Secret ``N-bench-key``, user ``sparkllm:bench``:
``render.names.BENCH_USER``), the one identity the front door lets send ``ignore_eos``
without a grant in the spec; the annotation's user is who the run is for (status, the
Job's annotation), never a key the Job holds.
The summary travels back in the pod's termination message (``--status-summary
/dev/termination-log``; under 4 KiB, the kubelet's limit) and reconcile copies it into
``status.benchmark``.

Why the name is a hash of the request and the spec generation: a pass must find "the
Job for this request" without remembering anything, and a spec change must not be
measured by a benchmark started before it. Why one attempt (``backoffLimit: 0``): a
failed benchmark is a result to report, and running the load twice would distort it.

Why the model directory is mounted: the benchmark fits prompts to exact token counts
with the model's ``tokenizer.json`` (``--tokenizer``), the documents' basis; without it
lengths would be whitespace words, labelled approximate. It is mounted read-only, on
the nodes that hold the model, as the gateway mounts it (``render/model_access.py``).
The pod runs as the image's non-root user with nothing else (``render/pod_security.py``).

Pure: no I/O, no clock. The key never appears in the output: the container reads it
from ``SPARKLLM_BENCH_API_KEY``, set from a ``secretKeyRef``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from sparkllm.api import BENCHMARK_SCENARIOS, InferenceCluster
from sparkllm.bench.args import BenchArgs
from sparkllm.cli_args import command_line
from sparkllm.errors import SpecError
from sparkllm.gateway_settings import GATEWAY_HTTP_PORT
from sparkllm.keys import (
    ANNOTATION_BENCHMARK,
    ANNOTATION_BENCHMARK_SCENARIOS,
    ANNOTATION_BENCHMARK_USER,
    ANNOTATION_SPEC_GENERATION,
    LABEL_CLUSTER,
)

# The model volume and placement are the gateway's on purpose: the benchmark must mount
# the model exactly where (and on the nodes where) the front door finds it.
from sparkllm.render.model_access import model_node_affinity, model_tolerations, model_volume
from sparkllm.render.names import (
    BENCH_KEY,
    LABEL_COMPONENT,
    bench_key_secret_name,
    cluster_labels,
    gateway_name,
    owner_reference,
)
from sparkllm.render.objects import JSON, render_template, stamp_hash
from sparkllm.render.pod_security import RESTRICTED_CONTAINER_SECURITY, restricted_pod_security
from sparkllm.render.product_image import ProductImage

COMPONENT_BENCHMARK: Final = "benchmark"
BENCH_CONTAINER: Final = "bench"
BENCH_API_KEY_ENV: Final = "SPARKLLM_BENCH_API_KEY"
TERMINATION_LOG: Final = "/dev/termination-log"
# The file when the summary was written; the log's tail when the run could not start
# (exit 2, e.g. a refused key), so status says why instead of nothing.
TERMINATION_POLICY: Final = "FallbackToLogsOnError"
REPORT_PATH: Final = "/tmp/report.json"
BACKOFF_LIMIT: Final = 0
ACTIVE_DEADLINE_SECONDS: Final = 2 * 3600  # the full matrix at the documents' speeds: < 1 h
TTL_SECONDS_AFTER_FINISHED: Final = 24 * 3600  # `kubectl logs` shows the Markdown report
JOB_HASH_LENGTH: Final = 8
# A Secret data key (what `kubectl create secret --from-literal=<key>=...` accepts).
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")


@dataclass(frozen=True)
class BenchmarkRequest:
    """What the annotations ask for: who runs it, and which scenarios (None: all)."""

    user: str
    scenarios: tuple[str, ...] | None = None


def parse_scenarios(text: str) -> tuple[str, ...] | None:
    """Comma-separated scenario names in matrix order, each once; None when empty (all).

    Raises SpecError naming the unknown names, before any Job exists.
    """
    names = {name.strip() for name in text.split(",") if name.strip()}
    unknown = sorted(names - set(BENCHMARK_SCENARIOS))
    if unknown:
        raise SpecError(
            f"annotation {ANNOTATION_BENCHMARK_SCENARIOS}: unknown scenario(s) {unknown}; "
            f"known: {', '.join(BENCHMARK_SCENARIOS)}"
        )
    return tuple(name for name in BENCHMARK_SCENARIOS if name in names) or None


def request_user(annotations: Mapping[str, str], annotation: str) -> str:
    """The user a request annotation names (a users' Secret key); SpecError when not one."""
    user = annotations[annotation].strip()
    if not _SECRET_KEY.match(user):
        raise SpecError(
            f"annotation {annotation}={annotations[annotation]!r}: "
            "must name a user, a data key of the Secret spec.admission.apiKeysSecretRef "
            "(letters, digits, '-', '_', '.')"
        )
    return user


def hashed_job_name(cluster: str, *, word: str, basis: object) -> str:
    """``<cluster>-<word>-<8 hex>``: the same request and spec generation, the same Job."""
    digest = hashlib.sha256(json.dumps(basis).encode()).hexdigest()[:JOB_HASH_LENGTH]
    return f"{cluster}-{word}-{digest}"


def parse_benchmark_request(annotations: Mapping[str, str]) -> BenchmarkRequest | None:
    """The request the annotations make; None when there is none. SpecError when invalid."""
    if ANNOTATION_BENCHMARK not in annotations:
        return None
    user = request_user(annotations, ANNOTATION_BENCHMARK)
    scenarios = parse_scenarios(annotations.get(ANNOTATION_BENCHMARK_SCENARIOS, ""))
    return BenchmarkRequest(user=user, scenarios=scenarios)


def benchmark_job_name(cluster: str, *, request: BenchmarkRequest, generation: int) -> str:
    """``N-bench-<8 hex>`` from the request and the spec generation (at most 55 chars)."""
    basis = [request.user, list(request.scenarios or ()), generation]
    return hashed_job_name(cluster, word="bench", basis=basis)


def benchmark_labels(cluster: str) -> dict[str, str]:
    return cluster_labels(cluster, COMPONENT_BENCHMARK)


def benchmark_selector(cluster: str) -> str:
    """Label selector of one cluster's benchmark Jobs and their pods."""
    return f"{LABEL_CLUSTER}={cluster},{LABEL_COMPONENT}={COMPONENT_BENCHMARK}"


def front_door_url(ic: InferenceCluster) -> str:
    """The gateway Service as any client in the cluster reaches it."""
    namespace = ic.metadata.namespace or "default"
    return f"http://{gateway_name(ic.metadata.name)}.{namespace}.svc:{GATEWAY_HTTP_PORT}"


def bench_args(ic: InferenceCluster, *, scenarios: Sequence[str] | None) -> list[str]:
    """``sparkllm bench`` arguments (after the ``sparkllm`` command); no key value."""
    run = BenchArgs(
        base_url=front_door_url(ic),
        model=ic.spec.model.served_name,
        api_key_env=BENCH_API_KEY_ENV,
        tokenizer=Path(ic.spec.model.path),
        status_summary=Path(TERMINATION_LOG),
        output=Path(REPORT_PATH),
        scenarios=tuple(scenarios) if scenarios else None,
    )
    return command_line(run)


def render_benchmark_job(
    ic: InferenceCluster,
    *,
    user: str,
    scenarios: Sequence[str] | None,
    image: ProductImage,
    generation: int,
    model_digest: str | None = None,
) -> JSON:
    """The benchmark Job requested for ``user`` (a data key of the users' keys Secret),
    stamped; with a source it mounts the copy of ``model_digest`` (the gateway's)."""
    request = BenchmarkRequest(user=user, scenarios=tuple(scenarios) if scenarios else None)
    annotations: dict[str, str] = {}
    if request.scenarios:
        annotations[ANNOTATION_BENCHMARK_SCENARIOS] = ",".join(request.scenarios)
    return render_bench_job(
        ic,
        job=BenchJob(
            name=benchmark_job_name(ic.metadata.name, request=request, generation=generation),
            component=COMPONENT_BENCHMARK,
            user=user,
            args=tuple(bench_args(ic, scenarios=request.scenarios)),
            annotations=annotations,
            model_mount=True,
        ),
        image=image,
        generation=generation,
        model_digest=model_digest,
    )


@dataclass(frozen=True)
class BenchJob:
    """What differs between the on-demand Jobs that run ``sparkllm bench`` for a user."""

    name: str
    component: str
    user: str
    args: tuple[str, ...]
    annotations: Mapping[str, str] = field(default_factory=dict)
    model_mount: bool = False
    """Mount the model directory read-only (the benchmark's tokenizer)."""
    service_account: str | None = None
    """Run as this ServiceAccount (its token mounted); None: no token at all."""


def render_bench_job(
    ic: InferenceCluster,
    *,
    job: BenchJob,
    image: ProductImage,
    generation: int,
    model_digest: str | None = None,
) -> JSON:
    """One attempt of ``sparkllm <args>`` for ``job.user`` against the front door, with the
    operator's own Jobs' key, stamped; ``image`` is the operator's own (it has the CLI)."""
    name, namespace = ic.metadata.name, ic.metadata.namespace or "default"
    key_ref = {"name": bench_key_secret_name(name), "key": BENCH_KEY}
    mounts: list[JSON] = [{"name": "tmp", "mountPath": "/tmp"}]
    volumes: list[JSON] = [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}]
    if job.model_mount:
        mounts.insert(0, {"name": "model", "mountPath": ic.spec.model.path, "readOnly": True})
        volumes.insert(0, model_volume(ic, model_digest))
    rendered = render_template(
        "benchmark_job.yaml.j2",
        name=job.name,
        namespace=namespace,
        labels=cluster_labels(name, job.component),
        annotations={
            **job.annotations,
            ANNOTATION_BENCHMARK_USER: job.user,
            ANNOTATION_SPEC_GENERATION: str(generation),
        },
        owner=owner_reference(name=name, uid=ic.metadata.uid or ""),
        backoff_limit=BACKOFF_LIMIT,
        active_deadline_seconds=ACTIVE_DEADLINE_SECONDS,
        ttl_seconds_after_finished=TTL_SECONDS_AFTER_FINISHED,
        pod_security=restricted_pod_security(),
        container_security=RESTRICTED_CONTAINER_SECURITY,
        # Only with the model mounted does the pod need this object's nodes (a Spark).
        affinity=model_node_affinity(ic) if job.model_mount else None,
        tolerations=model_tolerations(ic) if job.model_mount else [],
        image=image.reference,
        pull_policy=image.pull_policy,
        pull_secrets=image.pod_pull_secrets(),
        service_account=job.service_account,
        container={
            "name": BENCH_CONTAINER,
            "command": ["sparkllm"],
            "args": list(job.args),
            "env": [{"name": BENCH_API_KEY_ENV, "valueFrom": {"secretKeyRef": key_ref}}],
            # One asyncio process streaming at most 8 requests; the tokenizer is the
            # largest thing it holds.
            "resources": {
                "requests": {"cpu": "100m", "memory": "256Mi"},
                "limits": {"cpu": "1", "memory": "1Gi"},
            },
            "termination_path": TERMINATION_LOG,
            "termination_policy": TERMINATION_POLICY,
            "volume_mounts": mounts,
        },
        volumes=volumes,
    )
    return stamp_hash(rendered)


__all__ = [
    "ACTIVE_DEADLINE_SECONDS",
    "ANNOTATION_BENCHMARK",
    "ANNOTATION_BENCHMARK_SCENARIOS",
    "ANNOTATION_BENCHMARK_USER",
    "BENCH_API_KEY_ENV",
    "BENCH_CONTAINER",
    "COMPONENT_BENCHMARK",
    "TERMINATION_LOG",
    "TTL_SECONDS_AFTER_FINISHED",
    "BenchJob",
    "BenchmarkRequest",
    "bench_args",
    "benchmark_job_name",
    "benchmark_labels",
    "benchmark_selector",
    "front_door_url",
    "hashed_job_name",
    "parse_benchmark_request",
    "parse_scenarios",
    "render_bench_job",
    "render_benchmark_job",
    "request_user",
]
