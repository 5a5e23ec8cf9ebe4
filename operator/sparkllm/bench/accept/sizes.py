"""How much load acceptance's items send: the documents' sizes, as pure data.

Apart from ``load`` (which sends it, over HTTP) so that ``sparkllm bench``'s args type
(``bench/args.py``), which the operator's renderers import, takes its defaults from here
without importing an HTTP client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

DOCUMENTED_ARRIVAL_RATE: Final = 0.10
"""req/s: the documents' suggested starting load for 256 -> 128 requests (an upper bound)."""
INPUT_TOKENS: Final = 256
OUTPUT_TOKENS: Final = 128


@dataclass(frozen=True, slots=True)
class LoadSizes:
    """How much load each item sends (defaults: the documents')."""

    scale8_requests: int = 120
    scale8_concurrency: int = 8
    arrival_requests: int = 160
    arrival_rate: float = DOCUMENTED_ARRIVAL_RATE
    soak_seconds: float = 300.0
    soak_concurrency: int = 2
    input_tokens: int = INPUT_TOKENS
    output_tokens: int = OUTPUT_TOKENS
    seed: int = 19
