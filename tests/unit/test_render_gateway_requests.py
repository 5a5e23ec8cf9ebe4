"""spec.admission's request policy reaches the gateway: extensions, n, batches, tools.

Issue 14: the allowlist's options (extensions per user, maxChoices,
maxPromptsPerRequest, toolCalling) are rendered as ``SPARKLLM_GATEWAY_*`` variables that
the gateway's own configuration reads back to the spec's values; a default spec renders
none of them (the gateway's defaults are the spec's).
"""

from __future__ import annotations

from sparkllm.gateway.admission import AdmissionPolicy
from sparkllm.gateway.config import load_gateway_config
from sparkllm.render.gateway import admission_env
from tests.unit.test_render_gateway import ENGINE_KEY, cluster


def _policy(**changes: object) -> AdmissionPolicy:
    env = admission_env(cluster(**changes), engine_key=ENGINE_KEY)
    environ = {e["name"]: e.get("value", "resolved-by-kubelet") for e in env}
    return AdmissionPolicy.from_config(load_gateway_config([], environ=environ))


def test_a_default_spec_lets_nothing_extra_through() -> None:
    env = admission_env(cluster(), engine_key=ENGINE_KEY)
    names = {e["name"] for e in env}
    assert not names & {
        "SPARKLLM_GATEWAY_EXTENSIONS",
        "SPARKLLM_GATEWAY_MAX_CHOICES",
        "SPARKLLM_GATEWAY_MAX_PROMPTS_PER_REQUEST",
        "SPARKLLM_GATEWAY_TOOL_CALLING",
    }
    policy = _policy()
    assert (policy.extensions, policy.max_choices, policy.max_prompts) == ({}, 1, 1)
    assert policy.tool_features == frozenset()


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
    assert policy.extensions == {"ignore_eos": frozenset({"bench"}), "top_k": frozenset()}
    assert (policy.max_choices, policy.max_prompts) == (2, 4)
    assert policy.tool_features == frozenset({"named", "strict"})
