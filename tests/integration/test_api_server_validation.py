"""The generated CRD in a real kube-apiserver: it is accepted, and it validates as pydantic does.

Unit tests prove the pydantic half of every rule; only a real API server can prove the
CEL half, the structural schema, the defaults and the subresources. These tests install
``crds/sparkllm.io_inferenceclusters.yaml`` (left installed: other suites use it too),
then: every invalid manifest is refused by ``kubectl apply`` with an error naming the
field; the samples are accepted and defaulted; updates hit the transition rules;
``kubectl explain``, ``get`` and ``scale`` behave; and a differential property test checks
that pydantic accepts a generated spec exactly when the API server does (each example one
server-side dry-run create with strict field validation, what ``kubectl apply
--dry-run=server`` sends, over one kept-alive connection: 300 kubectl processes took two
minutes on two cores).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkllm.api import GROUP, PLURAL, VERSION, validate_inference_cluster
from sparkllm.api.admin_policy import admin_policy_from, policy_violations
from sparkllm.errors import SpecError
from sparkllm_dev.devcluster import DevCluster, wait_until
from tests.fixtures.invalid import (
    REPO_ROOT,
    InvalidCase,
    apply_changes,
    load_base_manifest,
    load_invalid_cases,
)
from tests.unit.test_chart_render import render_chart

pytestmark = pytest.mark.cluster

CRD_FILE = REPO_ROOT / "crds" / "sparkllm.io_inferenceclusters.yaml"
SAMPLES = sorted((REPO_ROOT / "manifests" / "samples").glob("*.yaml"))
ONE_REPLICA_SAMPLE = REPO_ROOT / "manifests" / "samples" / "deepseek-v4-flash.yaml"  # nodeGroups
LABELLED_SAMPLE = REPO_ROOT / "manifests" / "samples" / "deepseek-v4-flash-2replicas.yaml"
INVALID_CASES = load_invalid_cases()
DIFFERENTIAL_EXAMPLES = 300


@pytest.fixture(scope="module")
def crd_installed(devcluster: DevCluster) -> DevCluster:
    """The CRD applied and Established (idempotent: the CRD may already be there)."""
    devcluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    devcluster.wait_established("inferenceclusters.sparkllm.io")
    # The API server's discovery and OpenAPI catch up shortly after Established.
    wait_until(
        lambda: devcluster.kubectl("get", "icl", "-A", check=False).returncode == 0,
        timeout=60,
        what="InferenceCluster resource served",
    )
    return devcluster


def _apply(
    cluster: DevCluster, manifest: dict[str, Any], *, namespace: str, dry_run: bool = False
) -> subprocess.CompletedProcess[str]:
    args = ["apply", "-n", namespace, "-f", "-"]
    if dry_run:
        args.append("--dry-run=server")
    return cluster.kubectl(*args, input=yaml.safe_dump(manifest), check=False)


def _dry_run_create(
    api: kubernetes.client.CustomObjectsApi, manifest: dict[str, Any], *, namespace: str
) -> tuple[bool, str]:
    """The API server's verdict on creating ``manifest``: (accepted, its refusal message).

    What ``kubectl apply --dry-run=server`` asks of it for a new object: a create with
    dryRun=All and fieldValidation=Strict (kubectl's default ``--validate=strict``), so the
    structural schema, the CEL rules and unknown fields are all judged, nothing stored.
    """
    try:
        api.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, manifest, dry_run="All", field_validation="Strict"
        )
    except kubernetes.client.ApiException as exc:
        if exc.status not in (400, 422):
            raise
        return False, str(json.loads(exc.body or "{}").get("message") or exc.body)
    return True, ""


def _get(cluster: DevCluster, name: str, *, namespace: str) -> dict[str, Any]:
    result = cluster.kubectl("get", "icl", name, "-n", namespace, "-o", "json")
    document: dict[str, Any] = json.loads(result.stdout)
    return document


@pytest.mark.parametrize("case", INVALID_CASES, ids=[case.name for case in INVALID_CASES])
def test_invalid_manifest_is_rejected_naming_the_field(
    crd_installed: DevCluster, namespace: str, case: InvalidCase
) -> None:
    result = _apply(crd_installed, case.manifest, namespace=namespace)
    assert result.returncode != 0, f"{case.name}: API server accepted it ({case.rule})"
    assert case.field in result.stderr, result.stderr
    assert case.apiserver in result.stderr, result.stderr
    with pytest.raises(SpecError, match=None) as raised:
        validate_inference_cluster(case.manifest)
    assert case.field in str(raised.value)


@pytest.mark.parametrize("sample", SAMPLES, ids=[path.name for path in SAMPLES])
def test_samples_are_accepted_and_match_pydantic_defaults(
    crd_installed: DevCluster, namespace: str, sample: Path
) -> None:
    manifest = yaml.safe_load(sample.read_text())
    crd_installed.kubectl("apply", "-n", namespace, "-f", str(sample))
    stored = _get(crd_installed, manifest["metadata"]["name"], namespace=namespace)
    expected = validate_inference_cluster(manifest).to_manifest()["spec"]
    assert stored["spec"] == expected


def test_minimal_spec_is_defaulted_by_the_schema(crd_installed: DevCluster, namespace: str) -> None:
    minimal = {
        "apiVersion": "sparkllm.io/v1alpha1",
        "kind": "InferenceCluster",
        "metadata": {"name": "minimal"},
        "spec": {
            "model": {"path": "/models/m", "servedName": "m"},
            "engine": {"image": "nvcr.io/nvidia/sglang:26.07-py3"},
            "admission": {"apiKeysSecretRef": {"name": "keys"}},
        },
    }
    crd_installed.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(minimal))
    stored = _get(crd_installed, "minimal", namespace=namespace)["spec"]
    assert stored == validate_inference_cluster(minimal).to_manifest()["spec"]
    assert stored["placement"] == {"nodeGroupLabel": "sparkllm.io/node-group"}
    assert stored["engine"]["memFractionStatic"] == 0.57
    assert stored["restartPolicy"]["backoffSeconds"] == [10, 30, 60, 300]


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (
            {
                "spec.engine.pipelineParallel": 2,
                "spec.engine.layerPartition": [21, 22],
                "spec.placement.nodeGroups": [["spark-a0", "spark-a1"]],
            },
            "spec.engine.pipelineParallel",
            "pipelineParallel is immutable",
        ),
        (
            {
                "spec.engine.tensorParallel": 2,
                "spec.placement.nodeGroups": [
                    ["spark-a0", "spark-a1", "spark-a2", "s3", "s4", "s5"]
                ],
            },
            "spec.engine.tensorParallel",
            "tensorParallel is immutable",
        ),
    ],
    ids=["pipeline-parallel", "tensor-parallel"],
)
def test_immutable_field_cannot_change(
    crd_installed: DevCluster, namespace: str, change: dict[str, Any], field: str, message: str
) -> None:
    base = load_base_manifest()
    crd_installed.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(base))
    changed = apply_changes(base, set_values=change, delete=[])
    validate_inference_cluster(changed)  # valid on its own: only the transition is refused
    result = _apply(crd_installed, changed, namespace=namespace)
    assert result.returncode != 0
    assert field in result.stderr
    assert message in result.stderr


def test_mutable_fields_can_change(crd_installed: DevCluster, namespace: str) -> None:
    base = load_base_manifest()
    crd_installed.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(base))
    changed = apply_changes(
        base,
        set_values={
            "spec.engine.memFractionStatic": 0.5,
            "spec.placement.nodeGroups": [["spark-b0", "spark-b1", "spark-b2"]],
        },
        delete=[],
    )
    result = _apply(crd_installed, changed, namespace=namespace)
    assert result.returncode == 0, result.stderr


def test_explain_shows_field_descriptions(crd_installed: DevCluster) -> None:
    outputs: list[str] = []

    def explained() -> bool:
        result = crd_installed.kubectl("explain", "icl.spec.engine", check=False)
        outputs.append(result.stdout)
        return result.returncode == 0 and "pipelineParallel" in result.stdout

    wait_until(explained, timeout=60, what="kubectl explain icl.spec.engine")
    text = outputs[-1]
    assert "memFractionStatic is the fraction of the node's memory" in " ".join(text.split())
    assert "Default 0.57" in text


def test_get_shows_printer_columns(crd_installed: DevCluster, namespace: str) -> None:
    crd_installed.kubectl("apply", "-n", namespace, "-f", str(ONE_REPLICA_SAMPLE))
    header = crd_installed.kubectl("get", "icl", "-n", namespace).stdout.splitlines()[0]
    assert header.split() == ["NAME", "REPLICAS", "READY", "PHASE", "START", "MODEL", "PP", "AGE"]
    row = crd_installed.kubectl("get", "icl", "-n", namespace).stdout.splitlines()[1].split()
    assert row[0] == "deepseek-v4-flash"
    assert "deepseek-v4-flash" in row[1:]
    assert "3" in row[1:]


def test_scale_changes_spec_replicas(crd_installed: DevCluster, namespace: str) -> None:
    manifest = apply_changes(
        yaml.safe_load(LABELLED_SAMPLE.read_text()), set_values={"spec.replicas": 1}, delete=[]
    )
    crd_installed.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))
    crd_installed.kubectl("scale", "-n", namespace, "icl/deepseek-v4-flash", "--replicas=2")
    assert _get(crd_installed, "deepseek-v4-flash", namespace=namespace)["spec"]["replicas"] == 2


def test_scale_beyond_explicit_groups_is_refused(crd_installed: DevCluster, namespace: str) -> None:
    crd_installed.kubectl("apply", "-n", namespace, "-f", str(ONE_REPLICA_SAMPLE))
    result = crd_installed.kubectl(
        "scale", "-n", namespace, "icl/deepseek-v4-flash", "--replicas=2", check=False
    )
    assert result.returncode != 0
    assert "replicas must not exceed the number of placement.nodeGroups" in result.stderr
    assert _get(crd_installed, "deepseek-v4-flash", namespace=namespace)["spec"]["replicas"] == 1


# --- differential: pydantic accepts exactly what the API server accepts ---------------------

NODES = ["spark-a0", "spark-a1", "spark-a2", "spark-b0", "spark-b1", "spark-b2"]


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A value for an optional field, or the marker meaning "leave the sample's value"."""
    return st.one_of(st.just(KEEP), strategy)


KEEP = object()
DELETE = object()

FIELD_STRATEGIES: dict[str, st.SearchStrategy[Any]] = {
    "spec.replicas": st.one_of(st.integers(-1, 3), st.sampled_from([16, 17, "1", 1.5, 2.0])),
    "spec.model.numLayers": st.sampled_from([2, 42, 43, 44]),
    "spec.engine.pipelineParallel": st.integers(0, 4),
    "spec.engine.layerPartition": st.one_of(
        st.just(DELETE), st.lists(st.integers(0, 30), min_size=0, max_size=4)
    ),
    "spec.engine.memFractionStatic": st.sampled_from([-0.1, 0, 0.01, 0.57, 0.95, 0.951, 1, 1.0]),
    "spec.engine.contextLength": st.one_of(
        st.sampled_from([0, 8192, 8193, 1_048_576, 1_048_577]), st.integers(1, 20_000)
    ),
    "spec.admission.maxInputTokens": st.one_of(
        st.sampled_from([0, 8191, 12287, 12288]), st.integers(1, 20_000)
    ),
    "spec.engine.cudaGraphMaxBatchSize": st.integers(-1, 1025),
    "spec.admission.maxTokensPolicy": st.sampled_from(["clamp", "reject", "truncate"]),
    "spec.engine.tensorParallel": st.integers(0, 2),
    "spec.model.servedName": st.sampled_from(["deepseek-v4-flash", "org/model.v2", "a:b", ""]),
    "spec.model.path": st.sampled_from(["/models/x", "models/x", "/", "/a b"]),
    "metadata.name": st.sampled_from(["a", "deepseek-v4-flash", "x" * 40, "x" * 41, "9lives"]),
    "spec.engine.image": st.sampled_from(
        [
            "nvcr.io/nvidia/sglang:26.07-py3",
            "nvcr.io/nvidia/sglang:latest",
            "nvcr.io/nvidia/sglang",
            "localhost:5000/sglang:v1",
            "localhost:5000/sglang",
            "lmsysorg/sglang@sha256:" + "a" * 64,
            "",
        ]
    ),
    "spec.engine.extraArgs": st.lists(
        st.sampled_from(
            [
                "--log-level",
                "debug",
                "--pp-size",
                "--port=1",
                "--mem-frac=0.5",
                "--model-impl",
                "--pp",
                "--portable",
                "-",
                "",
            ]
        ),
        max_size=3,
    ),
    "spec.engine.env": st.lists(
        st.fixed_dictionaries(
            {
                "name": st.sampled_from(["NCCL_DEBUG", "NCCL_IB_HCA", "X", "1X"]),
                "value": st.just("v"),
            }
        ),
        max_size=2,
    ),
    "spec.engine.toolCallParser": st.sampled_from(["deepseekv4", "deepseekv5"]),
    "spec.placement": st.one_of(
        st.fixed_dictionaries(
            {
                "nodeGroups": st.lists(
                    st.lists(st.sampled_from(NODES), min_size=0, max_size=4), max_size=3
                )
            }
        ),
        st.just({"nodeGroupLabel": "sparkllm.io/node-group"}),
        st.just({"nodeGroupLabel": "bad key!"}),
        st.just({}),
        st.just({"nodeGroups": [NODES[:3]], "nodeGroupLabel": "sparkllm.io/node-group"}),
    ),
    "spec.network.distInitPort": st.sampled_from([1023, 5000, 30000, 65535, 65536]),
    "spec.network.topology": st.sampled_from(["ring", "switch", "mesh"]),
    "spec.restartPolicy.backoffSeconds": st.lists(st.integers(0, 100), max_size=4),
    "spec.monitoring.serviceMonitor": st.sampled_from([True, False, "true"]),
    "spec.engine.unknownField": st.just(1),
}


@st.composite
def generated_manifests(draw: st.DrawFn) -> dict[str, Any]:
    """The sample with a few fields replaced by values that may or may not be valid."""
    base = load_base_manifest()
    chosen = draw(st.sets(st.sampled_from(sorted(FIELD_STRATEGIES)), min_size=1, max_size=4))
    set_values: dict[str, Any] = {}
    delete: list[str] = []
    for path in sorted(chosen):
        value = draw(FIELD_STRATEGIES[path])
        if value is DELETE:
            delete.append(path)
        elif value is not KEEP:
            set_values[path] = value
    return apply_changes(base, set_values=set_values, delete=delete)


def test_pydantic_agrees_with_the_api_server(
    crd_installed: DevCluster, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    verdicts = {"accepted": 0, "rejected": 0}
    disagreements: list[str] = []
    client = kubernetes.config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(crd_installed.paths.kubeconfig)
    )
    api = kubernetes.client.CustomObjectsApi(client)

    @settings(
        max_examples=DIFFERENTIAL_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(manifest=generated_manifests())
    def check(manifest: dict[str, Any]) -> None:
        try:
            validate_inference_cluster(manifest)
            pydantic_accepts, pydantic_says = True, ""
        except SpecError as exc:
            pydantic_accepts, pydantic_says = False, str(exc)
        server_accepts, server_says = _dry_run_create(api, manifest, namespace=namespace)
        verdicts["accepted" if server_accepts else "rejected"] += 1
        if pydantic_accepts != server_accepts:
            disagreements.append(
                f"spec={json.dumps(manifest['spec'])}\n pydantic: {pydantic_says or 'accepts'}"
                f"\n apiserver: {server_says or 'accepts'}"
            )
        assert pydantic_accepts == server_accepts, disagreements[-1]

    try:
        check()
    finally:
        client.close()  # type: ignore[no-untyped-call]
    with capsys.disabled():
        print(
            f"\ndifferential: {sum(verdicts.values())} generated specs, "
            f"{verdicts['accepted']} accepted and {verdicts['rejected']} rejected by both"
        )
    assert verdicts["accepted"] > 0
    assert verdicts["rejected"] > 0


# --- the administrator's policy: the chart's ValidatingAdmissionPolicy ---------------------

POLICY_NODES = ["spark-a0", "spark-a1", "spark-a2"]
POLICY_CASES: list[tuple[str, dict[str, Any]]] = [
    ("foreign-image", {"spec.engine.image": "evil.io/x:1"}),
    ("host-path", {"spec.model.path": "/var/lib/kubelet"}),
    ("dot-dot-path", {"spec.model.path": "/models/../var/lib/kubelet"}),
    ("foreign-nodes", {"spec.placement.nodeGroups": [["spark-a0", "spark-b1", "spark-b2"]]}),
    ("foreign-label", {"spec.placement": {"nodeGroupLabel": "sparkllm.io/node-group"}}),
    ("wildcard-host", {"spec.exposure": {"type": "Ingress", "ingress": {
        "host": "*.corp.example.com", "tlsSecretName": "tls",
        "certManagerIssuer": {"kind": "ClusterIssuer", "name": "letsencrypt-prod"}}}}),
    ("foreign-issuer", {"spec.exposure": {"type": "Ingress", "ingress": {
        "host": "llm.example.com", "tlsSecretName": "tls",
        "certManagerIssuer": {"kind": "ClusterIssuer", "name": "letsencrypt-prod"}}}}),
    ("whole-listener", {"spec.exposure": {"type": "HTTPRoute", "httpRoute": {
        "parentRefs": [{"name": "gw"}]}}}),
    ("foreign-route-host", {"spec.exposure": {"type": "HTTPRoute", "httpRoute": {
        "parentRefs": [{"name": "gw"}], "hostnames": ["llm.example.com", "evil.com"]}}}),
    ("foreign-source", {"spec.model.source": {"https": {"urls": [
        {"url": "https://s3.corp.example/a.json"}, {"url": "https://Evil.com:8443/b"}]}}}),
    ("plain-http-source", {"spec.model.source": {"s3": {
        "endpoint": "http://s3.corp.example:9000", "bucket": "models"}}}),
    ("source-at-prefix", {"spec.model.path": "/models/.", "spec.model.source": {"huggingFace": {
        "repo": "a/b", "revision": "0123456789abcdef0123456789abcdef01234567"}}}),
]  # fmt: skip


def test_the_charts_admission_policy_refuses_what_the_operator_would(
    crd_installed: DevCluster, namespace: str
) -> None:
    """The chart's ValidatingAdmissionPolicy and binding (bound to this namespace only),
    rendered from policy values, on the real API server: each case is refused on create
    with the message the operator's own check (admin_policy.py) gives for it; the sample
    passes; on update a changed spec is checked and a metadata-only change is not."""
    policy = {
        "placement": {"namespaces": {namespace: {"nodes": POLICY_NODES}}},
        "exposure": {
            "allowedHosts": ["llm.example.com"],
            "allowedIssuers": [{"kind": "ClusterIssuer", "name": "letsencrypt-staging"}],
        },
        "modelSources": {"allowedHosts": ["huggingface.co", "*.corp.example"]},
    }
    values = {"watchNamespaces": [namespace], "policy": policy}
    rendered = render_chart(values, release=f"vap-{namespace[-5:]}", namespace=namespace)
    objs = [o for o in rendered if o["kind"].startswith("ValidatingAdmissionPolicy")]
    assert sorted(o["kind"] for o in objs) == [
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"
    ]  # fmt: skip
    operator_policy = admin_policy_from(policy, where="in the test")
    base = yaml.safe_load(ONE_REPLICA_SAMPLE.read_text())
    manifest = yaml.safe_dump_all(objs)
    crd_installed.kubectl("apply", "--server-side", "-f", "-", input=manifest)
    try:
        first = apply_changes(base, set_values=dict(POLICY_CASES[0][1]), delete=[])
        wait_until(
            lambda: _apply(crd_installed, first, namespace=namespace, dry_run=True).returncode != 0,
            timeout=30,
            interval=0.2,
            what="the admission policy to take effect",
        )
        vap_name = objs[0]["metadata"]["name"]

        def type_checked() -> dict[str, Any] | None:
            vap = crd_installed.kubectl_json("get", "validatingadmissionpolicy", vap_name)
            status: dict[str, Any] = vap.get("status") or {}
            done = status.get("observedGeneration") == vap["metadata"]["generation"]
            return status if done else None

        status = wait_until(type_checked, timeout=60, what="the policy's type checking")
        assert not (status.get("typeChecking") or {}).get("expressionWarnings"), status
        messages = []
        for name, change in POLICY_CASES:
            changed = apply_changes(base, set_values=dict(change), delete=[])
            changed["metadata"]["namespace"] = namespace
            expected = policy_violations(validate_inference_cluster(changed), operator_policy)
            result = _apply(crd_installed, changed, namespace=namespace, dry_run=True)
            assert result.returncode != 0, f"{name}: admitted"
            assert "is forbidden: ValidatingAdmissionPolicy" in result.stderr, result.stderr
            assert expected, f"{name}: the operator's check allows it"
            assert expected[0] in result.stderr, f"{name}: {result.stderr}"
            messages.append(f"{name}: {result.stderr.strip()}")
        # The policy's own sample passes; an update that changes spec is checked, one that
        # only labels the object is not.
        crd_installed.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(base))
        name = base["metadata"]["name"]
        patch = json.dumps({"spec": {"engine": {"image": "evil.io/x:2"}}})
        refused = crd_installed.kubectl(
            "patch", "icl", name, "-n", namespace, "--type=merge", "-p", patch, check=False
        )
        assert refused.returncode != 0
        assert "spec.engine.image 'evil.io/x:2' is not from an allowed repository" in refused.stderr
        messages.append(f"update: {refused.stderr.strip()}")
        crd_installed.kubectl("label", "icl", name, "-n", namespace, "team=a")
    finally:
        crd_installed.kubectl(
            "delete", "--ignore-not-found", "-f", "-", input=manifest, check=False
        )
    print("\n" + "\n".join(messages))
