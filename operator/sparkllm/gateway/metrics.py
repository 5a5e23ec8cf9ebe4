"""Prometheus metrics of the admission gateway (``sparkllm_gateway_*``).

Why these: they answer the operator's questions about the front door — how many requests
are refused and why (outcome), how long prompts are (the cap's headroom), what admission
itself costs (its budget is a millisecond), how long users wait for the first byte and
for the whole answer, and how full the concurrency limit and its queue are. The request
families' labels are a small fixed set (route x outcome). The governance families
(``UserMetrics``) are labelled by user id — bounded by the keys, and sensitive: they tell
who uses the model and how much, which ``/v1/usage`` shows a user only for themselves.
So the exposition is served only on the gateway's separate metrics port (server.py),
never on the port users reach, and exposure objects route only ``/v1`` paths.

Each gateway owns its registry, so several can live in one process (tests) and the
default registry's process metrics stay out of the way. Label children are created up
front: every series exists from the first scrape, and the hot path skips the label
lookup.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

PREFIX = "sparkllm_gateway_"
GENERATION_ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses")
ROUTES = (*GENERATION_ROUTES, "/v1/messages/count_tokens", "/v1/models", "other")

_TOKEN_BUCKETS = (64, 128, 256, 512, 1024, 2048, 4096, 6144, 8192, 12288, 16384, 32768, 65536)
_ADMISSION_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
)
_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 45, 60, 90, 120, 300, 600)


class Coded(Protocol):
    """An error reply, as far as a counter needs it."""

    @property
    def code(self) -> str: ...


R = TypeVar("R", bound=Coded)


class Limiter(Protocol):
    """What the gauges read from the concurrency limiter."""

    @property
    def in_flight(self) -> int: ...

    @property
    def queued(self) -> int: ...


class Outcome(enum.StrEnum):
    """How a request ended (the ``outcome`` label)."""

    OK = "ok"
    REJECTED_TOO_LONG = "rejected_too_long"
    UNAUTHORIZED = "unauthorized"
    RATE_LIMITED = "rate_limited"
    BAD_REQUEST = "bad_request"
    UPSTREAM_ERROR = "upstream_error"
    NO_REPLICA = "no_replica"  # 503: no replica serves (scaled to 0, starting, budget spent)
    CLIENT_CLOSED = "client_closed"


class _PruningRegistry(CollectorRegistry):
    """A registry that runs ``before_collect`` first at every scrape, whoever serves it
    (the metrics port's server thread, or ``exposition()``)."""

    def __init__(self) -> None:
        super().__init__(auto_describe=True)
        self.before_collect: Callable[[], None] = lambda: None

    def collect(self) -> Iterator[Metric]:
        self.before_collect()
        yield from super().collect()


class GatewayMetrics:
    """The gateway's metric families in their own registry."""

    def __init__(self) -> None:
        self.registry = _PruningRegistry()
        requests = Counter(
            PREFIX + "requests",
            "Requests by route and outcome.",
            ["route", "outcome"],
            registry=self.registry,
        )
        self._requests = {
            (route, outcome): requests.labels(route, outcome.value)
            for route in ROUTES
            for outcome in Outcome
        }
        input_tokens = Histogram(
            PREFIX + "input_tokens",
            "Prompt tokens (template included) of admitted requests; "
            "kind=upper_bound when the byte bound made the exact count unnecessary.",
            ["kind"],
            buckets=_TOKEN_BUCKETS,
            registry=self.registry,
        )
        self._input_tokens = {exact: input_tokens.labels(kind) for exact, kind in _KINDS.items()}
        self.admission_seconds = Histogram(
            PREFIX + "admission_duration_seconds",
            "Time to decide a generation request (parse, render, count), in seconds.",
            buckets=_ADMISSION_BUCKETS,
            registry=self.registry,
        )
        ttft = Histogram(
            PREFIX + "time_to_first_byte_seconds",
            "From request arrival to the upstream's response headers (TTFT for streams).",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._ttft = {route: ttft.labels(route) for route in GENERATION_ROUTES}
        e2e = Histogram(
            PREFIX + "request_duration_seconds",
            "From request arrival to the last byte sent to the client (E2E).",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._e2e = {route: e2e.labels(route) for route in GENERATION_ROUTES}
        self.in_flight = Gauge(
            PREFIX + "in_flight_requests",
            "Generation requests holding a slot (being served upstream).",
            registry=self.registry,
        )
        self.queued = Gauge(
            PREFIX + "queued_requests",
            "Generation requests waiting for a slot.",
            registry=self.registry,
        )

        # Requests turned away because no replica serves (scaled to zero, starting,
        # restarting), by the 503's error code: queue depth stays 0 at zero replicas, so
        # this is what an autoscaler reads to scale from zero (docs/exposure.md).
        self.no_replica = Counter(
            PREFIX + "no_replica_replies",
            "Generation requests answered 503 because no replica serves, by error code.",
            ["code"],
            registry=self.registry,
        )
        # Requests held while no replica served but one was expected (serving.py), by
        # how the hold ended: served (a replica came back), refused (the 503 after the
        # bound), client_closed (left while held, charged nothing).
        self.held = Histogram(
            PREFIX + "no_replica_hold_seconds",
            "Seconds generation requests were held while no replica served, by how it ended.",
            ["outcome"],
            buckets=_HOLD_BUCKETS,
            registry=self.registry,
        )
        self.users = UserMetrics(self.registry)

    def watch_limiter(self, limiter: Limiter, *, users: Callable[[], Iterable[str]]) -> None:
        """Read the gauges from the limiter at scrape time (no hot-path cost); ``users``:
        who holds a key now (the per-user series of the others are dropped at scrape)."""
        self.in_flight.set_function(lambda: limiter.in_flight)
        self.queued.set_function(lambda: limiter.queued)
        self.registry.before_collect = lambda: self.users.forget_users(users())

    def count_request(self, route: str, outcome: Outcome) -> None:
        """One finished request (``route`` outside ROUTES counts as "other")."""
        child = self._requests.get((route, outcome)) or self._requests[("other", outcome)]
        child.inc()

    def counting_no_replica(self, reply: Callable[[], Awaitable[R]]) -> Callable[[], Awaitable[R]]:
        """``reply`` (the 503 that says why no replica serves), counted by its code."""

        async def counted() -> R:
            answer = await reply()
            self.no_replica.labels(answer.code).inc()
            return answer

        return counted

    def observe_input_tokens(self, tokens: int, *, exact: bool) -> None:
        self._input_tokens[exact].observe(tokens)

    def observe_latency(self, route: str, *, first_byte: float | None, total: float) -> None:
        """Seconds to the first upstream byte (if any came) and to the end."""
        if first_byte is not None:
            self._ttft[route].observe(first_byte)
        self._e2e[route].observe(total)

    def exposition(self) -> tuple[bytes, str]:
        """The text exposition and its content type (what the metrics port serves)."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


_KINDS = {True: "exact", False: "upper_bound"}


_HOLD_BUCKETS = (0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)
_QUEUE_WAIT_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120)


class UserMetrics:
    """Per-user counters and the queue-wait histogram (labels: authenticated users only)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def per_user(name: str, description: str, label: str) -> Counter:
            return Counter(PREFIX + name, description, ["user", label], registry=registry)

        self._requests = per_user("user_requests", "Generation requests per user.", "outcome")
        self._tokens = per_user(
            "user_tokens", "Tokens charged to a user (kind=input|output), as used.", "kind"
        )
        self._refusals = per_user(
            "user_refusals", "Requests refused by governance, by the limit (reason).", "reason"
        )
        self._queue_wait = Histogram(
            PREFIX + "user_queue_wait_seconds",
            "Time a user's admitted request waited for a slot in the fair queue.",
            ["user"],
            buckets=_QUEUE_WAIT_BUCKETS,
            registry=registry,
        )
        self._series: dict[str, set[tuple[Counter | Histogram, tuple[str, ...]]]] = {}
        # The event loop adds series, the metrics port's thread forgets them at a scrape.
        self._lock = threading.Lock()

    def _child(self, family: Counter | Histogram, *labels: str) -> Any:
        with self._lock:
            self._series.setdefault(labels[0], set()).add((family, labels))
            return family.labels(*labels)

    def finished(self, user: str, *, outcome: str, input_tokens: int, output_tokens: int) -> None:
        self._child(self._requests, user, outcome).inc()
        self._child(self._tokens, user, "input").inc(input_tokens)
        self._child(self._tokens, user, "output").inc(output_tokens)

    def refused(self, user: str, *, reason: str) -> None:
        self._child(self._refusals, user, reason).inc()

    def waited(self, user: str, seconds: float) -> None:
        self._child(self._queue_wait, user).observe(seconds)

    def forget_users(self, known: Iterable[str]) -> None:
        """Remove the series of users who no longer hold a key."""
        with self._lock:
            for user in set(self._series) - set(known):
                for family, labels in self._series.pop(user):
                    family.remove(*labels)
