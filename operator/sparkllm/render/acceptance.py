"""The acceptance checklist on demand: the request annotations, the Job, and its RBAC.

A user asks for the checklist with annotations on the InferenceCluster ``N``::

    sparkllm.io/acceptance=<user>                  # a data key of the users' keys Secret
    sparkllm.io/acceptance-options=soak-seconds=600 arrival-rate=0.05   # optional
    sparkllm.io/acceptance-set-baseline=true       # optional: accept this run's figures

and the operator runs ``sparkllm bench --accept`` once, as a Job ``N-accept-<hash>``,
against the front door (Service ``N``, port 8000) with the key the operator generated for
its own runs (``N-bench-key``, user ``sparkllm:bench``: the load items' ``ignore_eos`` is
let through for it alone) — the benchmark's pattern (``render.benchmark``), whose Job
renderer it shares. The options are the checklist's own command-line options without
``--``, space-separated ``name=value`` words, each checked here so a typo fails the
request before any Job exists.

Why the Job runs as a ServiceAccount of its own (``N-acceptance``) allowed one thing —
``get`` on this one InferenceCluster: the checklist reads rank restarts from its status
before and after the soak and the run, and the accepted baseline from its annotation.
It may not write: on ``set-baseline`` the operator writes the baseline annotation from
the figures in the Job's summary, and only when the run passed. The Job's log keeps the
Markdown report and the JSON report (``--print-json``); the summary (counts, each row's
verdict, why failed rows failed, the window, the figures) travels back in the pod's
termination message into ``status.acceptance``. The model directory is mounted
read-only, as for the benchmark, so the load's prompts are sized in the model's own
tokens (``--tokenizer``): the documents' 256 -> 128 is tokens, not words.

Pure: no I/O, no clock. The key never appears in the output.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from sparkllm.api import API_VERSION, InferenceCluster
from sparkllm.bench.accept.regression import parse_tolerances
from sparkllm.bench.accept.rows import parse_sections
from sparkllm.bench.args import BenchArgs
from sparkllm.cli_args import coerce, command_line
from sparkllm.errors import SpecError
from sparkllm.keys import (
    ANNOTATION_ACCEPTANCE,
    ANNOTATION_ACCEPTANCE_OPTIONS,
    ANNOTATION_ACCEPTANCE_SET_BASELINE,
    LABEL_CLUSTER,
)
from sparkllm.render.benchmark import (
    BENCH_API_KEY_ENV,
    TERMINATION_LOG,
    BenchJob,
    front_door_url,
    hashed_job_name,
    render_bench_job,
    request_user,
)
from sparkllm.render.names import LABEL_COMPONENT, cluster_labels, owner_reference
from sparkllm.render.objects import JSON, stamp_hash
from sparkllm.render.product_image import ProductImage

COMPONENT_ACCEPTANCE: Final = "acceptance"
JSON_REPORT_PATH: Final = "/tmp/acceptance.json"
MARKDOWN_REPORT_PATH: Final = "/tmp/acceptance.md"
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]{0,127}$")
_TRUE: Final = frozenset({"true", "yes", "1"})
_FALSE: Final = frozenset({"false", "no", "0", ""})


def _positive(kind: Callable[[str], float]) -> Callable[[str], str]:
    def check(text: str) -> str:
        try:
            value = kind(text)
        except ValueError:
            raise SpecError(f"{text!r} is not a {kind.__name__}") from None
        if value <= 0:
            raise SpecError(f"{text!r} must be positive")
        return text

    return check


def _sections(text: str) -> str:
    return ",".join(parse_sections(text))


def _tolerance(text: str) -> str:
    parse_tolerances(text)
    return text


def _url(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SpecError(f"{text!r} is not an http(s) URL")
    return text


def _label(text: str) -> str:
    if not _LABEL_NAME.match(text):
        raise SpecError(f"{text!r} is not a Prometheus label name")
    return text


OPTIONS: Final[Mapping[str, Callable[[str], str]]] = {
    "sections": _sections,
    "scale8-requests": _positive(int),
    "scale8-concurrency": _positive(int),
    "arrival-requests": _positive(int),
    "arrival-rate": _positive(float),
    "soak-seconds": _positive(float),
    "soak-concurrency": _positive(int),
    "input-tokens": _positive(int),
    "output-tokens": _positive(int),
    "timeout": _positive(float),
    "tolerance": _tolerance,
    "prometheus-url": _url,
    "node-label": _label,
}
"""The checklist options a request may set (``sparkllm bench --accept --<name>``)."""


@dataclass(frozen=True)
class AcceptanceRequest:
    """What the annotations ask for: who runs it, with which options, and the baseline."""

    user: str
    options: tuple[tuple[str, str], ...] = ()
    set_baseline: bool = False


def parse_options(text: str) -> tuple[tuple[str, str], ...]:
    """Space-separated ``name=value`` words, checked, in ``OPTIONS`` order; SpecError."""
    given: dict[str, str] = {}
    for word in text.split():
        name, sep, value = word.partition("=")
        where = f"annotation {ANNOTATION_ACCEPTANCE_OPTIONS}: {word!r}"
        if not sep or name not in OPTIONS:
            raise SpecError(f"{where} is not name=value of a known option ({', '.join(OPTIONS)})")
        if name in given:
            raise SpecError(f"{where}: {name} is given twice")
        try:
            given[name] = OPTIONS[name](value)
        except SpecError as exc:
            raise SpecError(f"{where}: {exc}") from None
    return tuple((name, given[name]) for name in OPTIONS if name in given)


def _flag(annotations: Mapping[str, str]) -> bool:
    text = annotations.get(ANNOTATION_ACCEPTANCE_SET_BASELINE, "").strip().lower()
    if text not in _TRUE | _FALSE:
        raise SpecError(f"annotation {ANNOTATION_ACCEPTANCE_SET_BASELINE}={text!r}: true or false")
    return text in _TRUE


def parse_acceptance_request(annotations: Mapping[str, str]) -> AcceptanceRequest | None:
    """The request the annotations make; None when there is none. SpecError when invalid."""
    if ANNOTATION_ACCEPTANCE not in annotations:
        return None
    user = request_user(annotations, ANNOTATION_ACCEPTANCE)
    options = parse_options(annotations.get(ANNOTATION_ACCEPTANCE_OPTIONS, ""))
    return AcceptanceRequest(user=user, options=options, set_baseline=_flag(annotations))


def acceptance_job_name(cluster: str, *, request: AcceptanceRequest, generation: int) -> str:
    """``N-accept-<8 hex>`` from the request and the spec generation (at most 56 chars)."""
    basis = [request.user, request.options, request.set_baseline, generation]
    return hashed_job_name(cluster, word="accept", basis=basis)


def acceptance_rbac_name(cluster: str) -> str:
    """The Job's ServiceAccount, Role and RoleBinding."""
    return f"{cluster}-acceptance"


