"""The staging journey on the demo (``sparkllm-dev model-source``): the InferenceCluster file
it writes is a valid object whose source a default install refuses and the policy it
installs (the chart rendered with its ``--set``) allows, in the operator's check; the API
server's half of the same policy is the chart's own admission policy, checked against the
API server by tests/integration/test_api_server_validation.py."""

from __future__ import annotations

import pytest
from tests.unit.test_chart_render import require_binary

from sparkllm.api.admin_policy import admin_policy_from_env, policy_violations
from sparkllm.api.validate import validate_inference_cluster
from sparkllm_dev.demo import POLICY_ENV, chart_default_policy
from sparkllm_dev.demo_staging import GROUP_B, allowing_policy, staged_object

ENDPOINT = "http://127.0.0.1:9000"


def test_the_journeys_object_is_valid_and_a_default_install_refuses_its_source() -> None:
    ic = validate_inference_cluster(staged_object(ENDPOINT))
    assert ic.spec.model.source is not None
    assert ic.spec.model.source.s3 is not None
    assert ic.spec.model.source.s3.endpoint == ENDPOINT
    assert ic.spec.placement.node_groups == (GROUP_B,)
    default = admin_policy_from_env({POLICY_ENV: chart_default_policy().env})
    assert default is not None
    problems = policy_violations(ic, default)
    assert any("127.0.0.1" in p and "not an allowed model source" in p for p in problems)


@pytest.mark.needs_binary  # helm renders the chart (make binaries)
def test_the_policy_the_journey_installs_allows_its_source_and_nothing_else_changes() -> None:
    allowing = allowing_policy(require_binary("helm"))
    policy = admin_policy_from_env({POLICY_ENV: allowing.env})
    assert policy is not None
    assert policy_violations(validate_inference_cluster(staged_object(ENDPOINT)), policy) == []
    default = admin_policy_from_env({POLICY_ENV: chart_default_policy().env})
    assert default is not None
    assert policy.model_copy(update={"model_sources": default.model_sources}) == default
