"""The SGLang command line and environment of one rank: pure, and checked against SGLang.

Every flag emitted here must exist in the pinned SGLang's flag table
(``sglang_flags.json``, extracted from the wheel); ``engine_args`` asserts it, and a unit
test renders the samples and checks each flag too. The layer partition has no flag in
SGLang — it is the env ``SGLANG_PP_LAYER_PARTITION``. The engine API key never appears
in the pod spec: the args say ``--api-key=$(SPARKLLM_ENGINE_API_KEY)``, which the kubelet
expands from an env var that a secretKeyRef fills. It is attached with "=" as one word
because the key is a Secret's value, possibly a user's, that may start with "-", which
argparse would read as an option if it stood alone (``render/argv.py``). Every other
value here is the operator's own or constrained by the API so that it cannot start with
"-" (paths are absolute, served names start with a letter or digit, parsers are enums);
``extraArgs`` are the user's own argv words, checked as SGLang would parse them.
"""

from __future__ import annotations

from typing import Any, Final

from sparkllm.api import ENGINE_HTTP_PORT, OPERATOR_OWNED_FLAGS, InferenceClusterSpec
from sparkllm.errors import SpecError
from sparkllm.render.argv import attached, flag_name
from sparkllm.render.sglang_flags import known_flags, validate_extra_args

ENGINE_API_KEY_ENV: Final = "SPARKLLM_ENGINE_API_KEY"
ENGINE_COMMAND: Final = ("python3", "-m", "sglang.launch_server")
# The CUDA-graph decode batch flag of the pinned SGLang (0.5.23): `--cuda-graph-max-bs`
# became ambiguous there (it prefixes -decode and -prefill); see render/sglang_flags.py.
CUDA_GRAPH_DECODE_FLAG: Final = "--cuda-graph-max-bs-decode"


def engine_args(
    spec: InferenceClusterSpec, *, rank: int, rank0_ip: str, api_key: bool
) -> list[str]:
    """The arguments after ``python3 -m sglang.launch_server`` for ``rank``."""
    engine = spec.engine
    pp = engine.pipeline_parallel
    args = [
        "--model-path", spec.model.path,
        "--served-model-name", spec.model.served_name,
        "--nnodes", str(pp),
        "--node-rank", str(rank),
        "--dist-init-addr", f"{rank0_ip}:{spec.network.dist_init_port}",
        "--pp-size", str(pp),
        "--tp-size", str(engine.tensor_parallel),
        "--mem-fraction-static", _decimal(engine.mem_fraction_static),
        "--context-length", str(engine.context_length),
        "--chunked-prefill-size", str(engine.chunked_prefill_size),
        CUDA_GRAPH_DECODE_FLAG, str(engine.cuda_graph_max_batch_size),
        "--max-running-requests", str(engine.max_running_requests),
        "--host", "0.0.0.0",
        "--port", str(ENGINE_HTTP_PORT),
        "--enable-metrics",
    ]  # fmt: skip
    if engine.tool_call_parser is not None:
        args += ["--tool-call-parser", engine.tool_call_parser]
    if engine.reasoning_parser is not None:
        args += ["--reasoning-parser", engine.reasoning_parser]
    if api_key:
        args.append(attached("--api-key", f"$({ENGINE_API_KEY_ENV})"))
    names = {name for name in map(flag_name, args) if name is not None}
    unknown = sorted(names - known_flags())
    if unknown:  # a programming error, but never ship a command SGLang would refuse
        raise SpecError(f"rendered SGLang flags unknown to the pinned SGLang: {unknown}")
    reserved = [flag for flag in OPERATOR_OWNED_FLAGS if flag in known_flags()]
    problems = validate_extra_args(engine.extra_args, reserved=reserved)
    if problems:
        raise SpecError("spec.engine.extraArgs: " + "; ".join(problems))
    return args + list(engine.extra_args)


def _decimal(value: float) -> str:
    """A float exactly as SGLang's argparse will read it back (0.57, not 0.5699...).

    ``repr`` is the shortest string that round-trips; a fixed precision would round
    (0.123456789 -> 0.123457) and SGLang would run with another value than the spec's.
    """
    return repr(float(value))


def engine_env(spec: InferenceClusterSpec) -> list[dict[str, Any]]:
    """RoCE/NCCL environment, the layer partition, and the user's extra env (in order)."""
    net = spec.network
    env = [
        {"name": "NCCL_SOCKET_IFNAME", "value": net.socket_interface},
        {"name": "GLOO_SOCKET_IFNAME", "value": net.socket_interface},
        {"name": "NCCL_IB_HCA", "value": ",".join(net.ib_hcas)},
        {"name": "NCCL_IB_GID_INDEX", "value": str(net.ib_gid_index)},
    ]
    if net.topology == "ring":
        # DGX Spark three-node ring: point-to-point /24 links, no subnet spans all nodes.
        env += [
            {"name": "NCCL_IB_SUBNET_AWARE_ROUTING", "value": "1"},
            {"name": "NCCL_IB_MERGE_NICS", "value": "0"},
            {"name": "NCCL_NET_PLUGIN", "value": "none"},
        ]
    partition = spec.engine.layer_partition
    if partition is not None:
        env.append(
            {"name": "SGLANG_PP_LAYER_PARTITION", "value": ",".join(str(n) for n in partition)}
        )
    env += [{"name": e.name, "value": e.value} for e in spec.engine.env]
    return env
