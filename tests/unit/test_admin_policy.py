"""The administrator's policy, the operator's second line (sparkllm.api.admin_policy).

Each rule allowed and refused, with the message both halves report (the chart's
ValidatingAdmissionPolicy says the same words: tests/integration/test_api_server_validation.py);
the loaders (the operator's env, a YAML file for ``sparkllm render``); and the hook: a
pass over a denied object is phase Failed, reason PolicyDenied, one Warning Event, with
no read beyond the object itself and nothing applied.
"""

from __future__ import annotations

import asyncio
import copy
import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from sparkllm.api import Reason, validate_inference_cluster
from sparkllm.api.admin_policy import (
    POLICY_ENV,
    AdminPolicy,
    PolicyDeniedError,
    admin_policy_from,
    admin_policy_from_env,
    admin_policy_from_yaml,
    host_allowed,
    path_allowed,
    policy_violations,
    repository_of,
)
from sparkllm.cli import main
from sparkllm.errors import SparkllmError, SpecError
from sparkllm.reconcile.decide import decide
from sparkllm.reconcile.engines import Engines
from sparkllm.reconcile.observe import observe
from sparkllm_dev.testing import ROOT
from tests.fixtures.invalid import apply_changes
from tests.unit.reconcile_fixtures import GATEWAY_IMAGE

JSON = dict[str, Any]
SAMPLE = ROOT / "manifests" / "samples" / "deepseek-v4-flash.yaml"
CHART_VALUES = ROOT / "charts" / "sparkllm" / "values.yaml"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def sample(namespace: str = "llm", **changes: Any) -> JSON:
    """The sample in ``namespace`` with spec changes (``engine__image=...``: spec.engine.image)."""
    doc: JSON = yaml.safe_load(SAMPLE.read_text())
    doc["metadata"].update(namespace=namespace, uid="u", generation=1)
    paths = {"spec." + key.replace("__", "."): value for key, value in changes.items()}
    return apply_changes(doc, set_values=paths, delete=[])


def violations(obj: JSON, policy: AdminPolicy | None = None) -> list[str]:
    return policy_violations(validate_inference_cluster(obj), policy or AdminPolicy())


def policy(**values: Any) -> AdminPolicy:
    return admin_policy_from(values, where="in the test")


# --- defaults ------------------------------------------------------------------------------


def test_the_defaults_equal_the_charts_values() -> None:
    values = yaml.safe_load(CHART_VALUES.read_text())["policy"]
    assert values.pop("enabled") is True
    assert AdminPolicy().model_dump(by_alias=True, mode="json") == values
    assert admin_policy_from(values, where="values.yaml") == AdminPolicy()


def test_the_sample_passes_the_default_policy() -> None:
    assert violations(sample()) == []


# --- images --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("image", "repository"),
    [
        ("nvcr.io/nvidia/sglang:26.07-py3", "nvcr.io/nvidia/sglang"),
        ("localhost:5000/sglang:v1", "localhost:5000/sglang"),
        ("localhost:5000/sglang@sha256:" + "a" * 64, "localhost:5000/sglang"),
        ("lmsysorg/sglang:v0.5@sha256:" + "b" * 64, "lmsysorg/sglang"),
    ],
)
def test_repository_of(image: str, repository: str) -> None:
    assert repository_of(image) == repository


def test_a_foreign_image_is_denied_naming_the_allowed_repositories() -> None:
    obj = sample(engine__image="evil.io/x:1")
    assert violations(obj) == [
        "spec.engine.image 'evil.io/x:1' is not from an allowed repository (allowed: "
        "nvcr.io/nvidia/sglang, lmsysorg/sglang, docker.io/lmsysorg/sglang)"
    ]


@pytest.mark.parametrize(
    ("image", "allowed"),
    [
        ("nvcr.io/nvidia/sglang:26.07-py3", True),
        ("nvcr.io/nvidia/sglang-evil:1", False),  # an entry is a whole repository
        ("nvcr.io/nvidia/sglang/sub:1", False),
        ("registry.corp/ml/sglang:1", True),  # below an entry ending in "/"
        ("registry.corp/mlx/sglang:1", False),
        ("registry.corp:5000/ml/sglang:1", False),
    ],
)
def test_repository_entries_are_exact_or_slash_prefixes(image: str, allowed: bool) -> None:
    rules = policy(images={"allowedRepositories": ["nvcr.io/nvidia/sglang", "registry.corp/ml/"]})
    assert (violations(sample(engine__image=image), rules) == []) is allowed


