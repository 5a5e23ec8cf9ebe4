"""Serving one SIMULATED generation: queue, time to first token, tokens, metrics.

Why its own module: this is the part that pretends to be the GPU — it takes a slot from
the scheduler, waits the latency model's TTFT and TPOT, streams or returns the
deterministic answer, and records SGLang's request metrics. The routing app stays a list
of endpoints. Timing is real (``asyncio.sleep``), scaled down by the latency model.

Tokens follow a fixed decode clock (token k at first token + k x TPOT), not "sleep TPOT
after each token": a GPU's decode steps do not slow down because the host's CPU is busy,
and with relative sleeps every scheduling delay of the simulator's own process (other
processes on the same two cores) would add up over an answer and blur what a benchmark
compares — the cost of the layers in front of the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from sparkllm_dev.sim import asgi
from sparkllm_dev.sim.deepseek_v4 import (
    ChatOutput,
    Parsers,
    fit_length,
    known_pieces,
    parse_output,
    raw_pieces,
)
from sparkllm_dev.sim.engine_config import EngineConfig
from sparkllm_dev.sim.generation import answer_for
from sparkllm_dev.sim.health import Progress
from sparkllm_dev.sim.metrics import EngineMetrics
from sparkllm_dev.sim.model_files import TokenCounter
from sparkllm_dev.sim.openai_api import (
    GenerationRequest,
    Kind,
    RejectedRequestError,
    ResponseShapes,
    fit_context_window,
    parse_generation_request,
    tool_calls_json,
)
from sparkllm_dev.sim.scheduler import RequestSlots, RunningRequest


def _compact(payload: object) -> str:
    return json.dumps(payload, separators=(",", ":"))


class _DecodePace:
    """Token k of an answer is due at ``start + k * tpot``; a late token does not shift the rest.

    Each token is an output of the engine (``Progress.emit``: what SGLang's /health looks
    for); when the engine hangs, the next token never comes.
    """

    def __init__(self, tpot: float, *, start: float, progress: Progress) -> None:
        self._tpot = tpot
        self._due = start
        self._progress = progress

    async def next_token(self) -> None:
        self._due += self._tpot
        # Behind schedule: still yield once, so other requests' tokens go out too.
        await asyncio.sleep(max(0.0, self._due - time.monotonic()))
        await self._progress.emit()


@dataclass(slots=True)
class _Timing:
    started: float
    first_token: float | None = None


class GenerationService:
    """Runs chat/completions requests against the simulated engine of one rank 0."""

    def __init__(
        self,
        *,
        config: EngineConfig,
        tokens: TokenCounter,
        metrics: EngineMetrics,
        progress: Progress,
        on_request_done: Callable[[], None],
    ) -> None:
        self.config = config
        self.progress = progress
        self.tokens = tokens
        self.metrics = metrics
        self.slots = RequestSlots(capacity=config.max_running_requests, metrics=metrics)
        self._on_request_done = on_request_done
        self._auto_truncate = bool(config.server_info_args.get("allow_auto_truncate"))
        self._parsers = Parsers(
            reasoning=bool(config.server_info_args.get("reasoning_parser")),
            tools=bool(config.server_info_args.get("tool_call_parser")),
        )

    async def serve(
        self, kind: Kind, raw_body: bytes, send: asgi.Send, *, receive: asgi.Receive | None = None
    ) -> None:
        """Answer one request; when the client disconnects first, abort it (as SGLang aborts
        a request whose connection closed: its slot and running count are freed at once).

        uvicorn drops writes to a closed connection silently, so without watching
        ``receive`` a generation would run on for its whole answer.
        """
        if receive is None:
            await self._serve(kind, raw_body, send)
            return
        generation = asyncio.ensure_future(self._serve(kind, raw_body, send))
        gone = asyncio.ensure_future(asgi.wait_for_disconnect(receive))
        try:
            await asyncio.wait((generation, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not generation.done():
                generation.cancel()  # the client left: abort, freeing the slot
                with contextlib.suppress(asyncio.CancelledError):
                    await generation
        if generation.done() and not generation.cancelled():
            generation.result()

    async def _serve(self, kind: Kind, raw_body: bytes, send: asgi.Send) -> None:
        try:
            body = json.loads(raw_body or b"null")
        except ValueError:
            body = None
        try:
            request = parse_generation_request(
                kind, body, default_model=self.config.served_model_name
            )
            counted = sum(map(self.tokens.count, request.prompt_texts))
            prompt_tokens, max_tokens = fit_context_window(
                prompt_tokens=counted + request.prompt_ids,
                max_tokens=request.max_tokens,
                context_length=self.config.context_length,
                auto_truncate=self._auto_truncate,
            )
        except RejectedRequestError as rejected:
            await asgi.send_json(send, status=rejected.status, payload=rejected.body)
            return
        answer = self._output(request, max_tokens)
        shapes = ResponseShapes(request=request, rid=uuid.uuid4().hex, created=int(time.time()))
        timing = _Timing(started=time.monotonic())
        try:
            async with self.slots.slot(prompt_tokens=prompt_tokens) as running:
                with self.progress.prefill():  # a queued /health token waits behind it
                    await asyncio.sleep(self.config.sim.latency.ttft_seconds(prompt_tokens))
                await self.progress.emit()  # the first token (never, when the engine hangs)
                respond = self._stream if request.stream else self._respond
                await respond(
                    send=send,
                    shapes=shapes,
                    answer=answer,
                    prompt_tokens=prompt_tokens,
                    running=running,
                    timing=timing,
                )
        except OSError:
            return  # the client went away mid-stream; SGLang aborts the request the same way
        self._record(request, answer, prompt_tokens, timing)

    async def _respond(
        self,
        *,
        send: asgi.Send,
        shapes: ResponseShapes,
        answer: ChatOutput,
        prompt_tokens: int,
        running: RunningRequest,
        timing: _Timing,
    ) -> None:
        timing.first_token = time.monotonic()
        self.slots.record_generated(running, min(1, answer.completion_tokens))
        pace = _DecodePace(
            self.config.sim.latency.tpot_seconds, start=timing.first_token, progress=self.progress
        )
        for _ in range(answer.completion_tokens - 1):
            await pace.next_token()
            self.slots.record_generated(running, 1)
        payload = shapes.full(answer, prompt_tokens=prompt_tokens)
        await asgi.send_json(send, status=200, payload=payload)

    async def _stream(
        self,
        *,
        send: asgi.Send,
        shapes: ResponseShapes,
        answer: ChatOutput,
        prompt_tokens: int,
        running: RunningRequest,
        timing: _Timing,
    ) -> None:
        await asgi.start_stream(send)
        if shapes.request.kind == "chat":
            await asgi.send_event(send, _compact(shapes.chunk("", first=True)))
        pace = _DecodePace(
            self.config.sim.latency.tpot_seconds, start=time.monotonic(), progress=self.progress
        )
        events = _stream_events(answer)
        broken = "broken-stream" in self.config.sim.faults
        for index, chunk in enumerate(events):
            if index:
                await pace.next_token()
            else:
                timing.first_token = time.monotonic()
            self.slots.record_generated(running, 1)
            if broken and index >= len(events) // 2:
                await asgi.end_stream(send)  # cut mid-answer: no finish, usage or [DONE]
                return
            if chunk is not None:
                await asgi.send_event(send, _compact(shapes.chunk(chunk[0], reasoning=chunk[1])))
        if answer.tool_calls:
            calls = tool_calls_json(shapes.rid, answer)
            await asgi.send_event(send, _compact(shapes.chunk(None, tool_calls=calls)))
        await asgi.send_event(
            send, _compact(shapes.chunk(None, finish_reason=answer.finish_reason))
        )
        if shapes.request.include_usage:
            usage = shapes.usage_chunk(
                prompt_tokens=prompt_tokens, completion_tokens=answer.completion_tokens
            )
            await asgi.send_event(send, _compact(usage))
        await asgi.send_event(send, "[DONE]")
        await asgi.end_stream(send)

    def _output(self, request: GenerationRequest, max_tokens: int | None) -> ChatOutput:
        """The parsed answer: the deterministic words (or a known answer), reasoning first
        when thinking, a tool call when tools are offered, as V4 writes and SGLang parses.
        ``max_tokens`` counts every generated token, reasoning included, as in SGLang."""
        faults = self.config.sim.faults
        salt = secrets.token_hex(4) if request.sampled or "nondeterministic" in faults else ""
        answer = answer_for(
            request.prompt + salt,
            max_tokens=max_tokens,
            answer_tokens=self.config.sim.answer_tokens,
            ignore_eos=request.ignore_eos,
        )
        chat = request.kind == "chat"
        known = known_pieces(request.prompt) if chat else None
        if known is not None and salt:  # sampling varies even a known answer
            # Four salted words: two samples then differ but for a (1/|VOCABULARY|)^4 chance;
            # one word made the acceptance's "nondeterministic" fault fail to show ~1 in 64.
            known = [*known, *answer.pieces[:4]]
        if known is None and not (chat and (request.thinking or request.tool)):
            return parse_output(
                answer.pieces,
                thinking=False,
                parsers=self._parsers,
                finish_reason=answer.finish_reason,
            )
        reasoning = answer_for(
            "reasoning:" + request.prompt + salt, max_tokens=8, answer_tokens=8
        ).pieces
        raw = raw_pieces(
            answer=answer.pieces if known is None else known,
            reasoning=reasoning,
            thinking=request.thinking,
            tool=request.tool,
            faults=faults,
        )
        fitted, finish = fit_length(
            raw, filler=answer.pieces, max_tokens=max_tokens, ignore_eos=request.ignore_eos
        )
        return parse_output(
            fitted, thinking=request.thinking, parsers=self._parsers, finish_reason=finish
        )

    def _record(
        self, request: GenerationRequest, answer: ChatOutput, prompt_tokens: int, timing: _Timing
    ) -> None:
        finished = time.monotonic()
        first = timing.first_token if timing.first_token is not None else finished
        completion = answer.completion_tokens
        self.metrics.observe_request(
            streaming=request.stream,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion,
            ttft_seconds=first - timing.started,
            e2e_seconds=finished - timing.started,
            inter_token_seconds=(finished - first) / max(1, completion - 1),
        )
        self._on_request_done()


def _stream_events(output: ChatOutput) -> list[tuple[str | None, str | None] | None]:
    """One entry per token: (content, reasoning) to send, or None for a token nothing
    shows (``</think>``, raw tool-call markup the parser holds back)."""
    hidden = output.completion_tokens - len(output.reasoning) - len(output.content)
    return [
        *((None, piece) for piece in output.reasoning),
        *([None] * max(0, hidden)),
        *((piece, None) for piece in output.content),
    ]
