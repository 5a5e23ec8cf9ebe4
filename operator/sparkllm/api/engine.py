"""``spec.engine``: how every rank's SGLang process is launched.

The fields map one to one onto SGLang launch flags (``--mem-fraction-static``,
``--context-length``, ...) or onto the one setting SGLang only takes from the
environment (``SGLANG_PP_LAYER_PARTITION``). Defaults are the documents' deployment
(SEEDS.md). The operator owns the flags that wire ranks together and that these fields
set; ``extraArgs`` and ``env`` may not override them, because a second, conflicting
``--pp-size`` or ``NCCL_IB_HCA`` would silently win or lose depending on argument order.

Which field sets which flag, the owned flags, and the parser names (the choices SGLang
0.5.23, the pinned wheel, accepts for ``--tool-call-parser`` and ``--reasoning-parser``)
come from the SGLang contract, :mod:`sparkllm.sglang_contract.fields`;
``tests/unit/test_api_engine.py`` compares the parser names with the wheel.
"""

from typing import Annotated, Final

from pydantic import Field, StringConstraints

from sparkllm.api.admission import setting_field
from sparkllm.api.common import EnvVar, SecretKeyReference
from sparkllm.api.rules import ApiModel, Rule, re2_search
from sparkllm.gateway_settings import CONTEXT_LENGTH
from sparkllm.sglang_contract.fields import (
    ENGINE_API_KEY_ENV,
    LAYER_PARTITION_ENV,
    OPERATOR_OWNED_FLAGS,
    REFUSED_FLAGS,
    ReasoningParser,
    ToolCallParser,
)
from sparkllm.sglang_contract.guarded import Refusal, refused_env, refused_flags

MAX_PIPELINE_PARALLEL: Final = 8
MAX_TENSOR_PARALLEL: Final = 8
# Nodes in one replica (tensorParallel x pipelineParallel): a node group's size bound, which
# also bounds the CEL cost of the node-group rules (groups x nodes x nodes).
MAX_REPLICA_NODES: Final = 8
MAX_UNIX_ID: Final = 2_147_483_647  # what Kubernetes accepts for runAsUser / runAsGroup

# An image reference pinned to a tag or a digest: [host[:port]/]path[:tag][@sha256:digest]
# with at least one of tag and digest.
PINNED_IMAGE_PATTERN: Final = (
    r"^[a-zA-Z0-9][-a-zA-Z0-9_.]*(:[0-9]+)?(/[a-z0-9]+([._-]+[a-z0-9]+)*)*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}(@sha256:[a-f0-9]{64})?|@sha256:[a-f0-9]{64})$"
)
LATEST_TAG_PATTERN: Final = r":latest(@sha256:[a-f0-9]{64})?$"


def _sets_owned_flag(arg: str) -> bool:
    return _sets_flag(arg, OPERATOR_OWNED_FLAGS)


def _sets_flag(arg: str, flags: tuple[str, ...]) -> bool:
    """Whether ``arg`` sets one of ``flags`` or an abbreviation argparse would expand."""
    if not arg.startswith("--"):
        return False
    name = arg.split("=", 1)[0]
    return any(flag.startswith(name) for flag in flags)


# No rule refuses an extraArgs flag for being unknown to the pinned SGLang (0.5.23): the
# engine image carries its own SGLang, which may know it, and judges every rank's command
# line before its engine starts (sglang_contract/launch_check.py, condition
# LaunchChecked). What is refused here holds for every SGLang version: the flags the
# operator owns, the guarded flags (issue 25's table), and any abbreviation argparse could
# expand to one of them (SGLang's parser allows abbreviations).


def _flag_names(args: tuple[str, ...]) -> list[str]:
    """The flag names (before any "=") of ``args``, in order."""
    return [arg.split("=", 1)[0] for arg in args if arg.startswith("--")]


def _abbreviates(name: str, spellings: tuple[str, ...]) -> bool:
    """``name`` is one of ``spellings`` or a prefix argparse could expand to one."""
    return any(spelling.startswith(name) for spelling in spellings)


