"""The governance policy ConfigMap end to end: applied and changed without a gateway restart.

The real operator renders ``spec.admission.governance.policyConfigMapRef`` as an optional
ConfigMap volume of the gateway pod; on the dev cluster ``GatewayPods`` plays the kubelet
(the ConfigMap written in the kubelet's ``..data`` layout, re-written when it changes)
and the real gateway re-reads the file. One gateway pod, one admission process, shown in
order:

1. no ConfigMap yet: every generation request is 503 ``governance_policy_unavailable``
   naming the missing file (fail closed);
2. a ConfigMap with invalid YAML: the 503 names the YAML problem;
3. a valid policy (bob: 1 request per minute): bob's second request is 429 naming
   ``requests_per_minute`` while alice is served;
4. an edit lifting bob's limit: bob is served again in the same UTC minute, and carol's
   new ``tokensPerHour`` lowers her ``max_tokens``, then refuses naming ``tokens_per_hour``;
5. a broken edit: the gateway logs it and keeps the last good policy.

Throughout, the gateway pod's uid, the admission container's restart count (0) and its
one process start in the log show that nothing restarted.
"""

from __future__ import annotations

import base64
import json
import secrets
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from sparkllm_dev.devcluster import DevCluster, wait_until
from sparkllm_dev.testing import OperatorProcess
from tests.e2e.serving import USERS_SECRET, Serving, serve
from tests.unit.gateway_fixtures import MODEL

NAME = "policy"
GROUPS = [["spark-a0", "spark-a1", "spark-a2"]]
POLICY = "llm-policy"
RELOAD_SECONDS = 30  # the harness syncs every 0.5 s, the gateway checks every 1 s
MINUTE_LEFT = 30  # steps 3 and 4 must fall in one UTC minute (the windows are aligned)
CAROL_TOKENS_PER_HOUR = 60
CAROL_ASKS = 100
BROKEN_YAML = "users: {bob: [\n"
LIMITED = "users:\n  bob: {requestsPerMinute: 1}\n"
LIFTED = (
    "users:\n  bob: {requestsPerMinute: 100}\n"
    f"  carol: {{tokensPerHour: {CAROL_TOKENS_PER_HOUR}}}\n"
)


def _chat(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4,
            **fields}  # fmt: skip


def _error(response: httpx.Response) -> tuple[str, str]:
    """(code, message) of an OpenAI-shaped error body."""
    error = response.json()["error"]
    return str(error["code"]), str(error["message"])


def _apply_policy(cluster: DevCluster, namespace: str, text: str) -> None:
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": POLICY},
                "data": {"policy.yaml": text}}  # fmt: skip
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))


def _add_users(cluster: DevCluster, namespace: str, users: Sequence[str]) -> dict[str, str]:
    keys = {user: secrets.token_urlsafe(24) for user in users}
    data = {user: base64.b64encode(key.encode()).decode() for user, key in keys.items()}
    patch = json.dumps({"data": data})
    cluster.kubectl("patch", "secret", USERS_SECRET, "-n", namespace, "-p", patch)
    return keys


def _minute_with_time_left(seconds: float) -> None:
    """Start with at least ``seconds`` left in the UTC minute (see ``one_minute``)."""
    left = 60 - time.time() % 60
    if left < seconds:
        time.sleep(left + 0.05)


