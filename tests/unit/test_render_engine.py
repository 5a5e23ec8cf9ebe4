"""Each rank's SGLang command line and environment, pure, against the pinned SGLang.

The command is where a spec meets the engine: a flag the pinned SGLang does not know
makes every rank exit at start, a flag with a float-noise value makes ConfigApplied
disagree, and an ``extraArgs`` entry that re-sets an operator flag silently wins or
loses by position. These tests pin the exact argv per rank, every flag against
``known_flags()`` and the pinned argparse model, and the RoCE/NCCL environment.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

import sparkllm.sglang_contract.command as engine_module
from sparkllm.api import (
    OPERATOR_OWNED_ENV,
    EnvVar,
    InferenceCluster,
    InferenceClusterSpec,
    validate_inference_cluster,
)
from sparkllm.errors import SpecError
from sparkllm.render import ReplicaPlan, render_replica
from sparkllm.render.engine import engine_env
from sparkllm.render.ranks import EngineKeyRef
from sparkllm.sglang_contract.argv import flag_name, option_value
from sparkllm.sglang_contract.command import engine_args, launched_args
from sparkllm.sglang_contract.fields import CUDA_GRAPH_DECODE_FLAG, ENGINE_API_KEY_ENV
from sparkllm.sglang_contract.flags import known_flags, parse_sglang_argv

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "manifests" / "samples" / "deepseek-v4-flash.yaml"
RANK0_IP = "10.0.0.10"


def sample_doc() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    return doc


def spec_with(**sections: dict[str, Any]) -> InferenceClusterSpec:
    """The sample's spec with keys of sections replaced (``None`` removes a key)."""
    doc = copy.deepcopy(sample_doc())
    for section, changes in sections.items():
        target = doc["spec"].setdefault(section, {})
        for key, value in changes.items():
            if value is None:
                target.pop(key, None)
            else:
                target[key] = value
    return validate_inference_cluster(doc).spec


def with_extra_args(spec: InferenceClusterSpec, *args: str) -> InferenceClusterSpec:
    """Bypass the API's own extraArgs rule: render must refuse on its own, too."""
    engine = spec.engine.model_copy(update={"extra_args": tuple(args)})
    return spec.model_copy(update={"engine": engine})


def value_of(args: list[str], flag: str) -> str:
    """The flag's value in either form (``--flag VALUE`` or ``--flag=VALUE``)."""
    value = option_value(args, flag)
    assert value is not None, f"{flag} not rendered"
    return value


# --- the command line ------------------------------------------------------------------


def test_rank0_command_line_of_the_sample() -> None:
    # no --api-key: the launcher adds it inside the process (issue 25)
    assert engine_args(spec_with(), rank=0, rank0_ip=RANK0_IP) == [
        "--model-path", "/models/DeepSeek-V4-Flash-NVFP4",
        "--served-model-name", "deepseek-v4-flash",
        "--nnodes", "3",
        "--node-rank", "0",
        "--dist-init-addr", "10.0.0.10:5000",
        "--pp-size", "3",
        "--tp-size", "1",
        "--mem-fraction-static", "0.57",
        "--context-length", "12288",
        "--chunked-prefill-size", "4096",
        "--cuda-graph-max-bs-decode", "4",
        "--max-running-requests", "8",
        "--host", "0.0.0.0",
        "--port", "30000",
        "--enable-metrics",
        "--tool-call-parser", "deepseekv4",
        "--reasoning-parser", "deepseek-v4",
    ]  # fmt: skip


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_ranks_differ_only_in_node_rank(rank: int) -> None:
    spec = spec_with()
    rank0 = engine_args(spec, rank=0, rank0_ip=RANK0_IP)
    args = engine_args(spec, rank=rank, rank0_ip=RANK0_IP)
    assert value_of(args, "--node-rank") == str(rank)
    assert value_of(args, "--nnodes") == value_of(args, "--pp-size") == "3"
    assert value_of(args, "--dist-init-addr") == "10.0.0.10:5000"  # rank 0's, on every rank
    differing = [(a, b) for a, b in zip(rank0, args, strict=True) if a != b]
    assert differing == ([] if rank == 0 else [("0", str(rank))])


