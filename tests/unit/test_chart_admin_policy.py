"""The chart's ``policy`` values, rendered: the ValidatingAdmissionPolicy, its binding, and
the operator's env — one policy for both lines of enforcement.

The CEL itself runs on the real API server in
tests/integration/test_api_server_validation.py (the refusals and their messages); here,
offline with helm: the values land in the CEL as literals, the binding covers the watched
namespaces only, every spec-changing write (create and update) is matched, the operator's
env parses to the same AdminPolicy, ``enabled: false`` renders none of it, and bad values
fail the schema naming them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sparkllm.api.admin_policy import (
    POLICY_ENV,
    AdminPolicy,
    admin_policy_from,
    admin_policy_from_env,
)
from tests.unit.test_chart_render import CHART, one, operator_container, render_chart, run_helm

pytestmark = pytest.mark.needs_binary  # helm
Obj = dict[str, Any]
VAP = "ValidatingAdmissionPolicy"
BINDING = "ValidatingAdmissionPolicyBinding"
CUSTOM = {
    "images": {
        "allowedRepositories": ["registry.corp/ml/", "nvcr.io/nvidia/sglang"],
        "requireDigest": True,
    },
    "modelPaths": {"allowedPrefixes": ["/data/models", "/models"]},
    "placement": {
        "default": {"nodes": [], "nodeGroupLabels": []},
        "namespaces": {
            "team-a": {"nodes": ["spark-a0"]},
            "team-b": {"nodeGroupLabels": ["x.io/b"]},
        },
    },
    "exposure": {
        "allowedHosts": ["*.team.example.com"],
        "allowedIssuers": [{"kind": "ClusterIssuer", "name": "letsencrypt-prod"}],
    },
    "modelSources": {"allowedHosts": ["*.corp.example"], "plainHttpHosts": ["s3.corp.example"]},
}


def variables(vap: Obj) -> dict[str, str]:
    return {v["name"]: v["expression"] for v in vap["spec"]["variables"]}


def messages(vap: Obj) -> str:
    return "\n".join(v["messageExpression"] for v in vap["spec"]["validations"])


def operator_policy(objs: list[Obj]) -> AdminPolicy | None:
    env = {e["name"]: e["value"] for e in operator_container(objs)["env"] if "value" in e}
    return admin_policy_from_env(env)


def test_defaults_render_the_policy_for_every_namespace() -> None:
    objs = render_chart()
    vap, binding = one(objs, VAP), one(objs, BINDING)
    assert vap["metadata"]["name"] == binding["spec"]["policyName"] == "sparkllm-policy"
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert "matchResources" not in binding["spec"]  # the operator watches every namespace
    spec = vap["spec"]
    assert spec["failurePolicy"] == "Fail"
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["inferenceclusters"]
    assert rule["operations"] == ["CREATE", "UPDATE"]
    assert [c["expression"] for c in spec["matchConditions"]] == [
        "request.operation == 'CREATE' || object.spec != oldObject.spec"
    ]
    defaults = AdminPolicy()
    found = variables(vap)
    assert json.loads(found["allowedRepositories"]) == list(defaults.images.allowed_repositories)
    assert json.loads(found["allowedPrefixes"]) == ["/models"]
    assert json.loads(found["namespaceRules"]) == {}
    assert json.loads(found["defaultRule"]) == {"nodes": ["*"], "nodeGroupLabels": ["*"]}
    assert json.loads(found["allowedHosts"]) == []
    assert json.loads(found["allowedIssuers"]) == []
    assert json.loads(found["allowedSourceHosts"]) == ["huggingface.co"]
    assert json.loads(found["plainHttpSourceHosts"]) == []
    assert "@sha256:" not in "\n".join(v["expression"] for v in spec["validations"])
    text = messages(vap)
    assert '"nvcr.io/nvidia/sglang, lmsysorg/sglang, docker.io/lmsysorg/sglang"' in text
    # hosts (3 messages), issuers and plain-http model sources: none allowed
    assert text.count('+ "none" +') == 5
    assert '+ "huggingface.co" +' in text  # the allowed model source hosts' listing
    assert operator_policy(objs) == defaults


def test_the_binding_covers_only_the_watched_namespaces() -> None:
    binding = one(render_chart({"watchNamespaces": ["llm-a", "llm-b"]}), BINDING)
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["llm-a", "llm-b"]}
        ]
    }


def test_custom_values_reach_the_cel_and_the_operator_alike() -> None:
    objs = render_chart({"policy": CUSTOM})
    vap = one(objs, VAP)
    found = variables(vap)
    assert json.loads(found["allowedRepositories"]) == CUSTOM["images"]["allowedRepositories"]
    assert json.loads(found["namespaceRules"]) == {
        "team-a": {"nodes": ["spark-a0"], "nodeGroupLabels": []},  # a key left out: none
        "team-b": {"nodes": [], "nodeGroupLabels": ["x.io/b"]},
    }
    assert json.loads(found["defaultRule"]) == {"nodes": [], "nodeGroupLabels": []}
    assert json.loads(found["allowedIssuers"]) == CUSTOM["exposure"]["allowedIssuers"]
    digest = [v for v in vap["spec"]["validations"] if "@sha256:" in v["expression"]]
    assert len(digest) == 1
    text = messages(vap)
    assert '"/data/models, /models"' in text
    assert '"ClusterIssuer/letsencrypt-prod"' in text
    assert json.loads(found["allowedSourceHosts"]) == ["*.corp.example"]
    assert json.loads(found["plainHttpSourceHosts"]) == ["s3.corp.example"]
    assert '+ "*.corp.example" +' in text
    assert '+ "s3.corp.example" +' in text
    assert operator_policy(objs) == admin_policy_from(CUSTOM, where="values")


def test_disabled_renders_no_policy_and_no_env() -> None:
    objs = render_chart({"policy": {"enabled": False}})
    assert not [o for o in objs if o["kind"] in {VAP, BINDING}]
    assert operator_policy(objs) is None
    assert POLICY_ENV not in json.dumps(objs)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("images.allowedRepositories[0]=Evil Repo", "/policy/images/allowedRepositories/0"),
        ("images.requireDigest=maybe", "/policy/images/requireDigest"),
        ("modelPaths.allowedPrefixes[0]=models", "/policy/modelPaths/allowedPrefixes/0"),
        ("placement.namespaces.Team_A.nodes[0]=a", "invalid propertyName 'Team_A'"),
        ("placement.default.nodez[0]=a", "'nodez' not allowed"),
        ("exposure.allowedHosts[0]=*.*.example.com", "/policy/exposure/allowedHosts/0"),
        ("exposure.allowedIssuers[0].kind=CA", "/policy/exposure/allowedIssuers/0"),
    ],
)
def test_wrong_policy_values_fail_naming_them(setting: str, message: str) -> None:
    result = run_helm("template", "x", str(CHART), "--set", f"policy.{setting}", check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