def test_star_allows_every_repository() -> None:
    rules = policy(images={"allowedRepositories": ["*"]})
    assert violations(sample(engine__image="evil.io/x:1"), rules) == []


def test_require_digest() -> None:
    rules = policy(images={"requireDigest": True})
    assert violations(sample(), rules) == [
        "spec.engine.image 'nvcr.io/nvidia/sglang:26.07-py3' is not pinned by digest (the "
        "administrator requires @sha256:)"
    ]
    pinned = "nvcr.io/nvidia/sglang:26.07-py3@sha256:" + "c" * 64
    assert violations(sample(engine__image=pinned), rules) == []


# --- model paths ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ("/models", True),
        ("/models/DeepSeek", True),
        ("/models-evil/x", False),
        ("/models/../var/lib/kubelet", False),
        ("/var/lib/kubelet", False),
        ("/", False),
    ],
)
def test_path_allowed_by_whole_components(path: str, allowed: bool) -> None:
    assert path_allowed(path, ("/models",)) is allowed
    assert path_allowed(path, ("/models/",)) is (allowed and path != "/models")


def test_a_host_path_outside_the_prefixes_is_denied() -> None:
    obj = sample(model__path="/var/lib/kubelet")
    assert violations(obj) == [
        "spec.model.path '/var/lib/kubelet' is not under an allowed host path prefix "
        "(allowed: /models)"
    ]


def test_a_claim_is_not_a_host_path() -> None:
    obj = sample(model__path="/mnt/model", model__persistentVolumeClaim={"claimName": "m"})
    assert violations(obj) == []


def test_no_prefix_allows_no_host_path() -> None:
    rules = policy(modelPaths={"allowedPrefixes": []})
    assert violations(sample(), rules) == [
        "spec.model.path '/models/DeepSeek-V4-Flash-NVFP4' is not under an allowed host path "
        "prefix (allowed: none)"
    ]


# --- placement -----------------------------------------------------------------------------

TEAMS = {
    "placement": {
        "default": {"nodes": [], "nodeGroupLabels": []},
        "namespaces": {
            "team-a": {"nodes": ["spark-a0", "spark-a1", "spark-a2"]},
            "team-b": {"nodeGroupLabels": ["sparkllm.io/team-b"]},
        },
    }
}


def test_the_default_rule_allows_every_node_and_label() -> None:
    assert violations(sample("anyone", placement={"nodeGroupLabel": "x.io/g"})) == []
    assert violations(sample("anyone")) == []


def test_a_namespace_uses_only_its_nodes() -> None:
    rules = policy(**TEAMS)
    assert violations(sample("team-a"), rules) == []
    foreign = sample("team-a", placement={"nodeGroups": [["spark-a0", "spark-b1", "spark-b2"]]})
    assert violations(foreign, rules) == [
        "spec.placement.nodeGroups names nodes namespace 'team-a' may not use: spark-b1, "
        "spark-b2 (allowed: spark-a0, spark-a1, spark-a2)"
    ]


def test_a_namespace_uses_only_its_label_keys() -> None:
    rules = policy(**TEAMS)
    own = sample("team-b", placement={"nodeGroupLabel": "sparkllm.io/team-b"})
    assert violations(own, rules) == []
    assert violations(sample("team-b"), rules) == [
        "spec.placement.nodeGroups names nodes namespace 'team-b' may not use: spark-a0, "
        "spark-a1, spark-a2 (allowed: none)"
    ]
    defaulted = sample("team-a")
    del defaulted["spec"]["placement"]  # the API's default: nodeGroupLabel sparkllm.io/node-group
    assert violations(defaulted, rules) == [
        "spec.placement.nodeGroupLabel 'sparkllm.io/node-group' is not a node group label "
        "namespace 'team-a' may use (allowed: none)"
    ]


def test_unlisted_namespaces_take_the_default() -> None:
    rules = policy(**TEAMS)
    assert violations(sample("elsewhere"), rules) == [
        "spec.placement.nodeGroups names nodes namespace 'elsewhere' may not use: spark-a0, "
        "spark-a1, spark-a2 (allowed: none)"
    ]


# --- exposure ------------------------------------------------------------------------------

