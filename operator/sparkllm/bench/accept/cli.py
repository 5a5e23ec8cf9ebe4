"""``sparkllm bench --accept``: run the acceptance checklist and write its reports.

A mode of ``sparkllm bench`` rather than a command of its own (the product's command set
stays as it is): it shares the target options (``--base-url``, ``--model``,
``--api-key-env``, ``--timeout``, ``--tokenizer``, ``--output``, ``--markdown``,
``--status-summary``) and adds the checklist's own (``bench/args.py``, the ``--accept``
group). ``--tokenizer DIR`` sizes the load's prompts in the model's own tokens (else
words, labelled approximate). The API key comes from the variable named with
``--api-key-env``. With ``--inference-cluster
NAMESPACE/NAME`` the InferenceCluster's status gives rank restarts (before / after the soak
and the whole run) and its ``sparkllm.io/accepted-baseline`` annotation the baseline;
``--set-baseline`` writes this run's stress figures there (on request only). ``--baseline
FILE`` / ``--write-baseline FILE`` do the same with a file; ``--print-json`` prints the JSON
report after the Markdown (after ``JSON_MARKER``), so a Job's log keeps both reports. Exit
status: 0 when no row failed, 1 when one did, 2 when the run could not start. "not measured"
rows do not fail the run, and never read as pass.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, Final

from sparkllm.bench.accept.regression import make_baseline, parse_tolerances
from sparkllm.bench.accept.report import report_json, report_markdown, status_summary
from sparkllm.bench.accept.resources import node_selector
from sparkllm.bench.accept.rows import parse_sections
from sparkllm.bench.accept.run import AcceptConfig, StatusReader, run_acceptance
from sparkllm.bench.accept.sizes import LoadSizes
from sparkllm.bench.args import BenchArgs
from sparkllm.bench.cli_io import api_key, write
from sparkllm.bench.runner import BenchTarget
from sparkllm.errors import SparkllmError, SpecError
from sparkllm.keys import BASELINE_ANNOTATION
from sparkllm.kube.client import KubeAPI, load_configuration
from sparkllm.kube.kinds import INFERENCE_CLUSTER

EXIT_PASSED: Final = 0
EXIT_NOT_PASSED: Final = 1
EXIT_ERROR: Final = 2
JSON_MARKER: Final = "--- sparkllm accept: JSON report ---"
LOAD_OPTIONS: Final = tuple(f.name for f in fields(LoadSizes) if f.name != "seed")


def _sizes(args: BenchArgs) -> LoadSizes:
    sizes = LoadSizes(**{name: getattr(args, name) for name in LOAD_OPTIONS})
    counts = (sizes.scale8_requests, sizes.scale8_concurrency, sizes.arrival_requests)
    if min(counts) < 1 or sizes.soak_concurrency < 1 or sizes.arrival_rate <= 0:
        raise SpecError("request counts, concurrencies and the arrival rate must be positive")
    return sizes


class ClusterLink:
    """Reads the InferenceCluster (status, baseline annotation) and writes the baseline."""

    def __init__(self, reference: str) -> None:
        namespace, _, name = reference.partition("/")
        if not (namespace and name):
            raise SpecError("--inference-cluster must be NAMESPACE/NAME")
        self.namespace, self.name = namespace, name

    async def read(self) -> Mapping[str, Any] | None:
        api = KubeAPI(load_configuration())
        try:
            return await api.get(INFERENCE_CLUSTER, self.name, self.namespace)
        finally:
            await api.aclose()

    async def status(self) -> Mapping[str, Any] | None:
        obj = await self.read()
        status = None if obj is None else obj.get("status")
        return status if isinstance(status, Mapping) else None

    async def baseline(self) -> Mapping[str, Any] | None:
        obj = await self.read() or {}
        text = ((obj.get("metadata") or {}).get("annotations") or {}).get(BASELINE_ANNOTATION)
        return None if not text else dict(json.loads(text))

    async def set_baseline(self, baseline: Mapping[str, Any]) -> None:
        patch = {"metadata": {"annotations": {BASELINE_ANNOTATION: json.dumps(baseline)}}}
        api = KubeAPI(load_configuration())
        try:
            await api.merge_patch(INFERENCE_CLUSTER, self.name, self.namespace, patch)
        finally:
            await api.aclose()


async def _run(args: BenchArgs) -> int:
    link = ClusterLink(args.inference_cluster) if args.inference_cluster else None
    baseline = json.loads(args.baseline.read_text()) if args.baseline else None
    if baseline is None and link is not None:
        baseline = await link.baseline()
    status: Mapping[str, Any] | None = await link.status() if link else None
    nodes = [n for r in (status or {}).get("replicaStatuses") or () for n in r.get("nodes") or ()]
    reader: StatusReader | None = link.status if link else None
    config = AcceptConfig(
        target=BenchTarget(
            base_url=args.base_url.rstrip("/"),
            model=args.model,
            api_key=api_key(args.api_key_env),
            timeout_s=args.timeout,
        ),
        sizes=_sizes(args),
        sections=parse_sections(args.sections),
        prometheus_url=args.prometheus_url,
        node_selector=node_selector(nodes, label=args.node_label),
        baseline=baseline,
        tolerances=parse_tolerances(args.tolerance),
        read_status=reader,
        tokenizer=args.tokenizer,
    )
    run = await run_acceptance(config)
    markdown = report_markdown(run, config)
    write(args.output, json.dumps(report_json(run, config), indent=2) + "\n")
    write(args.markdown, markdown)
    write(args.status_summary, json.dumps(status_summary(run), separators=(",", ":")))
    if run.figures and (args.write_baseline or args.set_baseline):
        accepted = make_baseline(run.figures)
        write(args.write_baseline, json.dumps(accepted, indent=2) + "\n")
        if args.set_baseline and link is not None:
            await link.set_baseline(accepted)
    print(markdown, end="")
    if args.print_json:
        print(JSON_MARKER, json.dumps(report_json(run, config), indent=2), sep="\n")
    return EXIT_PASSED if run.passed else EXIT_NOT_PASSED


def run(args: BenchArgs) -> int:
    """Run the checklist from parsed arguments; the exit status."""
    try:
        if args.set_baseline and not args.inference_cluster:
            raise SpecError("--set-baseline needs --inference-cluster")
        return asyncio.run(_run(args))
    except (SparkllmError, ValueError, OSError) as exc:
        print(f"sparkllm accept: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
