"""Rank 0 of a SIMULATED SGLang 0.5.23 engine: its HTTP API as a raw ASGI app.

Why this surface: rank 0 is the only rank that serves users, the router and the operator.
The operator reads ``/health`` (readiness) and ``/get_server_info`` (ConfigApplied); the
router probes ``/server_info`` / ``/model_info`` / ``/get_model_info`` and ``/v1/models``;
users reach ``/v1/chat/completions`` and ``/v1/completions``, and ``/v1/messages``
(+ ``/count_tokens``) and ``/v1/responses`` as chats (protocols.py; a stored response's
retrieve and cancel answer as SGLang does without ``--enable-response-store``); Prometheus scrapes
``/metrics``. Behaviour mirrored from ``sglang/srt/entrypoints/http_server.py`` and
``sglang/srt/utils/auth.py`` (0.5.23):

- ``/health`` and ``/health_generate``: 503 while starting or shutting down; otherwise a
  one-token generation and SGLang's 20 s window for any output (``health.py``): 200 with
  an empty body, or 503 after a window without output (a hang, or a long prefill alone),
  which also turns ``/ready`` 503 until a check succeeds.
- ``--api-key``: every request needs ``Authorization: Bearer <key>`` (scheme
  case-insensitive), except OPTIONS and paths starting with ``/health``, ``/ready`` or
  ``/metrics``. Refusal: 401 ``{"error": "Unauthorized"}``, checked before routing.
  Note: ``/ping`` is NOT exempt in 0.5.23, and ``/get_server_info`` echoes every server
  argument, ``api_key`` included, like SGLang does (to authenticated callers).
- ``/metrics`` exists only with ``--enable-metrics``; unknown paths give FastAPI's
  404 ``{"detail": "Not Found"}``.

``/get_server_info`` also carries ``"simulator": true``; every response carries the
``x-sparkllm-simulator: true`` header.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any

from sparkllm.sglang_contract.flags import SGLANG_VERSION
from sparkllm_dev.sim import asgi, protocols
from sparkllm_dev.sim.engine_config import EngineConfig
from sparkllm_dev.sim.generate import GenerationService
from sparkllm_dev.sim.health import (
    HealthCheck,
    Progress,
    ServerStatus,
    health_check_timeout,
    health_generation,
)
from sparkllm_dev.sim.metrics import CONTENT_TYPE, EngineMetrics
from sparkllm_dev.sim.model_files import TokenCounter
from sparkllm_dev.sim.openai_api import error_body

logger = logging.getLogger("sparkllm_dev.sim")
AUTH_EXEMPT_PREFIXES = ("/health", "/ready", "/metrics")
_CONVERTED: dict[str, protocols.Protocol] = {
    "/v1/messages": "messages",
    "/v1/messages/count_tokens": "messages",
    "/v1/responses": "responses",
}


def is_authorized(
    *, method: str, path: str, authorization: str | None, api_key: str | None
) -> bool:
    """SGLang's ``decide_request_auth`` for NORMAL endpoints (the only kind simulated)."""
    if api_key is None or method == "OPTIONS" or path.startswith(AUTH_EXEMPT_PREFIXES):
        return True
    scheme, _, token = (authorization or "").partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(token, api_key)


