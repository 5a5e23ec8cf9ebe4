"""What an autoscaler reads from the front door (issue 21): queue depth, in-flight, the
wait, and — at zero replicas, where nothing ever queues — the requests turned away.

A real gateway in front of the stand-in router of test_gateway_no_replica (smg's answer
with no worker): each 503 that says why is counted by its code in
``sparkllm_gateway_no_replica_replies_total``, the series the KEDA sample activates on
(manifests/samples/autoscaling/); the queue gauges exist for the scale-up rule.
"""

from __future__ import annotations

from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sparkllm.gateway.app import build_gateway_app
from sparkllm.gateway.serving import CODE_SCALED_TO_ZERO
from tests.unit.gateway_fixtures import gateway_config, running, write_keys
from tests.unit.test_gateway_no_replica import (  # noqa: F401 (fixtures)
    ALICE,
    _chat,
    _cluster,
    _ReadCounter,
    model_dir,
    router,
)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_requests_turned_away_at_zero_replicas_are_counted_by_code(
    model_dir: Path,  # noqa: F811
    tmp_path: Path,
    router: str,  # noqa: F811
) -> None:
    keys = write_keys(tmp_path / "keys", {"alice": "key-alice"})
    app = build_gateway_app(gateway_config(model_dir=model_dir, keys_dir=keys, upstream_url=router))
    app.serving = _ReadCounter(_cluster(0), clock=[100.0])
    with running(app) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        before = samples(app.metrics.exposition()[0].decode())  # the metrics port's text
        assert ("sparkllm_gateway_queued_requests", ()) in before
        assert ("sparkllm_gateway_in_flight_requests", ()) in before
        for _ in range(3):
            answer = client.post("/v1/chat/completions", json=_chat(), headers=ALICE)
            assert answer.status_code == 503
        after = samples(app.metrics.exposition()[0].decode())
    key = ("sparkllm_gateway_no_replica_replies_total", (("code", CODE_SCALED_TO_ZERO),))
    assert after[key] == 3
    assert after[("sparkllm_gateway_queued_requests", ())] == 0  # why the queue cannot wake it
