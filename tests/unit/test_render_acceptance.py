"""The acceptance request annotations, the Job rendered for them, and its RBAC.

Pinned: a bad option fails the request before any Job exists, naming the option; the Job's
command parses with ``sparkllm bench``'s own parser, runs the checklist against the front
door with the user's key by reference, reads the InferenceCluster, and keeps both reports
in its log; its ServiceAccount may read this one InferenceCluster and nothing else.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest

from sparkllm.bench.cli import configure_parser
from sparkllm.errors import SpecError
from sparkllm.keys import (
    ANNOTATION_ACCEPTANCE,
    ANNOTATION_ACCEPTANCE_OPTIONS,
    ANNOTATION_ACCEPTANCE_SET_BASELINE,
    ANNOTATION_BENCHMARK_USER,
)
from sparkllm.render.acceptance import (
    AcceptanceRequest,
    acceptance_job_name,
    acceptance_selector,
    parse_acceptance_request,
    render_acceptance_job,
    render_acceptance_rbac,
)
from sparkllm.render.benchmark import BENCH_API_KEY_ENV
from tests.unit.test_render_benchmark import IMAGE, MODEL_PATH, NAME, NAMESPACE, UID, cluster

OPTIONS = "soak-seconds=60 arrival-rate=0.05 tolerance=ttftP95Ms=0.3,e2eP95Ms=0.5"


def test_no_annotation_is_no_request() -> None:
    assert parse_acceptance_request({}) is None
    assert parse_acceptance_request({ANNOTATION_ACCEPTANCE_OPTIONS: OPTIONS}) is None


def test_options_are_checked_and_kept_in_a_fixed_order() -> None:
    request = parse_acceptance_request(
        {ANNOTATION_ACCEPTANCE: " alice ", ANNOTATION_ACCEPTANCE_OPTIONS: OPTIONS}
    )
    assert request == AcceptanceRequest(
        user="alice",
        options=(
            ("arrival-rate", "0.05"),
            ("soak-seconds", "60"),
            ("tolerance", "ttftP95Ms=0.3,e2eP95Ms=0.5"),
        ),
    )
    flagged = parse_acceptance_request(
        {ANNOTATION_ACCEPTANCE: "alice", ANNOTATION_ACCEPTANCE_SET_BASELINE: "True"}
    )
    assert flagged is not None
    assert flagged.set_baseline


@pytest.mark.parametrize(
    ("annotations", "why"),
    [
        ({ANNOTATION_ACCEPTANCE: "a b"}, "must name a user"),
        ({ANNOTATION_ACCEPTANCE_OPTIONS: "soak=5"}, "'soak=5' is not name=value of a known option"),
        ({ANNOTATION_ACCEPTANCE_OPTIONS: "soak-seconds"}, "is not name=value"),
        ({ANNOTATION_ACCEPTANCE_OPTIONS: "soak-seconds=-1"}, "'-1' must be positive"),
        ({ANNOTATION_ACCEPTANCE_OPTIONS: "scale8-requests=1.5"}, "'1.5' is not a int"),
        ({ANNOTATION_ACCEPTANCE_OPTIONS: "sections=stress,speed"}, "unknown section(s) ['speed']"),
        ({ANNOTATION_ACCEPTANCE_OPTIONS: "tolerance=ttft=1"}, "unknown tolerance metric 'ttft'"),
        ({ANNOTATION_ACCEPTANCE_OPTIONS: "prometheus-url=prom:9090"}, "not an http(s) URL"),
        ({ANNOTATION_ACCEPTANCE_OPTIONS: "node-label=a-b"}, "not a Prometheus label name"),
        ({ANNOTATION_ACCEPTANCE_OPTIONS: "timeout=5 timeout=6"}, "timeout is given twice"),
        ({ANNOTATION_ACCEPTANCE_SET_BASELINE: "please"}, "true or false"),
    ],
)
def test_an_invalid_request_names_what_is_wrong(annotations: dict[str, str], why: str) -> None:
    with pytest.raises(SpecError) as refused:
        parse_acceptance_request({ANNOTATION_ACCEPTANCE: "alice", **annotations})
    assert why in str(refused.value)


def test_the_job_name_follows_the_request_and_generation() -> None:
    alice = AcceptanceRequest("alice")
    name = acceptance_job_name(NAME, request=alice, generation=3)
    assert name.startswith(f"{NAME}-accept-")
    assert len(name) == len(NAME) + 16
    assert acceptance_job_name(NAME, request=alice, generation=3) == name
    others = [
        acceptance_job_name(NAME, request=alice, generation=4),
        acceptance_job_name(NAME, request=AcceptanceRequest("bob"), generation=3),
        acceptance_job_name(
            NAME, request=AcceptanceRequest("alice", set_baseline=True), generation=3
        ),
        acceptance_job_name(
            NAME, request=AcceptanceRequest("alice", (("soak-seconds", "9"),)), generation=3
        ),
    ]
    assert name not in others
    assert len(set(others)) == len(others)


def _job(request: AcceptanceRequest) -> dict[str, Any]:
    return render_acceptance_job(cluster(), request=request, image=IMAGE, generation=3)


def test_the_job_runs_the_checklist_against_the_front_door_for_the_user() -> None:
    request = AcceptanceRequest("alice", (("soak-seconds", "60"),), set_baseline=True)
    job = render_acceptance_job(cluster(), request=request, image=IMAGE, generation=3)
    assert job["metadata"]["labels"]["app.kubernetes.io/component"] == "acceptance"
    assert acceptance_selector(NAME) == (
        "sparkllm.io/cluster=llm,app.kubernetes.io/component=acceptance"
    )
    assert job["metadata"]["annotations"][ANNOTATION_ACCEPTANCE_SET_BASELINE] == "true"
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == f"{NAME}-acceptance"
    assert pod["automountServiceAccountToken"] is True
    assert pod["restartPolicy"] == "Never"
    assert job["spec"]["backoffLimit"] == 0
    (container,) = pod["containers"]
    assert container["command"] == ["sparkllm"]
    parser = argparse.ArgumentParser()
    configure_parser(parser)
    assert container["args"][0] == "bench"
    args = parser.parse_args(container["args"][1:])
    assert args.accept
    assert args.print_json
    assert args.base_url == f"http://{NAME}.{NAMESPACE}.svc:8000"
    assert args.model == "deepseek-v4-flash"
    assert args.inference_cluster == f"{NAMESPACE}/{NAME}"
    assert args.soak_seconds == 60.0
    assert not args.set_baseline  # the operator writes the baseline, not the Job
    assert str(args.status_summary) == container["terminationMessagePath"]
    # alice asked; the run presents the key the operator generated for its own runs
    assert job["metadata"]["annotations"][ANNOTATION_BENCHMARK_USER] == "alice"
    assert container["env"] == [
        {"name": BENCH_API_KEY_ENV, "valueFrom": {"secretKeyRef": {"name": f"{NAME}-bench-key",
                                                                    "key": "token"}}}
    ]  # fmt: skip
    # Issue 19: the load is sized in the model's own tokens, so the model directory is
    # mounted read-only (as for the benchmark) and named with --tokenizer.
    assert str(args.tokenizer) == MODEL_PATH
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts[MODEL_PATH]["readOnly"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts[MODEL_PATH]["name"]]["hostPath"]["path"] == MODEL_PATH


def test_the_job_may_read_this_inference_cluster_and_nothing_else() -> None:
    account, role, binding = render_acceptance_rbac(cluster())
    assert [o["kind"] for o in (account, role, binding)] == [
        "ServiceAccount", "Role", "RoleBinding",
    ]  # fmt: skip
    assert {o["metadata"]["name"] for o in (account, role, binding)} == {f"{NAME}-acceptance"}
    assert all(o["metadata"]["ownerReferences"][0]["uid"] == UID for o in (account, role))
    assert account["automountServiceAccountToken"] is False  # only the Job's pod mounts it
    assert role["rules"] == [
        {"apiGroups": ["sparkllm.io"], "resources": ["inferenceclusters"],
         "resourceNames": [NAME], "verbs": ["get"]}
    ]  # fmt: skip
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": f"{NAME}-acceptance", "namespace": NAMESPACE}
    ]


def test_no_key_value_in_anything_rendered() -> None:
    job = _job(AcceptanceRequest("alice"))
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert [set(entry) for entry in container["env"]] == [{"name", "valueFrom"}]
    rendered = json.dumps([job, *render_acceptance_rbac(cluster())])
    assert BENCH_API_KEY_ENV in rendered
    assert '"value"' not in rendered