INGRESS = {
    "type": "Ingress",
    "ingress": {
        "host": "*.corp.example.com",
        "tlsSecretName": "tls",
        "certManagerIssuer": {"kind": "ClusterIssuer", "name": "letsencrypt-prod"},
    },
}


def test_no_host_and_no_issuer_by_default() -> None:
    assert violations(sample(exposure=INGRESS)) == [
        "spec.exposure.ingress.host '*.corp.example.com' is not an allowed host (allowed: none)",
        "spec.exposure.ingress.certManagerIssuer ClusterIssuer/letsencrypt-prod is not an "
        "allowed issuer (allowed: none)",
    ]


def test_cluster_ip_and_tls_claim_no_host() -> None:
    assert violations(sample(exposure={"type": "TLS", "tls": {"secretName": "t"}})) == []
    assert violations(sample(exposure={"type": "ClusterIP"})) == []


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("llm.example.com", True),
        ("a.team.example.com", True),
        ("a.b.team.example.com", True),
        ("team.example.com", False),  # *.suffix is below the suffix only
        ("*.team.example.com", True),  # a wildcard host only when listed as such
        ("*.x.team.example.com", False),
        ("*.example.com", False),
        ("x.open.example.com", False),
        ("evil.com", False),
    ],
)
def test_host_patterns(host: str, allowed: bool) -> None:
    patterns = ("llm.example.com", "*.team.example.com")
    assert host_allowed(host, patterns) is allowed
    assert host_allowed(host, ("*",))


def test_http_route_hostnames_and_the_whole_listener() -> None:
    rules = policy(exposure={"allowedHosts": ["*.team.example.com"]})
    route = {"type": "HTTPRoute", "httpRoute": {"parentRefs": [{"name": "gw"}]}}
    assert violations(sample(exposure=route), rules) == [
        "spec.exposure.httpRoute.hostnames is empty, which claims every host of the Gateway "
        "listener (allowed: *.team.example.com)"
    ]
    named = copy.deepcopy(route)
    named["httpRoute"]["hostnames"] = ["a.team.example.com", "b.other.com"]
    assert violations(sample(exposure=named), rules) == [
        "spec.exposure.httpRoute.hostnames has hosts that are not allowed: b.other.com "
        "(allowed: *.team.example.com)"
    ]
    anything = policy(exposure={"allowedHosts": ["*"]})
    assert violations(sample(exposure=route), anything) == []


def test_issuers_by_kind_and_name() -> None:
    host = {"allowedHosts": ["*.corp.example.com"]}
    wanted = {"kind": "ClusterIssuer", "name": "letsencrypt-prod"}
    exposure = {**INGRESS, "ingress": {**INGRESS["ingress"], "host": "llm.corp.example.com"}}
    obj = sample(exposure=exposure)
    assert violations(obj, policy(exposure={**host, "allowedIssuers": [wanted]})) == []
    any_cluster = {"kind": "ClusterIssuer", "name": "*"}
    assert violations(obj, policy(exposure={**host, "allowedIssuers": [any_cluster]})) == []
    local = {"kind": "Issuer", "name": "letsencrypt-prod"}
    assert violations(obj, policy(exposure={**host, "allowedIssuers": [local]})) == [
        "spec.exposure.ingress.certManagerIssuer ClusterIssuer/letsencrypt-prod is not an "
        "allowed issuer (allowed: Issuer/letsencrypt-prod)"
    ]


# --- loaders -------------------------------------------------------------------------------


def test_the_env_holds_json_and_unset_means_no_policy() -> None:
    assert admin_policy_from_env({}) is None
    assert admin_policy_from_env({POLICY_ENV: " "}) is None
    values = {"images": {"requireDigest": True}}
    loaded = admin_policy_from_env({POLICY_ENV: json.dumps(values)})
    assert loaded is not None
    assert loaded.images.require_digest
    with pytest.raises(SparkllmError, match=f"^{POLICY_ENV} is not JSON"):
        admin_policy_from_env({POLICY_ENV: "{"})


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"images": {"requireDigest": "yes"}}, "images.requireDigest: Input should be a valid"),
        ({"imagez": {}}, "imagez: Extra inputs are not permitted"),
        ({"exposure": {"allowedIssuers": [{"kind": "Cert", "name": "x"}]}}, "kind: Input"),
        ([], "is not a mapping"),
    ],
)
def test_a_bad_policy_is_one_line_naming_the_field(values: Any, message: str) -> None:
    with pytest.raises(SparkllmError) as info:
        admin_policy_from(values, where="in the test")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_a_yaml_file_is_the_policy_or_chart_values() -> None:
    alone = admin_policy_from_yaml("modelPaths: {allowedPrefixes: [/data]}", where="in f")
    values = admin_policy_from_yaml(
        "image: {tag: x}\npolicy: {enabled: true, modelPaths: {allowedPrefixes: [/data]}}",
        where="in f",
    )
    assert alone == values
    assert alone.model_paths.allowed_prefixes == ("/data",)
    assert alone.images == AdminPolicy().images  # unset keys: the chart's defaults


