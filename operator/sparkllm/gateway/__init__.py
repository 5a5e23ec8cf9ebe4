"""The admission gateway: the one user entry point, in front of the SGLang router (smg).

It authenticates users by API key, caps input at ``max_input_tokens`` counted exactly
with the model's tokenizer and chat template, fits ``max_tokens`` into the context
window, limits concurrency with a bounded queue, answers every refusal in OpenAI's error
format, streams the router's answers through, and exports ``sparkllm_gateway_*`` metrics.
docs/gateway.md describes behaviour, configuration and errors.

Modules, along a request's path::

    config.py         GatewayConfig (env SPARKLLM_GATEWAY_* and flags; the spec's
                      settings from gateway_settings.SETTINGS)
    app.py            ASGI routes, the shell around the rules: refuse, relay, settle
    rules/            the front door's rules, one unit each; pipeline.py lists them in
                      order (request rules: key, policy, body size, decide, budget, slot;
                      payload rules: the admission decision's)
    auth.py           user keys from a Secret directory, constant-time compare
    admission.py      the pure forward-or-refuse decision (walks the payload rules)
      protocols.py    Messages / Responses bodies as the chat SGLang makes of them
      validation.py   body shape checks (400 naming the field)
      chat_template.py  the model's Jinja chat template, as HF/SGLang render it
      tokens.py       exact token counts and the byte bound
    governance/       per-user policy, budgets, the fair queue's slots, the ledger
    limits.py         concurrency slots, fair queue by user, 429
    proxy.py          the relay to the router: streaming, disconnects, 502/503/504
      router_errors.py  the router's own 400s made readable (no Rust debug text)
      response_owners.py  who may retrieve/cancel a stored response (its creator only)
      upstream.py     keep-alive HTTP/1.1 pool to the router (httptools parsing)
    metrics.py        Prometheus families
    replies.py        OpenAI-style error bodies
    asgi.py           typed ASGI primitives (body reading, replies)
    server.py         main(): uvicorn (httptools protocol)
"""

from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the gateway (see ``server.main``); ``argv`` defaults to ``sys.argv[1:]``.

    Imported lazily so that ``sparkllm.gateway.config`` (which the operator uses to
    render the gateway's environment) does not pull in uvicorn, httptools and tokenizers.
    """
    from sparkllm.gateway.server import main as serve

    return serve(argv)