def test_dist_init_port_and_spec_numbers_reach_the_flags() -> None:
    spec = spec_with(
        engine={"contextLength": 16384, "chunkedPrefillSize": 2048, "cudaGraphMaxBatchSize": 8,
                "maxRunningRequests": 16, "pipelineParallel": 2, "layerPartition": [21, 22]},
        network={"distInitPort": 6123},
        placement={"nodeGroups": [["n0", "n1"]]},
        admission={"maxInputTokens": 8192},
    )  # fmt: skip
    args = engine_args(spec, rank=1, rank0_ip="192.168.7.1")
    assert value_of(args, "--dist-init-addr") == "192.168.7.1:6123"
    assert value_of(args, "--context-length") == "16384"
    assert value_of(args, "--chunked-prefill-size") == "2048"
    assert value_of(args, CUDA_GRAPH_DECODE_FLAG) == "8"
    assert value_of(args, "--max-running-requests") == "16"
    assert value_of(args, "--nnodes") == value_of(args, "--pp-size") == "2"


@pytest.mark.parametrize(
    ("engine", "present", "absent"),
    [
        ({}, ["--tool-call-parser", "--reasoning-parser"], []),
        ({"toolCallParser": None}, ["--reasoning-parser"], ["--tool-call-parser"]),
        ({"reasoningParser": None}, ["--tool-call-parser"], ["--reasoning-parser"]),
        ({"toolCallParser": None, "reasoningParser": None}, [],
         ["--tool-call-parser", "--reasoning-parser"]),
        ({"toolCallParser": "qwen3_coder", "reasoningParser": "qwen3"},
         ["--tool-call-parser", "--reasoning-parser"], []),
    ],
)  # fmt: skip
def test_parsers_only_when_set(
    engine: dict[str, Any], present: list[str], absent: list[str]
) -> None:
    spec = spec_with(engine=engine)
    args = engine_args(spec, rank=0, rank0_ip=RANK0_IP)
    for flag in present:
        assert args.count(flag) == 1
    for flag in absent:
        assert flag not in args
    if "--tool-call-parser" in present:
        assert value_of(args, "--tool-call-parser") == spec.engine.tool_call_parser
    if "--reasoning-parser" in present:
        assert value_of(args, "--reasoning-parser") == spec.engine.reasoning_parser


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_the_engine_key_is_on_no_rank_command_line(rank: int) -> None:
    """Issue 25: not even as ``$(VAR)``, which the kubelet would expand into the
    process's command line; rank 0's launcher adds it from its env inside the process."""
    args = engine_args(spec_with(), rank=rank, rank0_ip=RANK0_IP)
    assert [arg for arg in args if flag_name(arg) == "--api-key"] == []
    assert not any(ENGINE_API_KEY_ENV in arg for arg in args)
    launched = launched_args(args, {ENGINE_API_KEY_ENV: "-dash-leading-key"})
    assert launched == [*args, "--api-key=-dash-leading-key"]  # one word, as SGLang reads it
    assert parse_sglang_argv(launched)["api_key"] == "-dash-leading-key"
    assert launched_args(args, {}) == args  # ranks > 0: no key in their env


@pytest.mark.parametrize(
    ("fraction", "rendered"),
    [
        (0.57, "0.57"),
        (0.5, "0.5"),
        (0.95, "0.95"),
        (0.1, "0.1"),
        (0.3, "0.3"),
        (0.875, "0.875"),
        (0.00001, "1e-05"),
    ],
)
def test_mem_fraction_static_has_no_float_noise(fraction: float, rendered: str) -> None:
    spec = spec_with(engine={"memFractionStatic": fraction})
    text = value_of(engine_args(spec, rank=0, rank0_ip=RANK0_IP), "--mem-fraction-static")
    assert text == rendered
    assert float(text) == fraction  # what argparse's float() reads back