def acceptance_selector(cluster: str) -> str:
    """Label selector of one cluster's acceptance Jobs and their pods."""
    return f"{LABEL_CLUSTER}={cluster},{LABEL_COMPONENT}={COMPONENT_ACCEPTANCE}"


def acceptance_args(ic: InferenceCluster, *, options: tuple[tuple[str, str], ...]) -> list[str]:
    """``sparkllm bench --accept`` arguments (after ``sparkllm``); no key value."""
    namespace = ic.metadata.namespace or "default"
    run = BenchArgs(
        accept=True,
        base_url=front_door_url(ic),
        model=ic.spec.model.served_name,
        api_key_env=BENCH_API_KEY_ENV,
        tokenizer=Path(ic.spec.model.path),
        inference_cluster=f"{namespace}/{ic.metadata.name}",
        status_summary=Path(TERMINATION_LOG),
        output=Path(JSON_REPORT_PATH),
        markdown=Path(MARKDOWN_REPORT_PATH),
        print_json=True,
        **_typed(options),
    )
    return command_line(run)


def _typed(options: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """A request's checked options as the values of ``BenchArgs``'s fields."""
    fields = {name: name.replace("-", "_") for name, _ in options}
    return {fields[name]: coerce(BenchArgs, fields[name], value) for name, value in options}


def render_acceptance_job(
    ic: InferenceCluster,
    *,
    request: AcceptanceRequest,
    image: ProductImage,
    generation: int,
    model_digest: str | None = None,
) -> JSON:
    """The acceptance Job for ``request``, as its ServiceAccount, stamped; with a source
    it mounts the copy of ``model_digest`` (the gateway's)."""
    annotations = {ANNOTATION_ACCEPTANCE_SET_BASELINE: str(request.set_baseline).lower()}
    if request.options:
        words = (f"{name}={value}" for name, value in request.options)
        annotations[ANNOTATION_ACCEPTANCE_OPTIONS] = " ".join(words)
    name = ic.metadata.name
    job = BenchJob(
        name=acceptance_job_name(name, request=request, generation=generation),
        component=COMPONENT_ACCEPTANCE,
        user=request.user,
        args=tuple(acceptance_args(ic, options=request.options)),
        annotations=annotations,
        model_mount=True,
        service_account=acceptance_rbac_name(name),
    )
    return render_bench_job(
        ic, job=job, image=image, generation=generation, model_digest=model_digest
    )


def render_acceptance_rbac(ic: InferenceCluster) -> list[JSON]:
    """ServiceAccount, Role (get on this InferenceCluster only) and RoleBinding, stamped."""
    name, namespace = ic.metadata.name, ic.metadata.namespace or "default"
    rbac = acceptance_rbac_name(name)
    meta = {
        "name": rbac,
        "namespace": namespace,
        "labels": cluster_labels(name, COMPONENT_ACCEPTANCE),
        "ownerReferences": [owner_reference(name=name, uid=ic.metadata.uid or "")],
    }
    group = API_VERSION.split("/")[0]
    rule = {"apiGroups": [group], "resources": ["inferenceclusters"], "resourceNames": [name],
            "verbs": ["get"]}  # fmt: skip
    role_ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": rbac}
    subject = {"kind": "ServiceAccount", "name": rbac, "namespace": namespace}
    objects: list[JSON] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(meta),
         "automountServiceAccountToken": False},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": dict(meta),
         "rules": [rule]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": dict(meta), "roleRef": role_ref, "subjects": [subject]},
    ]  # fmt: skip
    return [stamp_hash(obj) for obj in objects]


__all__ = [
    "ANNOTATION_ACCEPTANCE",
    "ANNOTATION_ACCEPTANCE_OPTIONS",
    "ANNOTATION_ACCEPTANCE_SET_BASELINE",
    "COMPONENT_ACCEPTANCE",
    "OPTIONS",
    "AcceptanceRequest",
    "acceptance_args",
    "acceptance_job_name",
    "acceptance_rbac_name",
    "acceptance_selector",
    "parse_acceptance_request",
    "parse_options",
    "render_acceptance_job",
    "render_acceptance_rbac",
]
