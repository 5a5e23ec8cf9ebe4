"""The router's own refusals, in words a client can read (smg 1.13.0's validation errors).

Why: smg checks a request against its own types before routing it and answers 400 in
OpenAI's shape, but with Rust's debug text as the message — ``temperature: Validation
error: range [{"max": Number(2.0), "value": Number(5.0), "min": Number(0.0)}]`` or
``Failed to deserialize the JSON body into the target type: max_tokens: invalid type:
string "x", expected u32 at line 1 column 32``. The status, ``param`` and ``code`` are
right and pass on; the message is rewritten into a sentence naming the field and what it
must be. Answers the engine wrote (smg names the worker that answered) are left alone.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from sparkllm.gateway import replies
from sparkllm.gateway.replies import ErrorReply

MAX_ERROR_BYTES: Final = 16 * 1024  # smg's refusals are a few hundred bytes
_RANGE = re.compile(r"(?P<field>[\w.\[\]]+): Validation error: range \[(?P<bounds>.*)\]", re.S)
_BOUND = re.compile(r'"(?P<name>min|max|value)": Number\((?P<number>[^)]*)\)')
_DESERIALIZE = re.compile(
    r"(?:Invalid JSON data: )?Failed to deserialize the JSON body into the target type: "
    r"(?:(?P<field>[\w.\[\]]+): )?(?P<detail>.*?)(?: at line \d+ column \d+)?$",
    re.S,
)
_RUST_TYPES: Final = {
    **dict.fromkeys(("u8", "u16", "u32", "u64", "usize"), "a non-negative integer"),
    **dict.fromkeys(("i8", "i16", "i32", "i64", "isize"), "an integer"),
    **dict.fromkeys(("f32", "f64"), "a number"),
    "a string": "a string",
    "a boolean": "a boolean",
}
# smg's Anthropic route (validator crate): "__all__: temperature: range: 0..1".
_VALIDATOR_RANGE = re.compile(
    r"(?:__all__: )?(?P<field>[\w.\[\]]+): range: (?P<low>[^.\s]*)\.\.=?(?P<high>\S*)"
)
_DEBUG_MARKS = ("Number(", "String(", "Bool(", "Some(", "Validation error:")


def readable(status: int, body: bytes) -> ErrorReply | None:
    """The router's refusal with a readable message, or None to pass ``body`` unchanged."""
    try:
        error: Any = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return None
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        return None
    rewritten = _sentence(error["message"])
    if rewritten is None:
        return None
    message, field = rewritten
    param, code = error.get("param"), error.get("code")
    return ErrorReply(
        status,
        message,
        str(error.get("type") or replies.INVALID_REQUEST),
        str(code or replies.CODE_INVALID_VALUE),
        param if isinstance(param, str) else field,
    )


def _sentence(message: str) -> tuple[str, str | None] | None:
    """``message`` rewritten and the field it names, or None when it has no Rust debug
    text to rewrite."""
    if (match := _VALIDATOR_RANGE.fullmatch(message.strip())) is not None:
        field, low, high = match["field"], match["low"], match["high"]
        limit = f"from {low} to {high}" if low and high else f"at least {low or high}"
        return f"'{field}' must be {limit}.", field
    if (match := _RANGE.fullmatch(message.strip())) is not None:
        bounds = {m["name"]: m["number"] for m in _BOUND.finditer(match["bounds"])}
        field = match["field"]
        low, high, got = bounds.get("min"), bounds.get("max"), bounds.get("value")
        if low is not None and high is not None:
            limit = f"from {low} to {high}"
        elif low is not None:
            limit = f"at least {low}"
        elif high is not None:
            limit = f"at most {high}"
        else:
            limit = "within its range"
        return f"'{field}' must be {limit}" + (f", got {got}." if got is not None else "."), field
    if (match := _DESERIALIZE.fullmatch(message.strip())) is not None:
        detail = re.sub(
            r"expected (u\d+|i\d+|f\d+|usize|isize)\b",
            lambda m: f"expected {_RUST_TYPES[m[1]]}",
            match["detail"],
        )
        field = match["field"]
        if field:
            return f"'{field}' is not valid: {detail}.", field
        return f"Invalid request: {detail}.", None
    if any(mark in message for mark in _DEBUG_MARKS):
        text = re.sub(r"(?:Number|String|Bool|Some)\(([^)]*)\)", r"\1", message)
        return text.replace("Validation error: ", ""), None
    return None