class EngineApp:
    """The simulated rank-0 HTTP server (an ASGI callable)."""

    def __init__(
        self,
        config: EngineConfig,
        *,
        tokens: TokenCounter,
        model_config: Mapping[str, Any],
        launch_command: str,
        on_crash: Callable[[], None] = lambda: None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.config = config
        self.model_config = model_config
        self.launch_command = launch_command
        self.metrics = EngineMetrics(
            model_name=config.served_model_name,
            pp_rank=config.pp_rank,
            tp_rank=config.tp_rank,
            max_total_num_tokens=config.max_total_num_tokens,
        )
        self.progress = Progress()
        self.health = HealthCheck(
            self.progress,
            timeout=config.sim.health_check_timeout or health_check_timeout(env or {}),
            # One token through the pipeline costs about a decode step; the TTFT line's
            # 14 s intercept is a fit over 4K-8K prompts, not a one-token forward pass.
            token_seconds=config.sim.latency.tpot_seconds,
        )
        self._health_generation = health_generation(env or {})
        self.generation = GenerationService(
            config=config,
            tokens=tokens,
            metrics=self.metrics,
            progress=self.progress,
            on_request_done=self._done,
        )
        self.startup_time = time.time()
        self.ready_at = time.monotonic() + config.sim.startup_seconds
        self.shutting_down = False
        self.requests_done = 0
        self.on_crash = on_crash

    @property
    def starting(self) -> bool:
        return time.monotonic() < self.ready_at

    def _done(self) -> None:
        self.requests_done += 1
        limit = self.config.sim.fail_after
        if limit is not None and self.requests_done >= limit:
            logger.error("SIMULATOR: simulated engine crash after %d requests", limit)
            self.on_crash()
        hang = self.config.sim.hang_after
        if hang is not None and self.requests_done >= hang:
            self.progress.hang()

    async def __call__(self, scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send) -> None:
        if scope["type"] == "lifespan":
            await asgi.serve_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        authorization = asgi.request_header(scope, "authorization")
        if not is_authorized(
            method=method, path=path, authorization=authorization, api_key=self.config.api_key
        ):
            await asgi.send_json(send, status=401, payload={"error": "Unauthorized"})
            return
        await self._route(scope, receive, send)

    async def _route(self, scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send) -> None:
        method, path = scope["method"], scope["path"]
        gets: dict[str, Callable[[], Any]] = {
            "/get_server_info": self.server_info,
            "/server_info": self.server_info,
            "/get_model_info": self.model_info,
            "/model_info": self.model_info,
            "/v1/models": self.models,
        }
        posts = {"/v1/chat/completions": "chat", "/v1/completions": "completion"}
        if path in ("/health", "/health_generate") and method == "GET":
            await asgi.send_response(send, status=await self._health(path))
        elif path == "/ready" and method == "GET":
            ready = not (self.starting or self.shutting_down) and (
                self.health.status is ServerStatus.UP
            )
            await asgi.send_response(send, status=200 if ready else 503)
        elif path == "/ping" and method == "GET":
            healthy = not (self.starting or self.shutting_down)
            await asgi.send_response(send, status=200 if healthy else 503)
        elif path in gets and method == "GET":
            await asgi.send_json(send, status=200, payload=gets[path]())
        elif path.startswith("/v1/models/") and method == "GET":
            await self._one_model(path.removeprefix("/v1/models/"), send)
        elif path in posts and method == "POST":
            await self._generate(posts[path], scope, receive, send)
        elif path in _CONVERTED and method == "POST":
            await self._converted(path, receive, send)
        elif path.startswith("/v1/responses/") and method in ("GET", "POST"):
            message = (
                "Response store is disabled. Stateful Responses require "
                "--enable-response-store on a standalone server; response storage "
                "is unavailable in PD mode."
            )
            payload = {**error_body(message), "param": "response_id"}
            await asgi.send_json(send, status=400, payload=payload)
        elif path == "/metrics" and self.config.enable_metrics and method == "GET":
            body = self.metrics.render()
            await asgi.send_response(send, status=200, body=body, content_type=CONTENT_TYPE)
        elif path in (*gets, *posts, "/health", "/health_generate", "/ping", "/ready"):
            await asgi.send_json(send, status=405, payload={"detail": "Method Not Allowed"})
        else:
            await asgi.send_json(send, status=404, payload={"detail": "Not Found"})

    async def _converted(self, path: str, receive: asgi.Receive, send: asgi.Send) -> None:
        """Messages / Responses: the chat SGLang makes of the body, its answer converted."""
        try:
            body = json.loads(await asgi.read_body(receive) or b"null")
        except ValueError:
            body = None
        protocol = _CONVERTED[path]
        if not isinstance(body, dict) or body.get("stream"):
            why = "a JSON object" if not isinstance(body, dict) else "not streamed (simulator)"
            payload = error_body(f"the request body must be {why}", err_type="Bad Request")
            await asgi.send_json(send, status=400, payload=payload)
            return
        chat = protocols.to_chat(protocol, body)
        if path.endswith("/count_tokens"):
            texts = [m["content"] for m in chat["messages"] if isinstance(m["content"], str)]
            count = sum(map(self.generation.tokens.count, texts))
            await asgi.send_json(send, status=200, payload={"input_tokens": count})
            return
        captured: list[bytes] = []
        status = [200]

        async def capture(message: asgi.Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            else:
                captured.append(message.get("body", b""))

        await asyncio.sleep(max(0.0, self.ready_at - time.monotonic()))  # wait out startup
        await self.generation.serve("chat", json.dumps(chat).encode(), capture)
        answer = json.loads(b"".join(captured))
        if status[0] != 200:
            await asgi.send_json(send, status=status[0], payload=answer)
        elif protocol == "messages":
            await asgi.send_json(send, status=200, payload=protocols.anthropic_message(answer))
        else:
            await asgi.send_json(send, status=200, payload=protocols.responses_object(answer, body))

    async def _health(self, path: str) -> int:
        if self.shutting_down or self.starting:
            return 503
        if path == "/health" and not self._health_generation:
            return 200
        return await self.health.check()

    async def _generate(
        self, kind: str, scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send
    ) -> None:
        body = await asgi.read_body(receive)
        media_type = (asgi.request_header(scope, "content-type") or "").split(";")[0].strip()
        if media_type.lower() != asgi.JSON_TYPE:
            message = "Unsupported Media Type: Only 'application/json' is allowed"
            payload = error_body(message, err_type="Bad Request")
            await asgi.send_json(send, status=400, payload=payload)
            return
        await asyncio.sleep(max(0.0, self.ready_at - time.monotonic()))  # wait out startup
        await self.generation.serve(
            "chat" if kind == "chat" else "completion", body, send, receive=receive
        )

    def server_info(self) -> dict[str, Any]:
        config = self.config
        return {
            **config.server_info_args,
            "launch_command": self.launch_command,
            "status": "ready",
            "max_total_num_tokens": config.max_total_num_tokens,
            "max_req_input_len": min(config.context_length - 1, config.max_total_num_tokens - 1)
            - 5,
            "startup_time": self.startup_time,
            "internal_states": [
                {
                    "max_running_requests": config.max_running_requests,
                    "context_length": config.context_length,
                    "pp_size": config.pp_size,
                }
            ],
            "version": SGLANG_VERSION,
            "frontend": "python",
            "simulator": True,
        }

    def model_info(self) -> dict[str, Any]:
        args = self.config.server_info_args
        return {
            "model_path": self.config.model_path,
            "served_model_name": self.config.served_model_name,
            "tokenizer_path": args.get("tokenizer_path") or self.config.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": args.get("weight_version", "default"),
            "load_format": args.get("load_format"),
            "reasoning_parser": args.get("reasoning_parser"),
            "tool_call_parser": args.get("tool_call_parser"),
            "disaggregation_mode": args.get("disaggregation_mode", "null"),
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": self.model_config.get("model_type"),
            "architectures": self.model_config.get("architectures"),
            "simulator": True,
        }

    def _card(self, name: str) -> dict[str, Any]:
        return {
            "id": name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "sglang",
            "root": name,
            "parent": None,
            "max_model_len": self.config.context_length,
        }

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [self._card(self.config.served_model_name)]}

    async def _one_model(self, name: str, send: asgi.Send) -> None:
        if name == self.config.served_model_name:
            await asgi.send_json(send, status=200, payload=self._card(name))
            return
        error = {
            "message": f"The model '{name}' does not exist",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
        await asgi.send_json(send, status=404, payload={"error": error})