@pytest.mark.parametrize("fraction", [0.123456789, 0.57000001, 0.9499999999999])
def test_mem_fraction_static_round_trips_every_allowed_value(fraction: float) -> None:
    """No fixed precision: 0.123456789 must not become 0.123457 (SGLang would run with it)."""
    spec = spec_with(engine={"memFractionStatic": fraction})
    text = value_of(engine_args(spec, rank=0, rank0_ip=RANK0_IP), "--mem-fraction-static")
    assert float(text) == fraction


# --- extraArgs --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra",
    [
        ["--watchdog-timeout", "600"],
        ["--watchdog-timeout=600", "--log-level", "debug"],
        ["--enable-metrics-for-all-schedulers"],
    ],
)
def test_extra_args_are_appended_verbatim(extra: list[str]) -> None:
    spec = spec_with(engine={"extraArgs": extra})
    base = engine_args(spec_with(), rank=1, rank0_ip=RANK0_IP)
    args = engine_args(spec, rank=1, rank0_ip=RANK0_IP)
    assert args == base + extra


@pytest.mark.parametrize(
    "extra",
    [
        ["--watchdog-timeout", "soon"],  # a value 0.5.23 refuses
        ["--log-level"],  # an arity 0.5.23 refuses
        ["stray"],
        ["-x"],
        ["--no-such-flag", "1"],  # unknown to 0.5.23
        ["--watchdog", "600"],  # an abbreviation of a flag no rule guards
    ],
)  # fmt: skip
def test_what_only_an_sglang_version_judges_is_rendered_for_the_launch_check(
    extra: list[str],
) -> None:
    # The API and the renderer refuse only what holds for every SGLang version; these go to
    # the rank's command line, and the image's own SGLang judges them before the engine
    # starts (launch-check, condition LaunchChecked).
    spec = spec_with(engine={"extraArgs": extra})
    assert engine_args(spec, rank=0, rank0_ip=RANK0_IP)[-len(extra) :] == extra


@pytest.mark.parametrize(
    ("extra", "written"),
    [
        (["--pp-size", "2"], "--pp-size"),
        (["--pipeline-parallel-size=2"], "--pipeline-parallel-size"),
        (["--nccl-init-addr", "1.2.3.4:5"], "--nccl-init-addr"),
        (["--api-key", "literal"], "--api-key"),
        (["--api-key=-literal"], "--api-key"),
        (["--enable-metrics"], "--enable-metrics"),
        (["--host", "127.0.0.1"], "--host"),
        (["--cuda-graph-max-bs-decode", "16"], "--cuda-graph-max-bs-decode"),
    ],
)
def test_operator_owned_flags_are_refused_by_render_and_by_the_api(
    extra: list[str], written: str
) -> None:
    with pytest.raises(SpecError, match="extraArgs must not set a flag the operator owns"):
        spec_with(engine={"extraArgs": extra})
    spec = with_extra_args(spec_with(), *extra)
    with pytest.raises(SpecError) as caught:
        engine_args(spec, rank=1, rank0_ip=RANK0_IP)
    assert f"{written} is set by the operator from the spec" in str(caught.value)


