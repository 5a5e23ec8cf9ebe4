"""The benchmark request annotations and the Job rendered for them.

Each test pins one property a reviewer cares about: the name is a function of the request
and the spec generation only; the command parses with ``sparkllm bench``'s own parser and
points at the front door with the user's key by reference; the pod runs as a locked-down
one-shot that the router can never mistake for an engine.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from sparkllm.api import InferenceCluster, validate_inference_cluster
from sparkllm.bench.cli import configure_parser
from sparkllm.errors import SpecError
from sparkllm.keys import ANNOTATION_BENCHMARK, ANNOTATION_BENCHMARK_SCENARIOS, ANNOTATION_HASH
from sparkllm.render.benchmark import (
    ACTIVE_DEADLINE_SECONDS,
    BENCH_API_KEY_ENV,
    TTL_SECONDS_AFTER_FINISHED,
    BenchmarkRequest,
    benchmark_job_name,
    benchmark_selector,
    parse_benchmark_request,
    render_benchmark_job,
)
from sparkllm.render.objects import desired_hash
from sparkllm.render.product_image import ProductImage
from sparkllm.render.router import engine_discovery_selector

NAME, NAMESPACE, UID = "llm", "serving", "uid-123"
USER, SCENARIOS = ANNOTATION_BENCHMARK, ANNOTATION_BENCHMARK_SCENARIOS
IMAGE = ProductImage("registry.example/sparkllm:9.9.9")
MODEL_PATH = "/models/DeepSeek-V4-Flash-NVFP4"


def cluster(name: str = NAME, **spec_changes: Any) -> InferenceCluster:
    spec: dict[str, Any] = {
        "replicas": 1,
        "model": {"path": MODEL_PATH, "servedName": "deepseek-v4-flash"},
        "engine": {"image": "nvcr.io/nvidia/sglang:26.07-py3", "pipelineParallel": 3},
        "admission": {"apiKeysSecretRef": {"name": "llm-user-keys"}},
        "placement": {"nodeGroups": [["spark-a0", "spark-a1", "spark-a2"]]},
        **spec_changes,
    }
    return validate_inference_cluster(
        {
            "apiVersion": "sparkllm.io/v1alpha1",
            "kind": "InferenceCluster",
            "metadata": {"name": name, "namespace": NAMESPACE, "uid": UID},
            "spec": spec,
        }
    )


def job(scenarios: list[str] | None = None, **changes: Any) -> dict[str, Any]:
    return render_benchmark_job(
        changes.pop("ic", cluster()),
        user=changes.pop("user", "alice"),
        scenarios=scenarios,
        image=IMAGE,
        generation=changes.pop("generation", 4),
    )


def container(rendered: dict[str, Any]) -> dict[str, Any]:
    (only,) = rendered["spec"]["template"]["spec"]["containers"]
    return dict(only)


# --- the request ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({}, None),
        ({"other": "x"}, None),
        ({ANNOTATION_BENCHMARK: "alice"}, BenchmarkRequest("alice")),
        ({ANNOTATION_BENCHMARK: " bob.smith_2 "}, BenchmarkRequest("bob.smith_2")),
        (
            {USER: "alice", SCENARIOS: "niah, short-c1,niah"},
            BenchmarkRequest("alice", ("short-c1", "niah")),  # matrix order, each once
        ),
        ({USER: "alice", SCENARIOS: " , "}, BenchmarkRequest("alice")),
    ],
)  # fmt: skip
def test_annotations_make_a_request(
    annotations: dict[str, str], expected: BenchmarkRequest | None
) -> None:
    assert parse_benchmark_request(annotations) == expected


@pytest.mark.parametrize(
    ("annotations", "named"),
    [
        ({ANNOTATION_BENCHMARK: ""}, ANNOTATION_BENCHMARK),
        ({ANNOTATION_BENCHMARK: "al ice"}, "al ice"),
        ({ANNOTATION_BENCHMARK: "a/b"}, "a/b"),
        ({USER: "alice", SCENARIOS: "short-c2,niah"}, "short-c2"),
    ],
)  # fmt: skip
def test_invalid_requests_name_what_is_wrong(annotations: dict[str, str], named: str) -> None:
    with pytest.raises(SpecError, match=named):
        parse_benchmark_request(annotations)


# --- the name -------------------------------------------------------------------------


def test_the_job_name_depends_on_the_request_and_the_generation_only() -> None:
    alice = BenchmarkRequest("alice")
    name = benchmark_job_name(NAME, request=alice, generation=4)
    prefix, digest = name.rsplit("-", 1)
    assert prefix == f"{NAME}-bench"
    assert len(digest) == 8
    int(digest, 16)  # hex
    assert benchmark_job_name(NAME, request=alice, generation=4) == name
    others = {
        benchmark_job_name(NAME, request=BenchmarkRequest("bob"), generation=4),
        benchmark_job_name(NAME, request=BenchmarkRequest("alice", ("niah",)), generation=4),
        benchmark_job_name(NAME, request=alice, generation=5),
    }
    assert name not in others
    assert len(others) == 3
    assert job()["metadata"]["name"] == name


def test_the_longest_cluster_name_still_gives_a_valid_job_name() -> None:
    longest = "c" * 40  # api.meta.MAX_NAME_LENGTH
    rendered = job(ic=cluster(longest))
    assert len(rendered["metadata"]["name"]) <= 63  # also the job-name label on its pods


# --- the Job ---------------------------------------------------------------------------


def test_the_command_parses_and_targets_the_front_door_with_the_operators_key() -> None:
    bench = container(job(["short-c1", "niah"]))
    assert bench["command"] == ["sparkllm"]
    assert bench["args"][0] == "bench"
    parser = argparse.ArgumentParser()
    configure_parser(parser)
    args = parser.parse_args(bench["args"][1:])  # the benchmark's own parser accepts them
    assert args.base_url == f"http://{NAME}.{NAMESPACE}.svc:8000"  # Service N, port 8000
    assert args.model == "deepseek-v4-flash"
    assert args.api_key_env == BENCH_API_KEY_ENV
    assert args.scenarios == ["short-c1", "niah"]
    assert args.status_summary == Path(bench["terminationMessagePath"])
    assert args.output == Path("/tmp/report.json")
    assert args.tokenizer == Path(MODEL_PATH)  # exact token counts, the documents' basis
    assert bench["env"] == [
        {
            "name": BENCH_API_KEY_ENV,
            # the key the operator generated for its own runs, not the requesting user's
            "valueFrom": {"secretKeyRef": {"name": f"{NAME}-bench-key", "key": "token"}},
        }
    ]
    assert "--scenarios" not in container(job())["args"]  # default: the whole matrix


def test_one_attempt_with_a_deadline_and_a_day_of_history() -> None:
    spec = job()["spec"]
    assert spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] == ACTIVE_DEADLINE_SECONDS == 7200
    assert spec["ttlSecondsAfterFinished"] == TTL_SECONDS_AFTER_FINISHED == 86400
    assert spec["template"]["spec"]["restartPolicy"] == "Never"


def test_owned_labelled_and_invisible_to_the_router() -> None:
    rendered = job()
    meta = rendered["metadata"]
    assert meta["namespace"] == NAMESPACE
    (owner,) = meta["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "InferenceCluster", NAME, UID, True,
    )  # fmt: skip
    selector = dict(pair.split("=") for pair in benchmark_selector(NAME).split(","))
    pod_labels = rendered["spec"]["template"]["metadata"]["labels"]
    for labels in (meta["labels"], pod_labels):
        assert labels.items() >= selector.items()
        assert labels["sparkllm.io/cluster"] == NAME
        assert labels["app.kubernetes.io/component"] == "benchmark"
    assert not pod_labels.items() >= engine_discovery_selector(NAME).items()


def test_locked_down_and_small() -> None:
    pod = job()["spec"]["template"]["spec"]
    bench = container(job())
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    assert bench["securityContext"]["readOnlyRootFilesystem"] is True
    assert bench["securityContext"]["allowPrivilegeEscalation"] is False
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in bench["volumeMounts"]}
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]  # the report's only writable place
    assert mounts[MODEL_PATH]["readOnly"] is True
    assert volumes[mounts[MODEL_PATH]["name"]]["hostPath"]["path"] == MODEL_PATH
    limits = bench["resources"]["limits"]
    assert limits["memory"] in ("512Mi", "1Gi")
    assert bench["resources"]["requests"]["cpu"] == "100m"
    # the summary comes back in the termination message; a run that cannot start leaves
    # the log's tail there instead of nothing
    assert bench["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_with_a_host_path_model_it_runs_where_the_model_is() -> None:
    pod = job()["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    nodes = {t["matchFields"][0]["values"][0] for t in terms["nodeSelectorTerms"]}
    assert nodes == {"spark-a0", "spark-a1", "spark-a2"}
    on_claim = cluster(
        model={
            "path": MODEL_PATH,
            "servedName": "deepseek-v4-flash",
            "persistentVolumeClaim": {"claimName": "weights"},
        }
    )
    claim_pod = job(ic=on_claim)["spec"]["template"]["spec"]
    assert "affinity" not in claim_pod
    assert {
        "name": "model",
        "persistentVolumeClaim": {"claimName": "weights", "readOnly": True},
    } in (claim_pod["volumes"])


def test_stamped_with_its_hash_and_pure() -> None:
    rendered = job()
    stamped = rendered["metadata"]["annotations"][ANNOTATION_HASH]
    assert stamped == desired_hash(rendered)
    assert job() == rendered  # pure: same inputs, same object