def _guarded_flag_rule(refusal: Refusal) -> Rule:
    """extraArgs may not use a flag of this class, in full or abbreviated (SGLang's argparse
    expands an unambiguous prefix); the message names the first one."""
    names = repr(list(refusal.spellings))
    matches = f"arg.startsWith('--') && {names}.exists(f, f.startsWith(arg.split('=')[0]))"
    spellings = tuple(refusal.spellings)
    return Rule(
        cel=f"!self.exists(arg, {matches})",
        message=f"extraArgs must not set a flag that {refusal.reason}",
        check=lambda args: not any(_abbreviates(n, spellings) for n in _flag_names(args)),
        detail=lambda args: next(n for n in _flag_names(args) if _abbreviates(n, spellings)),
        detail_cel=f"self.filter(arg, {matches})[0].split('=')[0]",
        reason="FieldValueForbidden",
    )


def _guarded_env_rule(refusal: Refusal) -> Rule:
    """env may not set an SGLang variable of this class; the message names the first."""
    names = repr(list(refusal.spellings))
    refused = frozenset(refusal.spellings)
    return Rule(
        cel=f"!self.exists(e, e.name in {names})",
        message=f"env must not set an SGLang variable that {refusal.reason}",
        check=lambda env: not any(var.name in refused for var in env),
        detail=lambda env: next(var.name for var in env if var.name in refused),
        detail_cel=f"self.map(e, e.name).filter(n, n in {names})[0]",
        reason="FieldValueForbidden",
    )


# Environment the operator sets itself in a rank pod's containers: from spec.network and
# spec.engine.layerPartition (engine), the engine key (rank 0), the node address SGLang
# advertises and the preflight's (verify-network, verify-bandwidth: the user's env is
# theirs too). A user's entry with one of these names would make the container's env
# list hold a name twice, which the API server refuses on apply (issue 25).
# tests/unit/test_render_engine.py renders every container and checks this list.
OPERATOR_OWNED_ENV: Final = (
    "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX",
    "NCCL_IB_SUBNET_AWARE_ROUTING", "NCCL_IB_MERGE_NICS", "NCCL_NET_PLUGIN",
    LAYER_PARTITION_ENV, ENGINE_API_KEY_ENV, "SGLANG_HOST_IP", "NODE_NAME",
    "SPARKLLM_RANK_ADDRESSES", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "PYTHONPATH",
)  # fmt: skip
_OWNED_ENV_CEL: Final = repr(list(OPERATOR_OWNED_ENV))

ImageReference = Annotated[
    str,
    StringConstraints(min_length=1, max_length=512),
    Rule(
        cel=f"self.matches('{PINNED_IMAGE_PATTERN}')",
        message="image must be pinned to a tag or a digest, e.g. "
        "nvcr.io/nvidia/sglang:26.07-py3; an untagged image floats",
        check=lambda image: re2_search(PINNED_IMAGE_PATTERN, image),
    ),
    Rule(
        cel=f"!self.matches('{LATEST_TAG_PATTERN}')",
        message="image must not use the :latest tag; pin a released tag or a digest",
        check=lambda image: not re2_search(LATEST_TAG_PATTERN, image),
    ),
]

ExtraArgs = Annotated[
    tuple[Annotated[str, StringConstraints(min_length=1, max_length=256)], ...],
    Field(max_length=64),
    Rule(
        cel="self.all(arg, !arg.startsWith('--') || !"
        + repr(list(OPERATOR_OWNED_FLAGS))
        + ".exists(f, f.startsWith(arg.split('=')[0])))",
        message="extraArgs must not set a flag the operator owns, or an abbreviation of one ("
        + ", ".join(OPERATOR_OWNED_FLAGS)
        + "); use the matching spec field",
        check=lambda args: not any(_sets_owned_flag(arg) for arg in args),
    ),
    Rule(
        cel="self.all(arg, !arg.startsWith('--') || !"
        + repr(list(REFUSED_FLAGS))
        + ".exists(f, f.startsWith(arg.split('=')[0])))",
        message="extraArgs must not set " + ", ".join(REFUSED_FLAGS) + " (or an abbreviation): "
        "it would let any user run code on the engine",
        check=lambda args: not any(_sets_flag(arg, REFUSED_FLAGS) for arg in args),
    ),
    *(_guarded_flag_rule(refusal) for refusal in refused_flags()),
]