# --- the hook: validation, observe, decide ---------------------------------------------------


def test_validation_with_a_policy_raises_policy_denied_a_spec_error() -> None:
    obj = sample(engine__image="evil.io/x:1", model__path="/etc")
    assert validate_inference_cluster(obj).spec.engine.image == "evil.io/x:1"
    with pytest.raises(PolicyDeniedError) as info:
        validate_inference_cluster(obj, policy=AdminPolicy())
    assert isinstance(info.value, SpecError)
    assert str(info.value) == "; ".join(violations(obj))
    assert str(info.value).count("spec.") == 2


class OnlyTheObject:
    """A KubeAPI that holds one InferenceCluster and fails any other read."""

    def __init__(self, obj: JSON) -> None:
        self.obj = obj
        self.reads: list[str] = []

    async def get(self, kind: Any, name: str, namespace: str | None = None) -> JSON | None:
        self.reads.append(f"{kind.kind}/{name}")
        assert kind.kind == "InferenceCluster"
        return self.obj

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"observe read {name} of a denied object")


def test_a_denied_object_is_failed_policy_denied_before_anything_else_is_read() -> None:
    obj = sample(model__path="/var/lib/kubelet")
    api = OnlyTheObject(obj)
    engines = cast(Engines, None)  # never reached: no engine is asked
    observation = asyncio.run(
        observe(
            cast(Any, api), ("llm", obj["metadata"]["name"]), engines=engines,
            clock=lambda: NOW, policy=AdminPolicy(),
        )
    )  # fmt: skip
    assert api.reads == ["InferenceCluster/deepseek-v4-flash"]
    assert observation.ic is None
    assert observation.spec_error_reason is Reason.POLICY_DENIED
    plan = decide(observation, gateway_image=GATEWAY_IMAGE)
    assert not plan.apply
    assert not plan.secrets
    assert plan.status is not None
    assert plan.status["phase"] == "Failed"
    ready = next(c for c in plan.status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "PolicyDenied")
    assert ready["message"] == violations(obj)[0]
    assert [(e.warning, e.reason) for e in plan.events] == [(True, Reason.POLICY_DENIED)]
    # The next pass over the same generation writes no second Event.
    again = decide(
        replace(observation, obj={**obj, "status": plan.status}),
        gateway_image=GATEWAY_IMAGE,
    )
    assert not again.events
    assert again.status is None  # nothing changed: no status write


def test_without_a_policy_the_same_object_is_acted_on() -> None:
    obj = sample(model__path="/var/lib/kubelet")
    assert validate_inference_cluster(obj, policy=None).spec.model.path == "/var/lib/kubelet"


# --- sparkllm render --admin-policy -----------------------------------------------------------


def test_render_refuses_what_the_operator_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "icl.yaml"
    spec.write_text(yaml.safe_dump(sample(model__path="/var/lib/kubelet")))
    (tmp_path / "values.yaml").write_text(CHART_VALUES.read_text())
    assert main(["render", "-f", str(spec)]) == 0  # no policy given: rendered
    capsys.readouterr()
    args = ["render", "-f", str(spec), "--admin-policy", str(tmp_path / "values.yaml")]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err == (
        "sparkllm: error: spec.model.path '/var/lib/kubelet' is not under an allowed host path "
        "prefix (allowed: /models)\n"
    )
    spec.write_text(yaml.safe_dump(sample()))
    assert main(args) == 0
    assert "kind: StatefulSet" in capsys.readouterr().out
    (tmp_path / "bad.yaml").write_text("policy: {images: {requireDigest: maybe}}")
    assert main(["render", "-f", str(spec), "--admin-policy", str(tmp_path / "bad.yaml")]) == 1
    assert "images.requireDigest" in capsys.readouterr().err
