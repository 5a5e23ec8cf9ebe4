"""Node ranks > 0 of a SIMULATED SGLang engine: the dummy health server and nothing else.

Why it matters to the operator: in SGLang 0.5.23 a node with ``--node-rank`` > 0 runs no
API. It starts ``launch_dummy_health_check_server`` (``sglang/srt/utils/common.py``) on
``--host``/``--port``: ``/ping``, ``/health`` and ``/health_generate`` ALWAYS answer 200,
whatever the state of the pipeline, and ``/metrics`` exists only with
``--enable-metrics`` (then showing that rank's scheduler gauges, ``pp_rank=k``). There is
no API-key check. Hence the design rule: a worker's health is read from its container
state, never from HTTP. Everything else is FastAPI's 404.
"""

from __future__ import annotations

from sparkllm_dev.sim import asgi
from sparkllm_dev.sim.engine_config import EngineConfig
from sparkllm_dev.sim.metrics import CONTENT_TYPE, EngineMetrics

ALWAYS_OK = ("/ping", "/health", "/health_generate")


class WorkerApp:
    """The simulated dummy health server of one pipeline rank > 0 (an ASGI callable)."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.metrics = EngineMetrics(
            model_name=config.served_model_name,
            pp_rank=config.pp_rank,
            tp_rank=config.tp_rank,
            max_total_num_tokens=config.max_total_num_tokens,
            serves_api=False,
        )

    async def __call__(self, scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send) -> None:
        if scope["type"] == "lifespan":
            await asgi.serve_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if path in ALWAYS_OK and method == "GET":
            await asgi.send_response(send, status=200)
        elif path == "/metrics" and self.config.enable_metrics and method == "GET":
            body = self.metrics.render()
            await asgi.send_response(send, status=200, body=body, content_type=CONTENT_TYPE)
        elif path in ALWAYS_OK:
            await asgi.send_json(send, status=405, payload={"detail": "Method Not Allowed"})
        else:
            await asgi.send_json(send, status=404, payload={"detail": "Not Found"})