ExtraEnv = Annotated[
    tuple[EnvVar, ...],
    Field(max_length=64),
    Rule(
        cel="self.all(e, self.exists_one(f, f.name == e.name))",
        message="env names must be unique",
        check=lambda env: len({var.name for var in env}) == len(env),
    ),
    Rule(
        cel=f"!self.exists(e, e.name in {_OWNED_ENV_CEL})",
        message="env must not set a variable the operator sets itself (the NCCL/Gloo "
        "settings come from spec.network, the layer partition from "
        "spec.engine.layerPartition; the others are the operator's own)",
        check=lambda env: not any(var.name in OPERATOR_OWNED_ENV for var in env),
        detail=lambda env: next(var.name for var in env if var.name in OPERATOR_OWNED_ENV),
        detail_cel=f"self.map(e, e.name).filter(n, n in {_OWNED_ENV_CEL})[0]",
        reason="FieldValueForbidden",
    ),
    *(_guarded_env_rule(refusal) for refusal in refused_env()),
]

LayerCount = Annotated[int, Field(ge=1, le=1024)]


class EngineSpec(ApiModel):
    """How each rank's SGLang server is launched (image, parallelism, memory, batching)."""

    cel_rules = (
        Rule(
            cel=f"self.tensorParallel * self.pipelineParallel <= {MAX_REPLICA_NODES}",
            message=f"tensorParallel x pipelineParallel must be at most {MAX_REPLICA_NODES}: "
            "that is the number of nodes in one replica",
            check=lambda engine: engine.nodes_per_replica <= MAX_REPLICA_NODES,
            field_path=".tensorParallel",
        ),
    )

    image: ImageReference = Field(
        description="image is the SGLang container image every rank runs. Required; "
        "pinned to a tag or digest (never :latest or untagged); at most 512 characters. "
        "Example: nvcr.io/nvidia/sglang:26.07-py3."
    )
    pipeline_parallel: Annotated[
        int,
        Field(ge=1, le=MAX_PIPELINE_PARALLEL),
        Rule(
            cel="self == oldSelf",
            message="pipelineParallel is immutable: it fixes how many nodes make a replica "
            "and the shape of every node group; create a new InferenceCluster instead",
            check=None,
            reason="FieldValueForbidden",
        ),
    ] = Field(
        default=3,
        description="pipelineParallel is the number of pipeline stages (SGLang --pp-size); "
        "a replica is tensorParallel x pipelineParallel nodes, one rank per node. "
        f"Default 3; 1 to {MAX_PIPELINE_PARALLEL}. Immutable: changing it would reshape "
        "every replica and node group at once, which no rolling update can do.",
    )
    tensor_parallel: Annotated[
        int,
        Field(ge=1, le=MAX_TENSOR_PARALLEL),
        Rule(
            cel="self == oldSelf",
            message="tensorParallel is immutable: it fixes how many nodes make a replica "
            "and the shape of every node group; create a new InferenceCluster instead",
            check=None,
            reason="FieldValueForbidden",
        ),
    ] = Field(
        default=1,
        description="tensorParallel is the tensor-parallel degree (SGLang --tp-size): how "
        "many nodes share each pipeline stage's weights, one GPU per DGX Spark, so a "
        "replica is tensorParallel x pipelineParallel nodes (SGLang's --nnodes). SGLang "
        "gives node rank n tensor rank n mod tensorParallel and pipeline stage n div "
        f"tensorParallel. Default 1; 1 to {MAX_TENSOR_PARALLEL}, with tensorParallel x "
        f"pipelineParallel at most {MAX_REPLICA_NODES}. Immutable, like pipelineParallel. "
        "Example: 2 with pipelineParallel 1 is SGLang's DGX Spark cookbook recipe (TP=2 "
        "across two Sparks).",
    )
    layer_partition: (
        Annotated[tuple[LayerCount, ...], Field(min_length=1, max_length=MAX_PIPELINE_PARALLEL)]
        | None
    ) = Field(
        default=None,
        description="layerPartition is the number of transformer layers on each pipeline "
        "stage, stage 0 first; every tensor rank of a stage holds its layers (env "
        "SGLANG_PP_LAYER_PARTITION: SGLang has no flag). "
        "Optional; when absent SGLang splits evenly. When set it must have exactly "
        "pipelineParallel entries, each at least 1, summing to model.numLayers. "
        "Example for 43 layers on 3 stages: [14, 14, 15].",
    )
    mem_fraction_static: float = Field(
        default=0.57,
        gt=0,
        le=0.95,
        description="memFractionStatic is the fraction of the node's memory SGLang reserves "
        "for weights and the KV cache (--mem-fraction-static). Default 0.57; greater than "
        "0 and at most 0.95. DGX Spark memory is shared with the OS: leave headroom.",
    )
    # The gateway counts against it too: its row in the settings table (gateway_settings).
    context_length: int = setting_field(CONTEXT_LENGTH)
    chunked_prefill_size: int = Field(
        default=4096,
        ge=1,
        le=1_048_576,
        description="chunkedPrefillSize is the most prompt tokens prefilled in one chunk "
        "(--chunked-prefill-size). Default 4096; 1 to 1048576.",
    )
    cuda_graph_max_batch_size: int = Field(
        default=4,
        ge=1,
        le=1024,
        description="cudaGraphMaxBatchSize is the largest decode batch captured as a CUDA "
        "graph (--cuda-graph-max-bs-decode). Default 4; 1 to 1024.",
    )
    max_running_requests: int = Field(
        default=8,
        ge=1,
        le=4096,
        description="maxRunningRequests is the most requests one replica decodes at once "
        "(--max-running-requests). Default 8; 1 to 4096.",
    )
    tool_call_parser: ToolCallParser | None = Field(
        default=None,
        description="toolCallParser is SGLang's --tool-call-parser. Optional (no tool-call "
        "parsing when absent); one of the names SGLang 0.5.23 accepts, e.g. deepseekv4.",
    )
    reasoning_parser: ReasoningParser | None = Field(
        default=None,
        description="reasoningParser is SGLang's --reasoning-parser. Optional (reasoning is "
        "not separated when absent); one of the names SGLang 0.5.23 accepts, e.g. "
        "deepseek-v4.",
    )
    api_key_secret_ref: SecretKeyReference | None = Field(
        default=None,
        description="apiKeySecretRef is the Secret key holding the key rank 0 requires "
        "(--api-key); the gateway presents it. Optional: when absent the operator "
        "generates a Secret and owns it. Rank 0 always requires a key, because with host "
        "networking its port is open on the node's address. The Secret must carry the "
        "label sparkllm.io/secret-use=engine-api-key (its owner marks it for this use; "
        "otherwise the InferenceCluster is InvalidSpec).",
    )
    extra_args: ExtraArgs = Field(
        default=(),
        description="extraArgs are additional SGLang launch arguments, appended verbatim. "
        "Default empty; at most 64 entries of 1 to 256 characters. Must not set a flag the "
        "operator owns (parallelism, addresses, ports, API key, or one a spec field sets), "
        "nor one that changes the prompt the engine renders (chat template, tokenizer...), "
        "opens another listener, logs prompts or holds a secret (docs/api.md lists them); "
        "--default-chat-template-kwargs is also given to the front door, which counts with "
        "it. Other flags and values are judged by the engine image's own SGLang before the "
        "engine starts (condition LaunchChecked).",
    )
    env: ExtraEnv = Field(
        default=(),
        description="env is extra environment for every rank, as literal name/value "
        "pairs. Default empty; at most 64 entries with unique names. Must not set a "
        "variable the operator sets (NCCL/Gloo, the layer partition, PYTHONPATH, the "
        "engine key...), nor an SGLang variable that changes the prompt or opens a "
        "listener (docs/api.md lists them).",
    )
    run_as_user: int | None = Field(
        default=None,
        ge=1,
        le=MAX_UNIX_ID,
        description="runAsUser is the user ID the engine image's containers (the engine and "
        "the network preflight's verify-bandwidth) run as; when set they also require a "
        "non-root user (runAsNonRoot). Optional; when absent they run as the image's own "
        "user, which is root in nvcr.io/nvidia/sglang and lmsysorg/sglang. 1 to "
        f"{MAX_UNIX_ID}. A non-root engine needs an image (or engine.env HOME) with a "
        "writable home for SGLang's kernel caches (docs/pod-security.md).",
    )
    run_as_group: int | None = Field(
        default=None,
        ge=0,
        le=MAX_UNIX_ID,
        description="runAsGroup is the primary group ID of the engine image's containers. "
        f"Optional; when absent, the image's (or the user's) group. 0 to {MAX_UNIX_ID}.",
    )

    @property
    def nodes_per_replica(self) -> int:
        """Nodes (and ranks, one per DGX Spark) in one replica: SGLang's ``--nnodes``."""
        return self.tensor_parallel * self.pipeline_parallel
