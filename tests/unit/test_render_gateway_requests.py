"""spec.admission's request policy reaches the gateway: extensions, n, batches, tools.

Issue 14: the allowlist's options (extensions per user, maxChoices,
maxPromptsPerRequest, toolCalling) are rendered as ``SPARKLLM_GATEWAY_*`` variables that
the gateway's own configuration reads back to the spec's values; a default spec renders
none of them (the gateway's defaults are the spec's) but the one grant every spec gets:
``ignore_eos`` for the operator's own benchmark and acceptance identity (``BENCH_USER``),
which the benchmark client's real request needs and no user of the Secret gains.
"""

from __future__ import annotations

import pytest

from sparkllm.bench.client import CHAT_PATH, ChatRequest
from sparkllm.gateway.admission import AdmissionPolicy
from sparkllm.gateway.config import load_gateway_config
from sparkllm.gateway.replies import RequestRejectedError
from sparkllm.gateway.rules.allowlist import Allowlist
from sparkllm.render.gateway import admission_env
from sparkllm.render.names import BENCH_USER
from tests.unit.test_render_gateway import ENGINE_KEY, cluster


def _policy(**changes: object) -> AdmissionPolicy:
    env = admission_env(cluster(**changes), engine_key=ENGINE_KEY)
    environ = {e["name"]: e.get("value", "resolved-by-kubelet") for e in env}
    return AdmissionPolicy.from_config(load_gateway_config([], environ=environ))


def test_a_default_spec_lets_nothing_extra_through() -> None:
    env = admission_env(cluster(), engine_key=ENGINE_KEY)
    names = {e["name"] for e in env}
    assert not names & {
        "SPARKLLM_GATEWAY_MAX_CHOICES",
        "SPARKLLM_GATEWAY_MAX_PROMPTS_PER_REQUEST",
        "SPARKLLM_GATEWAY_TOOL_CALLING",
    }
    policy = _policy()
    assert (policy.extensions, policy.max_choices, policy.max_prompts) == (
        {"ignore_eos": frozenset({BENCH_USER})}, 1, 1,
    )  # fmt: skip
    assert policy.tool_features == frozenset()


# The benchmark's and the acceptance load's request, as sparkllm.bench sends it.
BENCH_BODY = ChatRequest(model="m", prompt="p", max_tokens=128, ignore_eos=True).body()


@pytest.mark.parametrize(
    ("grants", "let_through"),
    [
        ([], {BENCH_USER}),  # no grant in the spec: the operator's runs only
        ([{"parameter": "ignore_eos", "users": ["alice"]}], {BENCH_USER, "alice"}),
        ([{"parameter": "ignore_eos"}], {BENCH_USER, "alice", "demo"}),  # every user
    ],
)
def test_the_benchmark_request_passes_for_the_operators_identity(
    grants: list[dict[str, object]], let_through: set[str]
) -> None:
    allowlist = Allowlist(_policy(admission__extensions=grants).extensions)
    for user in (BENCH_USER, "alice", "demo"):
        if user in let_through:
            allowlist.check(CHAT_PATH, BENCH_BODY, user=user)
        else:
            with pytest.raises(RequestRejectedError) as refused:
                allowlist.check(CHAT_PATH, BENCH_BODY, user=user)
            assert "'ignore_eos' is not enabled for your key" in refused.value.reply.message


def test_the_spec_options_reach_the_gateway() -> None:
    policy = _policy(
        admission__extensions=[
            {"parameter": "ignore_eos", "users": ["bench"]},
            {"parameter": "top_k"},
        ],
        admission__maxChoices=2,
        admission__maxPromptsPerRequest=4,
        admission__toolCalling=["named", "strict"],
    )
    assert policy.extensions == {
        "ignore_eos": frozenset({"bench", BENCH_USER}),
        "top_k": frozenset(),
    }
    assert (policy.max_choices, policy.max_prompts) == (2, 4)
    assert policy.tool_features == frozenset({"named", "strict"})
