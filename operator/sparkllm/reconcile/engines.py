"""The observe step's reads that go to the engines rather than the API server.

Two facts a pass needs come from rank 0's own HTTP port: how many requests a replica
being drained still runs (``sglang:num_running_reqs`` on ``/metrics``), and what rank 0
runs with (``/get_server_info``, for ConfigApplied). Both are raw facts: the drain's
deadline and the comparison with the spec are decided in ``decide`` (``drain.plan_drain``,
``proofs.config_condition`` after ``configcheck.compare_server_info``). A reply is kept
with its secrets redacted (``configcheck.redact_server_info``: the ``api_key`` and the
launch command that carries it), so no key reaches the observation, a log or status.

Why a cache: what a running engine reports does not change while it runs, so rank 0 is
asked once per restart generation (the operator stamps a new one on every gang restart)
instead of on every pass; a failed read is not cached and is tried again next pass. The
reconciler keeps one ``Engines`` between passes; unit tests hand in fakes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sparkllm.configcheck import redact_server_info

RUNNING_METRIC: Final = "sglang:num_running_reqs"
ServerInfoKey = tuple[str, ...]  # (namespace, cluster, replica, restart generation)


@dataclass(frozen=True)
class RunningRequests:
    """Reads how many requests an engine is running, from its Prometheus endpoint."""

    timeout: float = 3.0

    async def count(self, endpoint: str) -> int | None:
        """Sum of ``sglang:num_running_reqs``; None when the engine cannot be read."""
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                response = await client.get(f"{endpoint}/metrics")
            response.raise_for_status()
        except httpx.HTTPError:
            return None
        total = 0.0
        for family in text_string_to_metric_families(response.text):
            if family.name == RUNNING_METRIC:
                total += sum(sample.value for sample in family.samples)
        return int(total)


@dataclass
class ConfigProbe:
    """Reads rank 0's /get_server_info once per (replica, restart generation)."""

    timeout: float = 5.0
    _cache: dict[ServerInfoKey, dict[str, Any]] = field(default_factory=dict)

    async def read(
        self, *, cache_key: ServerInfoKey, endpoint: str, api_key: str | None
    ) -> Mapping[str, Any] | str:
        """The reply, secrets redacted; or a string saying why it could not be read (not
        cached, so the next pass asks again)."""
        cached = self._cache.get(cache_key)
        if cached is not None:
            return cached
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                response = await client.get(f"{endpoint}/get_server_info", headers=headers)
            response.raise_for_status()
            info = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            return f"cannot read {endpoint}/get_server_info: {type(exc).__name__}"
        if not isinstance(info, dict):
            return f"cannot read {endpoint}/get_server_info: not a JSON object"
        self._cache[cache_key] = redacted = redact_server_info(info)
        return redacted


@dataclass(frozen=True)
class Engines:
    """The reads that go to engines rather than the API server (faked in tests)."""

    config_probe: ConfigProbe
    running_requests: RunningRequests
