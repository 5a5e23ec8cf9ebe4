"""The gateway's ASGI application: routes, the front door's rules, the relay.

A generation request is routed (404/405 here), then meets the front door's rules in the
order rules/pipeline.py lists them — API key (401, before the body is read), the
governance policy (503), body size (413), the admission decision (400 / 404, pure), the
user's budget (429 naming the limit) and a fair slot (429) — and is relayed upstream
(proxy.py) only if every rule passed. A request that fails a rule costs the engine
nothing. This module is the shell around them: it answers a refusal, gives back what the
rules took (the reservation, the slot) whatever happens, relays, and counts.

Routes: POST /v1/chat/completions, /v1/completions, /v1/messages and /v1/responses
(admitted), POST /v1/messages/count_tokens (decided, then answered here with the exact
count: it generates nothing), GET /v1/models and /v1/models/{id} (authenticated; an
alias is looked up as the served name, another id is a 404), GET /v1/responses/{id} and
POST /v1/responses/{id}/cancel (relayed for the response's owner only:
response_owners.py), GET /v1/usage (the ledger), GET /health (the gateway itself is
alive), GET /ready (the upstream answers its readiness probe). /health and /ready need
no key: the kubelet calls them. There is no /metrics here: its series carry user ids
with their tokens and refusals, so they are served only on the separate ``metrics_port``
(server.py), which no Service port and no exposure object routes.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import time

from sparkllm.errors import GovernanceStoreError
from sparkllm.gateway import deepseek_prompt, replies
from sparkllm.gateway.admission import Admission, AdmissionPolicy, Route
from sparkllm.gateway.asgi import (
    JSON_HEADERS,
    ClientDisconnectedError,
    Message,
    Receive,
    Scope,
    Send,
    header,
    send_bytes,
    send_reply,
)
from sparkllm.gateway.auth import ApiKeyStore
from sparkllm.gateway.chat_template import ChatTemplate
from sparkllm.gateway.config import GatewayConfig
from sparkllm.gateway.deepseek_prompt import DeepSeekV4Prompt
from sparkllm.gateway.forwarded import ForwardedUsers
from sparkllm.gateway.governance import usage
from sparkllm.gateway.governance.gate import Governor
from sparkllm.gateway.governance.meter import NOTHING_USED, UsageMeter
from sparkllm.gateway.metrics import GatewayMetrics, Outcome
from sparkllm.gateway.proxy import RelayResult, UpstreamClient
from sparkllm.gateway.replies import ErrorReply
from sparkllm.gateway.response_owners import ResponseOwners, claiming_send, owned_by, owners_for
from sparkllm.gateway.rules.context import Request, Stop
from sparkllm.gateway.rules.decide import Decide
from sparkllm.gateway.rules.pipeline import front_door, walk
from sparkllm.gateway.serving import ServingState
from sparkllm.gateway.tokens import TokenCounter

logger = logging.getLogger(__name__)

_GENERATION_ROUTES = {route.value: route for route in Route}
_GET_ROUTES = frozenset({"/v1/models", "/v1/usage", "/health", "/ready"})
_MODEL_PATH = "/v1/models/"
# SGLang's retrieve and cancel of a stored response (an id of the form resp_...).
_STORED_RESPONSE = re.compile(r"/v1/responses/(?P<id>[^/]+)(?P<cancel>/cancel)?")
_FORWARDED_HEADERS = (b"accept", b"x-request-id")


def _outcome_of(reply: ErrorReply) -> Outcome:
    if reply.code == replies.CODE_CONTEXT_LENGTH:
        return Outcome.REJECTED_TOO_LONG
    if reply.status == 401:
        return Outcome.UNAUTHORIZED
    if reply.status == 429:
        return Outcome.RATE_LIMITED
    return Outcome.UPSTREAM_ERROR if reply.status >= 500 else Outcome.BAD_REQUEST


def _relay_outcome(result: RelayResult) -> Outcome:
    """How a relayed request ended. A 4xx the router or engine answered is the client's
    mistake (a field out of range, a prompt over the window), counted as such so that it
    never pages an operator; 401/403 there are the gateway's own key being refused, a
    deployment fault. No replica serving is its own outcome (no_replica_replies says why)."""
    if result.client_closed:
        return Outcome.CLIENT_CLOSED
    if result.no_replica:
        return Outcome.NO_REPLICA
    status = result.status
    if result.upstream_answered and status < 400 and result.complete:
        return Outcome.OK
    if result.upstream_answered and 400 <= status < 500 and status not in (401, 403):
        return Outcome.RATE_LIMITED if status == 429 else Outcome.BAD_REQUEST
    return Outcome.UPSTREAM_ERROR


class GatewayApp:
    """The ASGI callable; build it with ``build_gateway_app`` (which does the I/O)."""

    def __init__(
        self,
        *,
        config: GatewayConfig,
        admission: Admission,
        keys: ApiKeyStore,
        governor: Governor,
        upstream: UpstreamClient,
        metrics: GatewayMetrics,
        serving: ServingState | None = None,
        owners: ResponseOwners | None = None,
    ) -> None:
        self.config = config
        # Who may retrieve or cancel which stored response (response_owners.py).
        self.owners = owners_for(governor.store) if owners is None else owners
        # Why no replica serves, when the router says none does (serving.py).
        self.serving = serving or ServingState(
            model=config.served_model_name, namespace=None, name=None
        )
        self.admission = admission
        self.keys = keys
        self.governor, self.limiter = governor, governor.limiter
        self.upstream = upstream
        self.metrics = metrics
        # The end users front ends named (forwarded.py): their series are kept too.
        self.forwarded = ForwardedUsers()
        metrics.watch_limiter(governor.limiter, users=lambda: self.forwarded.known(keys.users))
        self.rules = front_door(
            keys=keys,
            governor=governor,
            admission=admission,
            max_body_bytes=config.max_body_bytes,
            forwarded=self.forwarded,
        )
        # A token count takes no budget and no slot: it is answered here, costing the
        # engine nothing (the rules up to the admission decision).
        decide = next(i for i, rule in enumerate(self.rules) if isinstance(rule, Decide))
        self.counting_rules = self.rules[: decide + 1]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._serve_http(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._serve_lifespan(receive, send)

    async def _serve_lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.upstream.aclose()
                await self.serving.aclose()
                await self.governor.store.aclose()  # a shared store's leases stop here
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _serve_http(self, scope: Scope, receive: Receive, send: Send) -> None:
        method, path = str(scope.get("method", "")), str(scope.get("path", ""))
        route = _GENERATION_ROUTES.get(path)
        response_started = False

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            response_started = True
            await send(message)

        stored = _STORED_RESPONSE.fullmatch(path)
        try:
            if route is not None and method == "POST":
                await self._serve_generation(route, scope, receive, tracking_send)
            elif path in _GET_ROUTES and method == "GET":
                await self._serve_get(path, scope, receive, tracking_send)
            elif path.startswith(_MODEL_PATH) and method == "GET":
                model = path.removeprefix(_MODEL_PATH)
                await self._serve_model(model, scope, receive, tracking_send)
            elif stored is not None and method == ("POST" if stored["cancel"] else "GET"):
                await self._serve_stored(stored, method, scope, receive, tracking_send)
            elif route is not None or path in _GET_ROUTES or path.startswith(_MODEL_PATH):
                allow = "POST" if route is not None else "GET"
                await send_reply(send, replies.method_not_allowed(method, path, allow=allow))
            elif stored is not None:
                allow = "POST" if stored["cancel"] else "GET"
                await send_reply(send, replies.method_not_allowed(method, path, allow=allow))
            else:
                await send_reply(send, replies.unknown_url(method, path))
        except ClientDisconnectedError:
            self.metrics.count_request(path, Outcome.CLIENT_CLOSED)
        except Exception:
            # A gateway bug: log it, and answer in OpenAI's format if nothing was sent yet.
            logger.exception("request failed inside the gateway method=%s path=%s", method, path)
            self.metrics.count_request(path, Outcome.UPSTREAM_ERROR)
            if response_started:
                raise
            await send_reply(send, replies.internal_error())

    async def _serve_get(self, path: str, scope: Scope, receive: Receive, send: Send) -> None:
        if path == "/health":
            await send_bytes(send, status=200, body=b'{"status":"ok"}', headers=JSON_HEADERS)
        elif path == "/ready":
            problem = await self.upstream.probe(self.config.upstream_ready_path)
            body, status = (
                (b'{"status":"ready"}', 200)
                if problem is None
                else (b'{"status":"unavailable"}', 503)
            )
            if problem is not None:
                logger.warning("not ready: upstream probe failed problem=%s", problem)
            await send_bytes(send, status=status, body=body, headers=JSON_HEADERS)
        else:  # /v1/models: authenticated pass-through; /v1/usage: the ledger
            user = await self._authenticated(path, scope, send)
            if user is None:
                return
            if path == "/v1/usage":
                await self._serve_usage(scope, send, user=user)
                return
            await self._relay_plain("GET", path, scope, receive, send)

    async def _relay_plain(
        self,
        method: str,
        path: str,
        scope: Scope,
        receive: Receive,
        send: Send,
        *,
        counted_as: str | None = None,
    ) -> None:
        """Relay a request that generates nothing (an authenticated caller's), and count it
        (under ``counted_as``, default its path)."""
        result = await self.upstream.relay(
            method=method,
            path=path,
            body=b"",
            headers=self._forwarded(scope),
            send=send,
            receive=receive,
        )
        self.metrics.count_request(counted_as or path, _relay_outcome(result))

    async def _authenticated(self, path: str, scope: Scope, send: Send) -> str | None:
        """The caller's user id (a front end's end user, if it names one: forwarded.py),
        or None once the 401 (or the forwarded name's 400 / 403) is sent."""
        key = self.keys.authenticate(header(scope, b"authorization"), header(scope, b"x-api-key"))
        if isinstance(key, ErrorReply):
            await send_reply(send, key)
            self.metrics.count_request(path, Outcome.UNAUTHORIZED)
            return None
        policy = self.governor.policy()
        if isinstance(policy, ErrorReply):  # no policy, no front ends: the key's own
            return key
        identity = self.forwarded.resolve(key, scope, policy)
        if isinstance(identity, ErrorReply):
            await send_reply(send, identity)
            self.metrics.count_request(path, Outcome.BAD_REQUEST)
            return None
        return identity.user

    async def _serve_model(self, model: str, scope: Scope, receive: Receive, send: Send) -> None:
        """GET /v1/models/{id}: the served model's card (an alias names it too), else 404.

        Answered from the router's card of the served name (smg answers it itself)."""
        if await self._authenticated("/v1/models", scope, send) is None:
            return
        served = self.config.served_model_name
        if model != served and model not in self.config.model_aliases:
            await send_reply(send, replies.model_not_found(model))
            self.metrics.count_request("/v1/models", Outcome.BAD_REQUEST)
            return
        await self._relay_plain(
            "GET", _MODEL_PATH + served, scope, receive, send, counted_as="/v1/models"
        )

    async def _serve_stored(
        self, stored: re.Match[str], method: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """A stored response's retrieve or cancel: relayed (without a body) for its owner
        only; any other id gets the 404 an unknown id gets, after the same look-up.
        Counted under /v1/responses (a per-id path would be a label per response)."""
        response_id, path = stored["id"], stored.group(0)
        user = await self._authenticated("/v1/responses", scope, send)
        if user is None:
            return
        try:
            mine = await owned_by(self.owners, response_id, user)
        except GovernanceStoreError as exc:
            await send_reply(send, replies.upstream_unavailable(str(exc)))
            self.metrics.count_request("/v1/responses", Outcome.UPSTREAM_ERROR)
            return
        if not mine:
            await send_reply(send, replies.response_not_found(response_id))
            self.metrics.count_request("/v1/responses", Outcome.BAD_REQUEST)
            return
        await self._relay_plain(method, path, scope, receive, send, counted_as="/v1/responses")

    async def _serve_generation(
        self, route: Route, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """The front door's rules in order, then the relay; what they took is given back."""
        request = Request(route, scope, receive, arrived=time.perf_counter())
        counting = route is Route.COUNT_TOKENS
        try:
            verdict = await walk(self.counting_rules if counting else self.rules, request)
            if verdict is None and counting:
                await self._answer_count(request, send)
            elif verdict is None:
                await self._relay(request, send)
            elif verdict is Stop.CLIENT_LEFT:
                self.metrics.count_request(route.value, Outcome.CLIENT_CLOSED)
            else:
                if request.decision is None and request.deciding is not None:
                    self.metrics.admission_seconds.observe(request.deciding)  # refused by it
                await self._refuse(route, send, verdict, user_id=request.user)
        finally:
            if request.granted is not None:
                await self.governor.finish(
                    request.granted, used=request.used, outcome=request.outcome.value
                )
            if request.frontend_granted is not None:  # the front end's total: the same use
                await self.governor.finish(
                    request.frontend_granted, used=request.used, outcome=request.outcome.value
                )
            if request.decision is not None:
                # Observed after the exchange, not before it: off the time to the first token.
                assert request.deciding is not None  # an admitted request was decided
                self.metrics.admission_seconds.observe(request.deciding)
                self.metrics.observe_input_tokens(
                    request.decision.input_tokens, exact=request.decision.input_tokens_exact
                )

    async def _answer_count(self, request: Request, send: Send) -> None:
        """POST /v1/messages/count_tokens: the exact count, as SGLang answers it."""
        assert request.decision is not None
        body = json.dumps({"input_tokens": request.decision.input_tokens}).encode()
        await send_bytes(send, status=200, body=body, headers=JSON_HEADERS)
        self.metrics.count_request(request.route.value, Outcome.OK)

    async def _relay(self, request: Request, send: Send) -> None:
        """Relay an admitted request holding a slot; charge what its answer used."""
        route, decision, granted, holder = (
            request.route,
            request.decision,
            request.granted,
            request.holder,
        )
        assert decision is not None
        assert granted is not None
        assert holder is not None
        if route is Route.RESPONSES:  # its owner alone may retrieve or cancel it
            assert request.user is not None
            send = claiming_send(send, self.owners, user=request.user)
        meter = UsageMeter(send)
        request.outcome, request.used = Outcome.UPSTREAM_ERROR, granted.reserved  # until measured
        try:
            result = await self.upstream.relay(
                method="POST",
                path=route.value,
                body=granted.body,
                headers=[(b"content-type", b"application/json"), *self._forwarded(request.scope)],
                send=meter.send,
                receive=request.receive,
                no_worker=self.metrics.counting_no_replica(self.serving.reply),
                hold=self.serving.holding(),  # while a replica is expected (serving.py)
                # A non-streamed answer is made whole before its first byte: read it
                # even for a client that left, to charge what the engine produced.
                drain=not decision.stream,
            )
        finally:
            await self.governor.release(holder)
        request.outcome = self._done(request, result)
        if result.held_seconds:
            self._held(request, result)
        if not result.engine_saw:  # held, and the client left: no engine had it
            request.used = NOTHING_USED
            return
        closed, answered = result.client_closed, result.upstream_answered
        request.used = await self.governor.measure(
            meter, granted, answered=answered, client_closed=closed
        )

    def _held(self, request: Request, result: RelayResult) -> None:
        """Count and log a request held while no replica served."""
        if result.client_closed:
            ended = "client_closed"
        else:
            ended = "refused" if result.no_replica else "served"
        self.metrics.held.labels(ended).observe(result.held_seconds)
        logger.info(
            "request held while no replica served route=%s user=%s seconds=%.3f ended=%s",
            request.route.value,
            request.user,
            result.held_seconds,
            ended,
        )

    def _done(self, request: Request, result: RelayResult) -> Outcome:
        """Count and log a relayed request; its outcome."""
        route, decision, arrived = request.route, request.decision, request.arrived
        assert decision is not None
        outcome = _relay_outcome(result)
        finished = time.perf_counter()
        self.metrics.count_request(route.value, outcome)
        first_byte = None if result.first_byte_at is None else result.first_byte_at - arrived
        self.metrics.observe_latency(route.value, first_byte=first_byte, total=finished - arrived)
        logger.info(
            "request done route=%s user=%s outcome=%s status=%d input_tokens=%d%s "
            "max_output_tokens=%d stream=%s seconds=%.3f worker=%s",
            route.value,
            request.user,
            outcome.value,
            result.status,
            decision.input_tokens,
            "" if decision.input_tokens_exact else "(bound)",
            decision.max_output_tokens,
            decision.stream,
            finished - arrived,
            result.worker,
        )
        return outcome

    async def _serve_usage(self, scope: Scope, send: Send, *, user: str) -> None:
        reply = await usage.answer(self.governor, query=scope.get("query_string"), user=user)
        if isinstance(reply, ErrorReply):
            await send_reply(send, reply)
        else:
            await send_bytes(send, status=200, body=reply, headers=JSON_HEADERS)

    async def _refuse(
        self, route: Route, send: Send, reply: ErrorReply, *, user_id: str | None
    ) -> None:
        await send_reply(send, reply)
        outcome = _outcome_of(reply)
        self.metrics.count_request(route.value, outcome)
        logger.info(
            "request refused route=%s user=%s outcome=%s status=%d code=%s",
            route.value,
            user_id,
            outcome.value,
            reply.status,
            reply.code,
        )

    @staticmethod
    def _forwarded(scope: Scope) -> list[tuple[bytes, bytes]]:
        return [
            (name, value)
            for name in _FORWARDED_HEADERS
            if (value := header(scope, name)) is not None and len(value) <= 256
        ]


def _chat_prompt(config: GatewayConfig) -> ChatTemplate | DeepSeekV4Prompt:
    """What turns a chat into the prompt, chosen as the engine chooses (SGLang 0.5.23)."""
    encoding = deepseek_prompt.chat_encoding(config.tokenizer_dir, config.tool_call_parser)
    if encoding == deepseek_prompt.DSV4:
        logger.info("DeepSeek V4: prompts are counted with deepseek-recipe, as SGLang does")
        return DeepSeekV4Prompt.from_dir(config.tokenizer_dir)
    if encoding is not None:
        logger.warning(
            "SGLang encodes this model's chats with its own encoder (%s), not the chat "
            "template: counts made with the template may differ by a few tokens",
            encoding,
        )
    return ChatTemplate.load(
        tokenizer_dir=config.tokenizer_dir, override_path=config.chat_template_path
    )


def build_gateway_app(config: GatewayConfig) -> GatewayApp:
    """Load tokenizer, template and keys, and assemble the app; GatewayError if unusable."""
    counter = TokenCounter.from_dir(config.tokenizer_dir)
    template = _chat_prompt(config)
    if not counter.byte_level:
        logger.warning("tokenizer is not a plain byte-level BPE: every prompt is tokenised")
    key = config.upstream_api_key.get_secret_value() if config.upstream_api_key else None
    metrics = GatewayMetrics()
    upstream = UpstreamClient(
        base_url=config.upstream_url,
        api_key=key,
        connect_timeout=config.upstream_connect_timeout_seconds,
        read_timeout=config.upstream_read_timeout_seconds,
        max_connections=config.max_concurrent_requests + 8,
    )
    return GatewayApp(
        config=config,
        admission=Admission(
            policy=AdmissionPolicy.from_config(config), counter=counter, template=template
        ),
        keys=ApiKeyStore(config.api_keys_dir),
        governor=Governor.from_config(
            config,
            metrics=metrics.users,
            count_output=functools.partial(counter.count, add_special_tokens=False),
        ),
        upstream=upstream,
        metrics=metrics,
        serving=ServingState(
            model=config.served_model_name,
            namespace=config.cluster_namespace,
            name=config.cluster_name,
            hold_seconds=config.no_replica_hold_seconds,
            probe=functools.partial(upstream.probe, config.upstream_ready_path),
        ),
    )
