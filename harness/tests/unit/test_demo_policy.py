"""The demo enforces the administrator's policy of a default chart install: the same
ValidatingAdmissionPolicy and binding (the API server's refusal at ``kubectl apply``) and
the same ``SPARKLLM_ADMIN_POLICY`` for its operator. The demo reads both from the rendered
chart (it builds no helm); this compares them with helm's own render of the chart's
defaults, so the demo cannot drift from what the docs promise, and checks the demo's
sample is inside that policy."""

from __future__ import annotations

import pytest
import yaml
from tests.unit.test_chart_render import one, operator_container, render_chart

from sparkllm.api.admin_policy import admin_policy_from_env, policy_violations
from sparkllm.api.validate import validate_inference_cluster
from sparkllm_dev.demo import POLICY_ENV, SAMPLE, chart_default_policy


@pytest.mark.needs_binary  # helm renders the chart (make binaries; make demo builds no helm)
def test_the_demos_policy_is_the_charts_default() -> None:
    demo = chart_default_policy()
    chart = render_chart()
    assert demo.documents == [
        one(chart, "ValidatingAdmissionPolicy"),
        one(chart, "ValidatingAdmissionPolicyBinding"),
    ]
    env = {e["name"]: e.get("value") for e in operator_container(chart)["env"]}
    assert demo.env == env[POLICY_ENV]


def test_the_demos_sample_is_inside_the_policy() -> None:
    policy = admin_policy_from_env({POLICY_ENV: chart_default_policy().env})
    assert policy is not None
    sample = validate_inference_cluster(yaml.safe_load(SAMPLE.read_text()))
    assert policy_violations(sample, policy) == []
    foreign = yaml.safe_load(SAMPLE.read_text())
    foreign["spec"]["engine"]["image"] = "evil.io/x:1"
    assert policy_violations(validate_inference_cluster(foreign), policy) != []