def test_a_rendered_flag_unknown_to_sglang_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard against an operator bug: a pinned SGLang without --enable-metrics."""
    without = frozenset(known_flags() - {"--enable-metrics"})
    monkeypatch.setattr(engine_module, "known_flags", lambda: without)
    with pytest.raises(SpecError, match=r"unknown to the pinned SGLang: \['--enable-metrics'\]"):
        engine_args(spec_with(), rank=0, rank0_ip=RANK0_IP)


SPEC_VARIANTS: dict[str, dict[str, dict[str, Any]]] = {
    "sample": {},
    "no-parsers": {"engine": {"toolCallParser": None, "reasoningParser": None}},
    "extra-args": {"engine": {"extraArgs": ["--watchdog-timeout", "900", "--log-level=info"]}},
    "switch": {"network": {"topology": "switch"}, "engine": {"layerPartition": None}},
}


@pytest.mark.parametrize("variant", sorted(SPEC_VARIANTS))
@pytest.mark.parametrize(("rank", "api_key"), [(0, True), (1, False), (2, False)])
def test_every_emitted_flag_exists_and_parses_as_the_pinned_sglang(
    variant: str, rank: int, api_key: bool
) -> None:
    spec = spec_with(**SPEC_VARIANTS[variant])
    environ = {ENGINE_API_KEY_ENV: "engine-key"} if api_key else {}
    args = launched_args(engine_args(spec, rank=rank, rank0_ip=RANK0_IP), environ)
    flags = [name for name in map(flag_name, args) if name is not None]
    assert flags
    assert [f for f in flags if f not in known_flags()] == []
    parsed = parse_sglang_argv(args)
    engine = spec.engine
    assert parsed["model_path"] == spec.model.path
    assert parsed["node_rank"] == str(rank)
    assert parsed["pp_size"] == str(engine.pipeline_parallel)
    assert parsed["mem_fraction_static"] == "0.57"
    assert parsed["cuda_graph_max_bs_decode"] == str(engine.cuda_graph_max_batch_size)
    assert parsed["enable_metrics"] is True
    assert ("api_key" in parsed) is api_key


# --- the environment --------------------------------------------------------------------

ROCE = [
    {"name": "NCCL_SOCKET_IFNAME", "value": "enP7s7"},
    {"name": "GLOO_SOCKET_IFNAME", "value": "enP7s7"},
    {"name": "NCCL_IB_HCA", "value": "rocep1s0f0,rocep1s0f1,roceP2p1s0f0,roceP2p1s0f1"},
    {"name": "NCCL_IB_GID_INDEX", "value": "3"},
]
RING = [
    {"name": "NCCL_IB_SUBNET_AWARE_ROUTING", "value": "1"},
    {"name": "NCCL_IB_MERGE_NICS", "value": "0"},
    {"name": "NCCL_NET_PLUGIN", "value": "none"},
]
PARTITION = [{"name": "SGLANG_PP_LAYER_PARTITION", "value": "14,14,15"}]
USER = [{"name": "ZED", "value": "last-alphabetically"}, {"name": "ALPHA", "value": ""}]


@pytest.mark.parametrize(
    ("sections", "expected"),
    [
        pytest.param({}, ROCE + RING + PARTITION, id="sample-ring-with-partition"),
        pytest.param({"network": {"topology": "switch"}}, ROCE + PARTITION, id="switch"),
        pytest.param({"engine": {"layerPartition": None}}, ROCE + RING, id="no-partition"),
        pytest.param(
            {"network": {"topology": "switch"}, "engine": {"layerPartition": None, "env": USER}},
            ROCE + USER,
            id="switch-no-partition-user-env",
        ),
        pytest.param({"engine": {"env": USER}}, ROCE + RING + PARTITION + USER, id="user-env-last"),
        pytest.param(
            {"network": {"socketInterface": "eth1", "ibHCAs": ["mlx5_0:1"], "ibGIDIndex": 0}},
            [
                {"name": "NCCL_SOCKET_IFNAME", "value": "eth1"},
                {"name": "GLOO_SOCKET_IFNAME", "value": "eth1"},
                {"name": "NCCL_IB_HCA", "value": "mlx5_0:1"},
                {"name": "NCCL_IB_GID_INDEX", "value": "0"},
                *RING,
                *PARTITION,
            ],
            id="network-fields",
        ),
        pytest.param(
            {"engine": {"layerPartition": [20, 23], "pipelineParallel": 2},
             "placement": {"nodeGroups": [["n0", "n1"]]}},
            ROCE + RING + [{"name": "SGLANG_PP_LAYER_PARTITION", "value": "20,23"}],
            id="two-stage-partition",
        ),
    ],
)  # fmt: skip
def test_engine_env(sections: dict[str, dict[str, Any]], expected: list[dict[str, str]]) -> None:
    env = engine_env(spec_with(**sections))
    assert env == expected
    assert all(isinstance(var["value"], str) for var in env)  # Kubernetes wants strings


def test_engine_env_is_a_fresh_list_each_call() -> None:
    spec = spec_with()
    first = engine_env(spec)
    first.append({"name": "MUTATED", "value": "1"})
    assert engine_env(spec) == ROCE + RING + PARTITION


# --- the env the operator owns (issue 25) ------------------------------------------------

_PREFLIGHT_ON = {"preflight": {"mode": "gate", "minBusBandwidthGbps": 10}}


def _rank_containers(ic: InferenceCluster) -> list[dict[str, Any]]:
    plan = ReplicaPlan(
        index=0, group_key="g", nodes=("n0", "n1", "n2"), rank0_ip=RANK0_IP,
        generation=1, node_ips=(RANK0_IP, "10.0.0.11", "10.0.0.12"),
    )  # fmt: skip
    key = EngineKeyRef(secret="k", key="token")
    containers: list[dict[str, Any]] = []
    for obj in render_replica(ic, plan=plan, engine_key=key):
        if obj["kind"] == "StatefulSet":
            pod = obj["spec"]["template"]["spec"]
            containers += [*pod.get("initContainers", []), *pod["containers"]]
    return containers


def test_every_variable_the_operator_sets_in_a_rank_pod_is_owned() -> None:
    """OPERATOR_OWNED_ENV (what the API refuses in spec.engine.env) holds every name any
    container of any rank gets besides the user's: with the preflight and the bandwidth
    collective on, a layer partition and the engine key, so every container is there."""
    doc = copy.deepcopy(sample_doc())
    doc["spec"]["network"].update(_PREFLIGHT_ON)
    doc["spec"]["engine"]["env"] = [{"name": "NCCL_DEBUG", "value": "INFO"}]
    containers = _rank_containers(validate_inference_cluster(doc))
    names = {"verify-network", "verify-bandwidth", "engine"}
    assert names <= {c["name"] for c in containers}
    set_by_operator = {
        var["name"] for c in containers for var in c.get("env", []) if var["name"] != "NCCL_DEBUG"
    }
    assert set_by_operator <= set(OPERATOR_OWNED_ENV)
    assert {"PYTHONPATH", ENGINE_API_KEY_ENV, "SGLANG_PP_LAYER_PARTITION"} <= set_by_operator
    for container in containers:  # and no container holds a name twice
        env_names = [var["name"] for var in container.get("env", [])]
        assert len(env_names) == len(set(env_names)), container["name"]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ([{"name": "PYTHONPATH", "value": "/opt/extra"}], "PYTHONPATH is set by the operator"),
        (
            [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}],
            "A is given more than once",
        ),
    ],
)
def test_an_env_the_api_let_through_is_invalid_spec_not_an_apply_loop(
    env: list[dict[str, str]], message: str
) -> None:
    """An object stored before the API refused these (the issue's spec): render refuses it
    with a SpecError naming the field, which the operator reports as InvalidSpec."""
    doc = copy.deepcopy(sample_doc())
    doc["spec"]["network"].update(_PREFLIGHT_ON)
    ic = validate_inference_cluster(doc)
    engine = ic.spec.engine.model_copy(update={"env": tuple(EnvVar(**var) for var in env)})
    stored = ic.model_copy(update={"spec": ic.spec.model_copy(update={"engine": engine})})
    with pytest.raises(SpecError, match=rf"^spec\.engine\.env: {message}"):
        _rank_containers(stored)
