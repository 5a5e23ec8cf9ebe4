"""``sparkllm bench``'s options (and the checklist's, ``--accept``), one type for its
parser and the Jobs that run it.

The benchmark Job (``render/benchmark.py``) and the acceptance Job (``render/acceptance.py``,
with the options a request's annotation may set) fill one in and write it with
``cli_args.command_line``; the command's parser is built from the same fields
(``bench/cli.py``). Field order is the order the Jobs write the flags in.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Final

from sparkllm.bench.accept.rows import SECTIONS
from sparkllm.bench.accept.sizes import LoadSizes
from sparkllm.bench.scenarios import SCENARIO_NAMES
from sparkllm.cli_args import option

ACCEPT: Final = "acceptance checklist (with --accept)"
_SIZES: Final = LoadSizes()  # the documents' load, the defaults of the checklist's sizes


@dataclass(frozen=True, kw_only=True)
class BenchArgs:
    """One ``sparkllm bench`` run: the matrix, or with ``accept`` the checklist."""

    COMMAND: ClassVar[tuple[str, ...]] = ("bench",)

    accept: bool = option(
        "--accept",
        default=False,
        group=ACCEPT,
        help="run the acceptance checklist instead of the matrix",
    )
    base_url: str = option("--base-url", help="gateway or rank-0 URL, e.g. http://h:8000")
    model: str = option("--model", help="the served model name")
    api_key_env: str | None = option(
        "--api-key-env",
        default=None,
        metavar="VAR",
        help="environment variable holding the API key",
    )
    tokenizer: Path | None = option(
        "--tokenizer", default=None, help="directory with tokenizer.json (else approximate)"
    )
    inference_cluster: str | None = option(
        "--inference-cluster", default=None, metavar="NAMESPACE/NAME", group=ACCEPT
    )
    status_summary: Path | None = option(
        "--status-summary",
        default=None,
        help="write the compact status.benchmark JSON here (e.g. /dev/termination-log)",
    )
    output: Path | None = option("--output", default=None, help="write the full JSON report here")
    markdown: Path | None = option(
        "--markdown", default=None, help="write the Markdown report here"
    )
    print_json: bool = option(
        "--print-json",
        default=False,
        group=ACCEPT,
        help="print the JSON report after the Markdown (a Job's log then keeps both)",
    )
    scenarios: tuple[str, ...] | None = option(
        "--scenarios",
        default=None,
        sep=",",
        help=f"comma-separated subset of: {', '.join(SCENARIO_NAMES)} (default: all)",
    )
    # The checklist's options a request may set (render/acceptance.py OPTIONS), in order.
    sections: str = option(
        "--sections",
        default=",".join(SECTIONS),
        group=ACCEPT,
        help=f"subset of: {', '.join(SECTIONS)}",
    )
    scale8_requests: int = option("--scale8-requests", default=_SIZES.scale8_requests, group=ACCEPT)
    scale8_concurrency: int = option(
        "--scale8-concurrency", default=_SIZES.scale8_concurrency, group=ACCEPT
    )
    arrival_requests: int = option(
        "--arrival-requests", default=_SIZES.arrival_requests, group=ACCEPT
    )
    arrival_rate: float = option(
        "--arrival-rate",
        default=_SIZES.arrival_rate,
        group=ACCEPT,
        help="req/s (default: the documents' suggested starting load, 0.10)",
    )
    soak_seconds: float = option("--soak-seconds", default=_SIZES.soak_seconds, group=ACCEPT)
    soak_concurrency: int = option(
        "--soak-concurrency", default=_SIZES.soak_concurrency, group=ACCEPT
    )
    input_tokens: int = option("--input-tokens", default=_SIZES.input_tokens, group=ACCEPT)
    output_tokens: int = option("--output-tokens", default=_SIZES.output_tokens, group=ACCEPT)
    timeout: float = option("--timeout", default=900.0, help="per request, seconds")
    tolerance: str | None = option(
        "--tolerance", default=None, group=ACCEPT, help="metric=fraction,... (e.g. ttftP95Ms=0.3)"
    )
    prometheus_url: str | None = option(
        "--prometheus-url",
        default=None,
        group=ACCEPT,
        help="Prometheus base URL for resource safety",
    )
    node_label: str = option(
        "--node-label", default="instance", group=ACCEPT, help="node-exporter's node label"
    )
    # Never written by the operator's Jobs.
    requests: int | None = option(
        "--requests", default=None, help="override every scenario's request count"
    )
    no_warmup: bool = option("--no-warmup", default=False, help="skip the warm-up request")
    baseline: Path | None = option(
        "--baseline", default=None, group=ACCEPT, help="accepted baseline JSON file"
    )
    write_baseline: Path | None = option(
        "--write-baseline", default=None, group=ACCEPT, help="write this run as a baseline file"
    )
    set_baseline: bool = option(
        "--set-baseline",
        default=False,
        group=ACCEPT,
        help="accept this run on the InferenceCluster",
    )
