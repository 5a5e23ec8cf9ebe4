"""SGLang's Prometheus metrics, with SGLang 0.5.23's names and labels, for one SIMULATED rank.

Why exact names: the operator's PrometheusRule, dashboards and the gateway read these
series; the simulator is where those are exercised before a GPU is ever involved. Names,
label sets and histogram buckets follow ``sglang/srt/observability/metrics_collector.py``
(0.5.23 has no ``sglang/srt/metrics/collector.py``):

- tokenizer side (rank 0 only), labels ``model_name``, ``engine_type`` and, where SGLang
  adds it, ``is_streaming`` ("true"/"false"): ``sglang:prompt_tokens_total``,
  ``sglang:generation_tokens_total``, ``sglang:num_requests_total``,
  ``sglang:time_to_first_token_seconds``, ``sglang:e2e_request_latency_seconds``, and
  ``sglang:inter_token_latency_seconds`` (without ``is_streaming``).
- scheduler side (every rank), labels ``model_name``, ``engine_type``, ``tp_rank``,
  ``pp_rank``, ``moe_ep_rank``: gauges ``sglang:num_running_reqs``,
  ``sglang:num_queue_reqs``, ``sglang:num_used_tokens``, ``sglang:token_usage``,
  ``sglang:gen_throughput``, ``sglang:cache_hit_rate``, ``sglang:max_total_num_tokens``.

``engine_type`` is ``unified`` (no prefill/decode disaggregation). Each simulator owns a
private registry so several simulated ranks can live in one test process.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

# Bucket bounds of SGLang's TokenizerMetricsCollector defaults (seconds).
SLOW_BUCKETS: tuple[float, ...] = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200,
    1800, 2400,
)  # fmt: skip
ITL_BUCKETS: tuple[float, ...] = (
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060,
    0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0,
)  # fmt: skip
CONTENT_TYPE = CONTENT_TYPE_LATEST
ENGINE_TYPE = "unified"


class _TokenizerFamilies:
    """The request metrics rank 0's tokenizer manager exports (absent on workers)."""

    def __init__(self, registry: CollectorRegistry, base_labels: list[str]) -> None:
        labels = [*base_labels, "is_streaming"]
        self.prompt_tokens = Counter(
            "sglang:prompt_tokens", "Number of prefill tokens processed.", labels,
            registry=registry,
        )  # fmt: skip
        self.generation_tokens = Counter(
            "sglang:generation_tokens", "Number of generation tokens processed.", labels,
            registry=registry,
        )  # fmt: skip
        self.requests = Counter(
            "sglang:num_requests", "Number of requests processed.", labels, registry=registry
        )
        self.ttft = Histogram(
            "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            labels, buckets=SLOW_BUCKETS, registry=registry,
        )  # fmt: skip
        self.itl = Histogram(
            "sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
            base_labels, buckets=ITL_BUCKETS, registry=registry,
        )  # fmt: skip
        self.e2e = Histogram(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            labels, buckets=SLOW_BUCKETS, registry=registry,
        )  # fmt: skip


SCHEDULER_GAUGES = {
    "num_running_reqs": "The number of running requests.",
    "num_queue_reqs": "The number of requests in the waiting queue.",
    "num_used_tokens": "The number of used tokens.",
    "token_usage": "The token usage.",
    "gen_throughput": "The generation throughput (token/s).",
    "cache_hit_rate": "The prefix cache hit rate.",
    "max_total_num_tokens": "Maximum total number of tokens in the KV cache pool.",
}


class EngineMetrics:
    """The metric families of one simulated rank and the few ways they change.

    ``serves_api`` is True on rank 0 (tokenizer and scheduler metrics) and False on
    workers, whose /metrics shows only their own scheduler's gauges.
    """

    def __init__(
        self,
        *,
        model_name: str,
        pp_rank: int,
        max_total_num_tokens: int,
        serves_api: bool = True,
        tp_rank: int = 0,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._base = {"model_name": model_name, "engine_type": ENGINE_TYPE}
        self._scheduler = {**self._base, "tp_rank": str(tp_rank), "pp_rank": str(pp_rank)}
        self._scheduler["moe_ep_rank"] = "0"
        self.max_total_num_tokens = max_total_num_tokens
        self._tokenizer = (
            _TokenizerFamilies(self.registry, list(self._base)) if serves_api else None
        )
        self.gauges = {
            name: Gauge(f"sglang:{name}", text, list(self._scheduler), registry=self.registry)
            for name, text in SCHEDULER_GAUGES.items()
        }
        self.set_scheduler_state(running=0, queued=0, used_tokens=0, throughput=0.0)
        self.gauges["cache_hit_rate"].labels(**self._scheduler).set(0.0)
        self.gauges["max_total_num_tokens"].labels(**self._scheduler).set(max_total_num_tokens)

    def set_scheduler_state(
        self, *, running: int, queued: int, used_tokens: int, throughput: float
    ) -> None:
        labels = self._scheduler
        self.gauges["num_running_reqs"].labels(**labels).set(running)
        self.gauges["num_queue_reqs"].labels(**labels).set(queued)
        self.gauges["num_used_tokens"].labels(**labels).set(used_tokens)
        usage = used_tokens / self.max_total_num_tokens if self.max_total_num_tokens else 0.0
        self.gauges["token_usage"].labels(**labels).set(round(usage, 4))
        self.gauges["gen_throughput"].labels(**labels).set(throughput)

    def observe_request(
        self,
        *,
        streaming: bool,
        prompt_tokens: int,
        completion_tokens: int,
        ttft_seconds: float,
        e2e_seconds: float,
        inter_token_seconds: float,
    ) -> None:
        families = self._tokenizer
        if families is None:
            return
        labels = {**self._base, "is_streaming": "true" if streaming else "false"}
        families.prompt_tokens.labels(**labels).inc(prompt_tokens)
        families.generation_tokens.labels(**labels).inc(completion_tokens)
        families.requests.labels(**labels).inc()
        families.ttft.labels(**labels).observe(ttft_seconds)
        families.e2e.labels(**labels).observe(e2e_seconds)
        if completion_tokens > 1:
            families.itl.labels(**self._base).observe(inter_token_seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
