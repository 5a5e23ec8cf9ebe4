"""The acceptance matrix: which requests the benchmark sends, and on what basis.

Why these scenarios: they are the documents' own measurements (SEEDS.md, "Measured"),
so a run can be read against the historical baseline on the same basis —

- ``short-c1`` / ``short-c4`` / ``short-c8``: synthetic 256 -> 128 tokens at closed-loop
  concurrency 1, 4 and 8 (baseline at C8: 35.105 tok/s total output, TTFT p95 25.027 s;
  at C4: TTFT p95 4.919 s; "Scale8 120/120"). Closed loop means each of C workers sends
  its next request when the previous one finishes, so the engine sees exactly C in
  flight. The documents' suggested production start is far lower (<= 0.10 req/s of
  256 -> 128 requests); this matrix measures capacity, it does not model arrivals.
- ``cold-4k`` / ``cold-8k``: long inputs, one at a time (baseline TTFT p95 29.18 s and
  44.37 s, TPOT p95 ~78 ms; "4K/8K cold-long 10/10"). 8K is 8,000 tokens of user text
  so the chat template still fits the gateway's 8,192-token admission cap.
- ``niah``: a needle in a 4,000-token haystack at six depths; the answer must contain
  it ("NIAH 6/6").

Every request is COLD: its text starts with a per-run, per-request nonce, so SGLang's
radix (prefix) cache cannot reuse an earlier request's KV. Output lengths are exact:
``max_tokens`` with ``ignore_eos`` (as bench_serving does), except for the needle check,
which must be allowed to stop by itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

from sparkllm.api import BENCHMARK_SCENARIOS
from sparkllm.errors import SpecError

ScenarioKind = Literal["load", "niah"]
CACHE_STATE: Final = "cold (unique prefix per request)"


@dataclass(frozen=True, slots=True)
class Scenario:
    """One row of the matrix."""

    name: str
    kind: ScenarioKind
    input_tokens: int
    output_tokens: int
    concurrency: int
    requests: int
    baseline: str
    """What the documents measured on this basis (mem_fraction_static 0.50), for reading."""

    @property
    def ignore_eos(self) -> bool:
        return self.kind == "load"

    def basis(self) -> dict[str, Any]:
        """What the numbers of this scenario are measured on."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "output_length": "exact (ignore_eos)" if self.ignore_eos else "up to (stops at EOS)",
            "concurrency": self.concurrency,
            "load": "closed loop",
            "cache": CACHE_STATE,
            "requests": self.requests,
        }


DOCUMENTED_MATRIX: Final = (
    Scenario("short-c1", "load", 256, 128, 1, 10, "no documented figure at C1"),
    Scenario("short-c4", "load", 256, 128, 4, 40, "TTFT p95 4.919 s at C4"),
    Scenario(
        "short-c8",
        "load",
        256,
        128,
        8,
        120,
        "Scale8 120/120; 35.105 tok/s total output, TTFT p95 25.027 s at C8",
    ),
    Scenario("cold-4k", "load", 4000, 128, 1, 10, "10/10; TTFT p95 29.18 s, TPOT p95 ~78 ms"),
    Scenario("cold-8k", "load", 8000, 128, 1, 10, "10/10; TTFT p95 44.37 s, TPOT p95 ~78 ms"),
    Scenario("niah", "niah", 4000, 256, 1, 6, "NIAH 6/6"),
)
# The names are the API's (a user writes them in an annotation); the matrix must have one
# row per name, in the API's order.
SCENARIO_NAMES: Final = BENCHMARK_SCENARIOS
if tuple(scenario.name for scenario in DOCUMENTED_MATRIX) != SCENARIO_NAMES:
    raise AssertionError("DOCUMENTED_MATRIX must have one row per api BENCHMARK_SCENARIOS name")


def select_scenarios(
    names: Sequence[str] | None = None, *, requests: int | None = None
) -> tuple[Scenario, ...]:
    """The named scenarios in matrix order (all when ``names`` is empty or None).

    ``requests`` overrides every scenario's request count (a quick or a longer run);
    the count never drops below the scenario's concurrency, so closed loop holds.
    """
    wanted = set(names or SCENARIO_NAMES)
    unknown = sorted(wanted - set(SCENARIO_NAMES))
    if unknown:
        raise SpecError(f"unknown scenario(s) {unknown}; known: {', '.join(SCENARIO_NAMES)}")
    if requests is not None and requests < 1:
        raise SpecError("requests must be at least 1")
    chosen = [scenario for scenario in DOCUMENTED_MATRIX if scenario.name in wanted]
    if requests is not None:
        chosen = [replace(s, requests=max(requests, s.concurrency)) for s in chosen]
    return tuple(chosen)
