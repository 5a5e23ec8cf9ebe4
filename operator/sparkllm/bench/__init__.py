"""The acceptance benchmark: the documents' matrix, measured as SGLang measures it.

"Not just HTTP 200": acceptance item 4 asks for TTFT, TPOT, E2E, throughput,
concurrency and input length recorded on one basis, and item 3 for real generation
(the needle check). Modules:

- ``scenarios``: the matrix (256 -> 128 at C1/C4/C8, 4K and 8K cold, needle).
- ``prompts``: prompts of N tokens (tokenizer-exact or labelled approximate), cold.
- ``client``: one streamed, timed chat completion (httpx).
- ``stats``: bench_serving's metric definitions, pure.
- ``runner``: closed-loop workers per scenario, warm-up, needle verdicts.
- ``progress``: a plain-text progress bar on stderr.
- ``report``: JSON, Markdown and the compact ``status.benchmark`` summary.
- ``cli``: ``sparkllm bench`` (:func:`bench_main`).
"""

from sparkllm.bench.cli import bench_main
from sparkllm.bench.report import BenchReport, report_json, report_markdown, status_summary
from sparkllm.bench.runner import BenchError, BenchTarget, ScenarioRun, run_matrix
from sparkllm.bench.scenarios import DOCUMENTED_MATRIX, Scenario, select_scenarios

__all__ = [
    "DOCUMENTED_MATRIX",
    "BenchError",
    "BenchReport",
    "BenchTarget",
    "Scenario",
    "ScenarioRun",
    "bench_main",
    "report_json",
    "report_markdown",
    "run_matrix",
    "select_scenarios",
    "status_summary",
]
