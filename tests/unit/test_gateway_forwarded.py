"""Forwarded identity (issue 29 item 1): a front end's key names its end users; nobody else.

The rule itself by table (ForwardedUsers.resolve: the hostile names, the trust only on a
marked key, the bound on names), then the real gateway over sockets in front of a stand-in
engine that records every header it receives: each named user has their own policy,
budget and usage row, the front end's own limits cap the sum of its users, and no
X-OpenWebUI-* header (nor the configured one) reaches the engine, whichever key sent it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkllm.gateway.app import build_gateway_app
from sparkllm.gateway.forwarded import (
    CODE_INVALID_FORWARDED_USER,
    CODE_TOO_MANY_FORWARDED_USERS,
    ForwardedUsers,
    Identity,
)
from sparkllm.gateway.governance.policy import Policy
from sparkllm.gateway.replies import ErrorReply
from tests.unit.gateway_fixtures import (
    MODEL,
    gateway_config,
    read_request_body,
    running,
    train_tokenizer,
    write_keys,
    write_model_dir,
)

CHAT = "/v1/chat/completions"
EMAIL = "X-OpenWebUI-User-Email"
OPENWEBUI_HEADERS = {
    "X-OpenWebUI-User-Name": "Carol C",
    "X-OpenWebUI-User-Id": "8d0c5c1e-3f5e-4c39-9d6b-1b0b8d6f2f10",
    "X-OpenWebUI-User-Role": "admin",
}
POLICY = """
admins: [ops]
defaults: {requestsPerMinute: 100}
users:
  webui: {requestsPerMinute: 5}                   # the front end's total
  carol@example.com@webui: {requestsPerMinute: 1}  # one of its users, overridden
frontends:
  webui: {maxUsers: 3}                            # Open WebUI's e-mail header by default
  team: {userHeader: X-Team-User}