def _minute() -> int:
    return int(time.time() // 60)


class _Client:
    """Posts chat requests as a user and keeps a line per distinct answer seen."""

    def __init__(self, serving: Serving, keys: dict[str, str]) -> None:
        self.url = f"{serving.gateway.admission_url}/v1/chat/completions"
        self.keys = keys
        self.seen: list[str] = []
        self._last = ""

    def ask(self, user: str, **fields: Any) -> httpx.Response:
        headers = {"authorization": f"Bearer {self.keys[user]}"}
        response = httpx.post(self.url, json=_chat(**fields), headers=headers, timeout=60)
        if response.status_code == 200:
            answer = f"usage {response.json()['usage']}"
        else:
            answer = f"{_error(response)} retry-after={response.headers.get('retry-after')}"
        line = f"{user}: {response.status_code} {answer}"
        if line != self._last:  # a wait's repeated answers are shown once
            self.seen.append(f"{time.strftime('%H:%M:%S', time.gmtime())} {line}")
            self._last = line
        return response

    def refused_with(self, user: str, status: int, words: str) -> httpx.Response | None:
        response = self.ask(user)
        if response.status_code == status and words in _error(response)[1]:
            return response
        return None


def _admission_restarts(cluster: DevCluster, namespace: str, pod: str) -> int:
    status = cluster.kubectl_json("get", "pod", pod, "-n", namespace).get("status") or {}
    views = {c["name"]: c for c in status.get("containerStatuses") or []}
    return int(views["admission"].get("restartCount", 0))


def _assert_same_gateway(cluster: DevCluster, namespace: str, serving: Serving) -> None:
    gateway = serving.gateway
    assert [g.uid for g in serving.gateways.gateways()] == [gateway.uid]
    assert _admission_restarts(cluster, namespace, gateway.pod) == 0
    log = (gateway.log_dir / "admission.log").read_text()
    assert log.count("gateway pods: admission") == 1  # one process start, never restarted


def _reloaded(predicate: Callable[[], object], what: str) -> None:
    wait_until(predicate, timeout=RELOAD_SECONDS, interval=0.5, what=what)


def _keys_accepted(serving: Serving, keys: dict[str, str]) -> None:
    models = f"{serving.gateway.admission_url}/v1/models"
    for user, key in keys.items():
        auth = {"authorization": f"Bearer {key}"}
        _reloaded(partial(_answers_ok, models, auth), f"{user}'s key to be accepted")


def _answers_ok(url: str, headers: dict[str, str]) -> bool:
    return httpx.get(url, headers=headers, timeout=10).status_code == 200


def _fails_closed(cluster: DevCluster, namespace: str, client: _Client) -> None:
    """Steps 1 and 2: no ConfigMap, then invalid YAML: 503 naming each problem."""
    missing = client.ask("alice")
    assert missing.status_code == 503
    code, message = _error(missing)
    assert code == "governance_policy_unavailable"
    assert "not loaded" in message
    assert "No such file" in message
    _apply_policy(cluster, namespace, BROKEN_YAML)
    _reloaded(lambda: client.refused_with("alice", 503, "not valid YAML"), "a 503 naming the YAML")


def _limited(cluster: DevCluster, namespace: str, client: _Client) -> int:
    """Step 3: bob's second request in the minute is refused, alice is served."""
    _apply_policy(cluster, namespace, LIMITED)
    _reloaded(lambda: client.ask("alice").status_code == 200, "the policy to load")
    _minute_with_time_left(MINUTE_LEFT)
    assert client.ask("bob").status_code == 200
    limited = client.ask("bob")
    assert limited.status_code == 429
    code, message = _error(limited)
    assert code == "rate_limit_exceeded"
    assert "requests_per_minute" in message
    assert 1 <= int(limited.headers["retry-after"]) <= 60
    assert client.ask("alice").status_code == 200  # another user is served
    return _minute()


def _lifted(cluster: DevCluster, namespace: str, client: _Client, *, refused_in: int) -> None:
    """Step 4: the edit reaches the running gateway within the minute bob was refused in."""
    _apply_policy(cluster, namespace, LIFTED)
    _reloaded(lambda: client.ask("bob").status_code == 200, "bob's lifted limit")
    assert _minute() == refused_in, "the minute turned: the lift would prove nothing"
    lowered = client.ask("carol", max_tokens=CAROL_ASKS, ignore_eos=True)
    assert lowered.status_code == 200, lowered.text
    usage = lowered.json()["usage"]
    assert usage["completion_tokens"] < CAROL_ASKS  # max_tokens lowered to the budget
    assert usage["prompt_tokens"] + usage["completion_tokens"] <= CAROL_TOKENS_PER_HOUR
    spent = client.ask("carol", max_tokens=CAROL_ASKS, ignore_eos=True)
    assert spent.status_code == 429
    assert "tokens_per_hour" in _error(spent)[1]


def _broken_edit_keeps_the_policy(
    cluster: DevCluster, namespace: str, client: _Client, *, log: Path
) -> None:
    """Step 5: a broken edit is logged and the last good policy kept.

    The gateway checks the file on the request path, so each poll sends bob's request.
    """
    _apply_policy(cluster, namespace, BROKEN_YAML)

    statuses: list[int] = []

    def logged() -> bool:
        statuses.append(client.ask("bob").status_code)
        return "keeping the last good policy" in log.read_text()

    _reloaded(logged, "the broken edit to be logged")
    assert set(statuses) == {200}  # bob's lifted limit held throughout
    assert client.ask("bob").status_code == 200
    assert "tokens_per_hour" in _error(client.ask("carol"))[1]


@pytest.mark.cluster
def test_the_policy_configmap_applies_and_changes_without_a_gateway_restart(
    namespace: str, shared_operator: OperatorProcess, model_dir: Path, tmp_path: Path
) -> None:
    cluster = shared_operator.cluster
    admission = {
        "governance": {"policyConfigMapRef": {"name": POLICY}},
        "extensions": [{"parameter": "ignore_eos", "users": ["alice", "carol"]}],
    }
    with serve(cluster, namespace, name=NAME, model_dir=model_dir, groups=GROUPS,
               log_dir=tmp_path, admission=admission) as serving:  # fmt: skip
        added = _add_users(cluster, namespace, ["bob", "carol"])
        _keys_accepted(serving, added)
        client = _Client(serving, {"alice": serving.alice, **added})
        log = serving.gateway.log_dir / "admission.log"
        try:
            _fails_closed(cluster, namespace, client)
            refused_in = _limited(cluster, namespace, client)
            _lifted(cluster, namespace, client, refused_in=refused_in)
            _broken_edit_keeps_the_policy(cluster, namespace, client, log=log)
            _assert_same_gateway(cluster, namespace, serving)
        finally:
            print("answers seen, in order (UTC):\n" + "\n".join(client.seen))
            policy_lines = [line for line in log.read_text().splitlines() if "policy" in line]
            print("the gateway's policy log:\n" + "\n".join(policy_lines))
