"""The gateway's own answers: OpenAI-style error bodies with their status codes.

Why one module: every rejection the front door makes (auth, body size, validation, token
cap, queue, upstream failure) must look the same to clients, because OpenAI SDKs and
tools branch on the HTTP status and on ``error.code``. Building the body in one place keeps
the vocabulary (codes below, documented in docs/gateway.md) consistent, and the bodies
are serialised once, here, with the stdlib ``json``.

``RequestRejectedError`` is the gateway's internal control-flow exception: validation code deep
inside admission raises it with the reply to send, and ``Admission.decide`` turns it back
into a value. It never leaves the gateway package, so it is not part of
``sparkllm.errors`` (which is for failures of the gateway itself, see ``GatewayError``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

INVALID_REQUEST = "invalid_request_error"
RATE_LIMIT = "rate_limit_error"
SERVER_ERROR = "server_error"

# error.code values the gateway emits (the upstream's own codes pass through untouched).
CODE_INVALID_JSON = "invalid_json"
CODE_INVALID_TYPE = "invalid_type"
CODE_INVALID_VALUE = "invalid_value"
CODE_MISSING_PARAMETER = "missing_required_parameter"
CODE_CONTEXT_LENGTH = "context_length_exceeded"
CODE_MODEL_NOT_FOUND = "model_not_found"
CODE_NOT_FOUND = "not_found"  # a stored response (the router's code)
CODE_REQUEST_TOO_LARGE = "request_too_large"
CODE_MISSING_API_KEY = "missing_api_key"
CODE_INVALID_API_KEY = "invalid_api_key"
CODE_CONFLICTING_API_KEYS = "conflicting_api_keys"
CODE_RATE_LIMITED = "rate_limit_exceeded"
CODE_UNKNOWN_URL = "unknown_url"
CODE_METHOD_NOT_ALLOWED = "method_not_allowed"
CODE_UPSTREAM_UNAVAILABLE = "upstream_unavailable"
CODE_UPSTREAM_FAILED = "upstream_failed"
CODE_UPSTREAM_TIMEOUT = "upstream_timeout"
CODE_INTERNAL = "internal_error"

JSON_CONTENT_TYPE = (b"content-type", b"application/json")


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """One error response: ``{"error": {message, type, param, code}}`` plus its status."""

    status: int
    message: str
    type: str
    code: str
    param: str | None = None
    retry_after_seconds: int | None = None
    allow: str | None = None
    # The wait to the millisecond (retry-after-ms, which OpenAI's SDKs read first), and
    # headers the reply carries besides (x-ratelimit-*).
    retry_after_ms: int | None = None
    extra_headers: tuple[tuple[bytes, bytes], ...] = ()

    def body(self) -> bytes:
        """The JSON body, exactly as OpenAI shapes it."""
        error = {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
        return json.dumps({"error": error}, ensure_ascii=False).encode("utf-8")

    def headers(self) -> list[tuple[bytes, bytes]]:
        """Response headers: content type, and Retry-After / Allow when they apply."""
        headers = [JSON_CONTENT_TYPE]
        if self.retry_after_seconds is not None:
            headers.append((b"retry-after", str(self.retry_after_seconds).encode("ascii")))
        if self.retry_after_ms is not None:
            headers.append((b"retry-after-ms", str(self.retry_after_ms).encode("ascii")))
        headers.extend(self.extra_headers)
        if self.allow is not None:
            headers.append((b"allow", self.allow.encode("ascii")))
        if self.status == 401:
            headers.append((b"www-authenticate", b'Bearer realm="sparkllm"'))
        return headers


class RequestRejectedError(Exception):
    """Raised inside admission with the reply to send; caught by ``Admission.decide``."""

    def __init__(self, reply: ErrorReply) -> None:
        super().__init__(reply.message)
        self.reply = reply


def invalid_request(
    message: str, *, param: str | None, code: str = CODE_INVALID_VALUE
) -> ErrorReply:
    """400: the request is malformed; ``param`` names the offending field."""
    return ErrorReply(400, message, INVALID_REQUEST, code, param)


def context_length_exceeded(message: str, *, param: str) -> ErrorReply:
    """400: input over the cap, or input + requested output over the window."""
    return ErrorReply(400, message, INVALID_REQUEST, CODE_CONTEXT_LENGTH, param)


def model_not_found(model: str) -> ErrorReply:
    """404 for a model name this deployment does not serve (OpenAI's wording)."""
    message = f"The model `{model}` does not exist or you do not have access to it."
    return ErrorReply(404, message, INVALID_REQUEST, CODE_MODEL_NOT_FOUND, "model")


def response_not_found(response_id: str) -> ErrorReply:
    """A stored response the caller may not see: the router's words for an unknown id."""
    return ErrorReply(
        404, f"No response found with id '{response_id}'", INVALID_REQUEST, CODE_NOT_FOUND
    )


def request_too_large(limit_bytes: int) -> ErrorReply:
    """413: the body is over ``max_body_bytes``."""
    message = f"Request body is larger than this gateway accepts ({limit_bytes} bytes)."
    return ErrorReply(413, message, INVALID_REQUEST, CODE_REQUEST_TOO_LARGE)


def missing_api_key() -> ErrorReply:
    """401: neither ``Authorization: Bearer`` nor ``x-api-key``."""
    message = (
        "You didn't provide an API key. Provide it in an Authorization header using "
        "Bearer auth (Authorization: Bearer YOUR_KEY) or in an x-api-key header."
    )
    return ErrorReply(401, message, INVALID_REQUEST, CODE_MISSING_API_KEY)


def conflicting_api_keys() -> ErrorReply:
    """401: ``Authorization: Bearer`` and ``x-api-key`` carry different keys (which one
    was meant is not guessed; neither key is echoed)."""
    message = (
        "The Authorization header and the x-api-key header carry different API keys: "
        "send one key, in either header."
    )
    return ErrorReply(401, message, INVALID_REQUEST, CODE_CONFLICTING_API_KEYS)


def invalid_api_key() -> ErrorReply:
    """401: a key was presented and matches no user (the key itself is never echoed)."""
    message = "Incorrect API key provided."
    return ErrorReply(401, message, INVALID_REQUEST, CODE_INVALID_API_KEY)


def rate_limited(*, retry_after_seconds: int, queue_full: bool) -> ErrorReply:
    """429 with Retry-After: the queue was full, or the wait in it timed out."""
    why = "the request queue is full" if queue_full else "no slot freed up in time"
    message = f"Too many concurrent requests: {why}. Retry after {retry_after_seconds} s."
    return ErrorReply(
        429, message, RATE_LIMIT, CODE_RATE_LIMITED, retry_after_seconds=retry_after_seconds
    )


def unknown_url(method: str, path: str) -> ErrorReply:
    """404 for a path the gateway does not serve."""
    message = f"Unknown request URL: {method} {path}."
    return ErrorReply(404, message, INVALID_REQUEST, CODE_UNKNOWN_URL)


def method_not_allowed(method: str, path: str, *, allow: str) -> ErrorReply:
    """405 for a known path with the wrong method."""
    message = f"Method {method} is not allowed on {path}; use {allow}."
    return ErrorReply(405, message, INVALID_REQUEST, CODE_METHOD_NOT_ALLOWED, allow=allow)


def upstream_unavailable(detail: str) -> ErrorReply:
    """503: the router could not be connected to."""
    message = f"The model server is unavailable: {detail}."
    return ErrorReply(503, message, SERVER_ERROR, CODE_UPSTREAM_UNAVAILABLE)


def upstream_failed(detail: str) -> ErrorReply:
    """502: the router was reached but the exchange broke before a response."""
    message = f"The model server failed to answer: {detail}."
    return ErrorReply(502, message, SERVER_ERROR, CODE_UPSTREAM_FAILED)


def upstream_timeout(detail: str) -> ErrorReply:
    """504: the router accepted the request but sent no response in time."""
    message = f"The model server did not answer in time: {detail}."
    return ErrorReply(504, message, SERVER_ERROR, CODE_UPSTREAM_TIMEOUT)


def internal_error() -> ErrorReply:
    """500: a bug in the gateway (logged with its traceback; never expected)."""
    message = "The gateway failed to process the request."
    return ErrorReply(500, message, SERVER_ERROR, CODE_INTERNAL)
