"""Payload rule ``json_body``: the body is one JSON object (400 ``invalid_json`` /
``invalid_type`` otherwise).

First, because every later rule reads the parsed fields. Strict JSON (no NaN or
Infinity), decoded as ``json.loads`` decodes bytes (validation.parse_json_object).
"""

from __future__ import annotations

from sparkllm.gateway import validation
from sparkllm.gateway.replies import ErrorReply
from sparkllm.gateway.rules.context import Draft


def json_body(draft: Draft) -> ErrorReply | None:
    """Parse the body into ``draft.payload``."""
    draft.payload = validation.parse_json_object(draft.body)
    return None