"""


def _scope(**headers: str) -> dict[str, Any]:
    return {"headers": [(k.lower().encode(), v.encode("latin-1")) for k, v in headers.items()]}


def _raw_scope(name: str, value: bytes) -> dict[str, Any]:
    return {"headers": [(name.lower().encode(), value)]}


@pytest.fixture
def policy() -> Policy:
    return Policy.parse(POLICY)


def test_only_a_front_ends_key_names_a_user(policy: Policy) -> None:
    forwarded = ForwardedUsers()
    named = forwarded.resolve("webui", _scope(**{EMAIL: "carol@example.com"}), policy)
    assert named == Identity("webui", "carol@example.com@webui", frontend="webui")
    # Any other key: the header is ignored (its own user), whatever it says.
    assert forwarded.resolve("alice", _scope(**{EMAIL: "bob"}), policy) == Identity(
        "alice", "alice"
    )
    # The front end without the header: its own request.
    assert forwarded.resolve("webui", _scope(), policy) == Identity("webui", "webui")
    # A configured header: only that one counts for that front end.
    team = forwarded.resolve("team", _scope(**{"X-Team-User": "u-17"}), policy)
    assert team == Identity("team", "u-17@team", frontend="team")
    assert forwarded.resolve("team", _scope(**{EMAIL: "x"}), policy) == Identity("team", "team")


def test_a_name_imitating_another_user_stays_the_front_ends(policy: Policy) -> None:
    """Key file names hold no '@' and the front end follows the last '@': a forwarded
    name is never a key's user nor another front end's."""
    forwarded = ForwardedUsers()
    for value, user in [
        ("alice", "alice@webui"),
        ("ops", "ops@webui"),  # an admin's name: not the admin
        ("u-17@team", "u-17@team@webui"),  # another front end's user
    ]:
        identity = forwarded.resolve("webui", _scope(**{EMAIL: value}), policy)
        assert isinstance(identity, Identity)
        assert identity.user == user
    assert "ops@webui" not in policy.admins


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (b"", "is empty"),
        (b"a" * 129, "is 129 bytes long"),
        (b"carol\x00", "outside that set"),
        (b"carol\r\nx-api-key: k", "outside that set"),
        (b"carol c", "outside that set"),
        (b"a|requests|ok", "outside that set"),  # the ledger's field separator
        ("c\u0430rol".encode(), "outside that set"),  # a Cyrillic look-alike
    ],
)
def test_a_bad_name_is_refused_never_the_front_ends_own(
    policy: Policy, value: bytes, says: str
) -> None:
    reply = ForwardedUsers().resolve("webui", _raw_scope(EMAIL, value), policy)
    assert isinstance(reply, ErrorReply)
    assert (reply.status, reply.code) == (400, CODE_INVALID_FORWARDED_USER)
    assert EMAIL in reply.message
    assert says in reply.message


def test_a_front_end_names_at_most_max_users(policy: Policy) -> None:
    forwarded = ForwardedUsers()
    for name in ("a", "b", "c"):
        assert isinstance(forwarded.resolve("webui", _scope(**{EMAIL: name}), policy), Identity)
    refused = forwarded.resolve("webui", _scope(**{EMAIL: "d"}), policy)
    assert isinstance(refused, ErrorReply)
    assert (refused.status, refused.code) == (403, CODE_TOO_MANY_FORWARDED_USERS)
    assert "frontends.webui.maxUsers" in refused.message
    assert isinstance(forwarded.resolve("webui", _scope(**{EMAIL: "b"}), policy), Identity)
    # The names are known while the front end holds a key, for the metric series.
    named = {"a@webui", "b@webui", "c@webui"}
    assert forwarded.known(["webui", "alice"]) == {"webui", "alice", *named}
    assert forwarded.known(["alice"]) == {"alice"}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("frontends: {webui: {userHeader: Authorization}}", "carries the request itself"),
        ("frontends: {webui: {userHeader: 'X Bad'}}", "should match pattern"),
        ("frontends: {webui: {maxUsers: 0}}", "greater than or equal to 1"),
        ("frontends: {webui: {header: X-A}}", "header"),
    ],
)
def test_a_bad_front_end_marking_is_a_policy_error(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=r"frontends\.webui") as error:
        Policy.parse(text)
    assert says in str(error.value)


class HeaderRecorder:
    """The engine's side: records each request's headers; answers with usage."""

    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []
        self.bodies: list[dict[str, Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        self.bodies.append(json.loads(await read_request_body(receive) or b"{}"))
        self.headers.append({k.decode().lower(): v.decode("latin-1") for k, v in scope["headers"]})
        usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
        body = json.dumps({"object": "chat.completion", "choices": [], "usage": usage}).encode()
        head = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": head})
        await send({"type": "http.response.body", "body": body})


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("model"), train_tokenizer())


@pytest.fixture
def engine() -> Iterator[tuple[HeaderRecorder, str]]:
    recorder = HeaderRecorder()
    with running(recorder, lifespan="off") as server:
        yield recorder, server.url


def _chat() -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}


def test_each_named_user_has_their_own_row_and_the_front_end_bounds_their_sum(
    model_dir: Path, tmp_path: Path, engine: tuple[HeaderRecorder, str]
) -> None:
    recorder, url = engine
    (tmp_path / "policy.yaml").write_text(POLICY)
    keys = write_keys(
        tmp_path / "keys", {"webui": "key-webui", "alice": "key-alice", "ops": "key-ops"}
    )
    config = gateway_config(
        model_dir=model_dir, keys_dir=keys, upstream_url=url,
        governance_policy_path=tmp_path / "policy.yaml",
    )  # fmt: skip
    app = build_gateway_app(config)
    now = time.time()
    mid_minute = now - now % 60 + 30  # one minute window for the whole test
    app.governor._clock = lambda: mid_minute

    def webui(email: str) -> dict[str, str]:
        return {"authorization": "Bearer key-webui", EMAIL: email, **OPENWEBUI_HEADERS}

    alice = {"authorization": "Bearer key-alice", EMAIL: "carol@example.com", **OPENWEBUI_HEADERS}
    with running(app) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        statuses = [
            client.post(CHAT, json=_chat(), headers=webui("carol@example.com")).status_code,
            # carol's own override: one a minute, and dave's budget is not carol's
            client.post(CHAT, json=_chat(), headers=webui("carol@example.com")).status_code,
            client.post(CHAT, json=_chat(), headers=webui("dave@example.com")).status_code,
            # a key that is no front end: the header is ignored, alice is alice
            client.post(CHAT, json=_chat(), headers=alice).status_code,
        ]
        assert statuses == [200, 429, 200, 200]
        # The front end's own limit (5 a minute) caps its users together: carol took a
        # reservation she was then refused (1 a minute), which the front end never saw.
        for email in ("dave@example.com", "erin@example.com", "erin@example.com"):
            assert client.post(CHAT, json=_chat(), headers=webui(email)).status_code == 200
        capped = client.post(CHAT, json=_chat(), headers=webui("dave@example.com"))
        assert capped.status_code == 429
        message = capped.json()["error"]["message"]
        assert "front end 'webui' has one budget for all its users" in message
        assert "requests_per_minute" in message
        # hostile names on the front end's key: refused, never its own budget
        bad = client.post(CHAT, json=_chat(), headers=webui(""))
        assert (bad.status_code, bad.json()["error"]["code"]) == (400, CODE_INVALID_FORWARDED_USER)
        everyone = client.get("/v1/usage", headers={"authorization": "Bearer key-ops"}).json()
        own = client.get("/v1/usage", headers=webui("dave@example.com")).json()
        metrics = app.metrics.exposition()[0].decode()  # a scrape: forgets unknown users
    rows = {row["user"]: row for row in everyone["data"]}
    assert {user: row["outcomes"] for user, row in rows.items()} == {
        "alice": {"ok": 1},
        "carol@example.com@webui": {"ok": 1},  # refused at admission: no row's request
        "dave@example.com@webui": {"ok": 2, "rate_limited": 1},
        "erin@example.com@webui": {"ok": 2},
        # the front end's total: the sum of what its users were served; dave's third was
        # admitted as his and refused by the front end's limit (his row says so)
        "webui": {"ok": 5},
    }
    assert rows["webui"]["output_tokens"] == 7 * 5
    assert [row["user"] for row in own["data"]] == ["dave@example.com@webui"]  # own rows
    # No X-OpenWebUI-* header ever reached the engine, from the front end or from alice.
    assert len(recorder.headers) == 6
    for headers in recorder.headers:
        assert not [name for name in headers if name.startswith("x-openwebui-")]
        assert headers["authorization"] != "Bearer key-webui"
    users = {
        sample.labels["user"]
        for family in text_string_to_metric_families(metrics)
        for sample in family.samples
        if family.name == "sparkllm_gateway_user_requests"
    }
    assert {"carol@example.com@webui", "dave@example.com@webui", "webui", "alice"} <= users


def test_the_front_ends_token_budget_lowers_and_refuses_its_users_together(
    model_dir: Path, tmp_path: Path, engine: tuple[HeaderRecorder, str]
) -> None:
    """Each user has 1000 tokens an hour, the front end 100 for all of them: the grant is
    the smaller, max_tokens lowered to it, and the front end's window runs out for all."""
    recorder, url = engine
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "minOutputTokens: 8\n"
        "defaults: {tokensPerHour: 1000}\n"
        "users: {webui: {tokensPerHour: 100}}\n"
        "frontends: {webui: {}}\n"
    )
    keys = write_keys(tmp_path / "keys", {"webui": "key-webui"})
    config = gateway_config(
        model_dir=model_dir, keys_dir=keys, upstream_url=url, governance_policy_path=policy
    )
    app = build_gateway_app(config)
    now = time.time()
    mid_hour = now - now % 3600 + 1800
    app.governor._clock = lambda: mid_hour

    def ask(email: str) -> httpx.Response:
        body = {**_chat(), "max_tokens": 500}
        headers = {"authorization": "Bearer key-webui", EMAIL: email}
        return client.post(CHAT, json=body, headers=headers)

    with running(app) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        assert ask("u0@example.com").status_code == 200
        first = recorder.bodies[-1]["max_tokens"]
        assert first < 100  # the front end's 100, not the user's 1000
        answers = [ask(f"u{i}@example.com") for i in range(1, 10)]  # a new user each time
        ledger = client.get("/v1/usage", headers={"authorization": "Bearer key-webui"}).json()
    statuses = [answer.status_code for answer in answers]
    assert 429 in statuses  # 18 tokens each: the front end's 100 run out, not any user's
    refused = answers[statuses.index(429)]
    message = refused.json()["error"]["message"]
    assert "front end 'webui' has one budget for all its users" in message
    assert "tokens_per_hour" in message
    (total,) = ledger["data"]  # the front end's own row: the sum of its users'
    assert total["user"] == "webui"
    assert total["input_tokens"] + total["output_tokens"] <= 100
    assert total["outcomes"] == {"ok": statuses.count(200) + 1}
