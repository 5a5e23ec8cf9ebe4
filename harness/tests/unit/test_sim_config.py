"""The SIMULATOR's pure parts: its command line, startup validation, the deterministic model."""

from __future__ import annotations

from typing import Any

import pytest
from tests.unit.test_layouts import wheel_rank_ranges

from sparkllm.errors import SpecError
from sparkllm.plan.kv import proportional_pool_tokens as kv_pool_tokens
from sparkllm.plan.partition import sglang_default_partition, stage_ranges
from sparkllm.sglang_contract.command import ENGINE_COMMAND, ENGINE_LAUNCHER_CODE
from sparkllm.sglang_contract.fields import ENGINE_API_KEY_ENV
from sparkllm.sglang_contract.flags import parse_sglang_argv
from sparkllm_dev.sim.engine_config import (
    EngineStartupError,
    build_engine_config,
    parse_layer_partition,
)
from sparkllm_dev.sim.generation import answer_for, chat_prompt_text
from sparkllm_dev.sim.openai_api import RejectedRequestError, fit_context_window
from sparkllm_dev.sim.options import LatencyModel, SimOptions, parse_sim_options, split_command

ARGS = ["--model-path", "/models/dsv4", "--pp-size", "3", "--nnodes", "3"]


@pytest.mark.parametrize(
    ("argv", "sim", "sglang"),
    [
        (["--", *ENGINE_COMMAND, "--pp-size", "3"], [], ["--pp-size", "3"]),
        (
            ["--", "/usr/bin/python3", "-c", ENGINE_LAUNCHER_CODE, "--port", "1"],
            [],
            ["--port", "1"],
        ),
        (["--", "python3", "-m", "sglang.launch_server", "--pp-size", "3"], [], ["--pp-size", "3"]),
        (
            ["--sim-port", "1", "--", "python", "-m", "sglang.launch_server"],
            ["--sim-port", "1"],
            [],
        ),
        (["--", "/usr/local/bin/sglang", "serve", "--port", "1"], [], ["--port", "1"]),
        (["--", "--model-path", "m"], [], ["--model-path", "m"]),
    ],
)
def test_split_command(argv: list[str], sim: list[str], sglang: list[str]) -> None:
    assert split_command(argv) == (sim, sglang)


def test_the_launcher_adds_rank_zeros_key_from_its_env_as_sglang_would_see_it() -> None:
    """The engine key is on no command line: like the launcher, the simulator takes it
    from the rank's env (one word; the key may start with "-"); -m has no launcher."""
    env = {ENGINE_API_KEY_ENV: "-k"}
    launcher = ["--", *ENGINE_COMMAND, "--port", "1"]
    assert split_command(launcher, env) == ([], ["--port", "1", "--api-key=-k"])
    with_model = ["--", *ENGINE_COMMAND, *ARGS]
    assert parse_sglang_argv(split_command(with_model, env)[1])["api_key"] == "-k"
    plain = ["--", "python3", "-m", "sglang.launch_server", "--port", "1"]
    assert split_command(plain, env) == ([], ["--port", "1"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sim-port", "1"], "expected `--`"),
        (["--"], "no SGLang command"),
        (["--", "python3", "server.py"], "must run `-m sglang.launch_server`"),
        (
            ["--", "python3", "-c", "import sglang", "--port", "1"],
            "not the operator's engine launcher",
        ),
        (["--", "python3", "-c"], "not the operator's engine launcher"),
    ],
)
def test_split_command_refuses(argv: list[str], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        split_command(argv)


def test_sim_options_parse_and_default() -> None:
    assert parse_sim_options([]) == SimOptions()
    options = parse_sim_options(
        ["--sim-host", "127.0.0.2", "--sim-ignore-flag=--context-length",
         "--sim-ignore-flag", "pp_size", "--sim-tpot-ms", "78", "--sim-fail-after", "3"]
    )  # fmt: skip
    assert options.host == "127.0.0.2"
    assert options.ignored_flags == ("--context-length", "--pp-size")
    assert options.latency.tpot_ms == 78
    assert options.fail_after == 3


@pytest.mark.parametrize(
    "argv", [["--sim-bogus"], ["--sim-port", "x"], ["--sim-tpot-ms", "-1"], ["--sim-p", "1"]]
)
def test_sim_options_refuse(argv: list[str]) -> None:
    with pytest.raises(SpecError):
        parse_sim_options(argv)


def test_latency_model_scales_with_input() -> None:
    documents = LatencyModel(ttft_base_ms=13_990, ttft_per_1k_tokens_ms=3_708.5, tpot_ms=78)
    assert documents.ttft_seconds(4096) == pytest.approx(29.18, abs=0.1)
    assert documents.ttft_seconds(8192) == pytest.approx(44.37, abs=0.1)
    assert LatencyModel().ttft_seconds(1000) == pytest.approx(0.007)


@pytest.mark.parametrize(
    ("text", "pp_size", "layers", "expected"),
    [
        (None, 3, 43, None),
        ("14,14,15", 3, 43, (14, 14, 15)),
        ("14,14,15", 3, None, (14, 14, 15)),
        ("1,2", 1, 43, None),
        ("21,22", 2, 43, (21, 22)),
    ],
)
def test_layer_partition_accepted(
    text: str | None, pp_size: int, layers: int | None, expected: tuple[int, ...] | None
) -> None:
    assert parse_layer_partition(text, pp_size=pp_size, num_hidden_layers=layers) == expected


@pytest.mark.parametrize(
    ("text", "pp_size", "message"),
    [
        ("14,29", 3, "ValueError: len(partitions)=2 does not match pp_size=3."),
        ("14,14,14", 3, "ValueError: sum(partitions)=42 does not match num_hidden_layers=43."),
        ("14,x,15", 3, "ValueError: Invalid partition string: 14,x,15"),
    ],
)
def test_layer_partition_refused_with_sglang_words(text: str, pp_size: int, message: str) -> None:
    with pytest.raises(EngineStartupError) as raised:
        parse_layer_partition(text, pp_size=pp_size, num_hidden_layers=43)
    assert str(raised.value) == message


def _config(argv: list[str], *, sim: SimOptions | None = None, env: dict[str, str] | None = None,
            model: dict[str, Any] | None = None) -> Any:  # fmt: skip
    return build_engine_config(
        parsed=parse_sglang_argv(argv),
        sim=sim or SimOptions(),
        env=env or {},
        model_config=model or {},
    )


def test_engine_config_from_rendered_command() -> None:
    config = _config(
        [*ARGS, "--node-rank", "2", "--context-length", "12288", "--mem-fraction-static",
         "0.57", "--max-running-requests", "8", "--host", "0.0.0.0", "--enable-metrics"],
        sim=SimOptions(host="127.0.0.3"),
        env={"SGLANG_PP_LAYER_PARTITION": "14,14,15"},
        model={"num_hidden_layers": 43},
    )  # fmt: skip
    assert config.is_worker
    assert (config.host, config.port) == ("127.0.0.3", 30000)
    assert config.server_info_args["host"] == "0.0.0.0"
    assert config.layers_of_this_rank() == (28, 43)
    assert config.max_total_num_tokens == 1_579_520
    assert config.served_model_name == "/models/dsv4"
    assert (config.context_length, config.max_running_requests) == (12288, 8)


def test_even_split_matches_sglang_get_pp_indices() -> None:
    ranks = [
        _config([*ARGS, "--node-rank", str(k)], model={"num_hidden_layers": 43}) for k in range(3)
    ]
    assert [r.layers_of_this_rank() for r in ranks] == [(0, 14), (14, 28), (28, 43)]


@pytest.mark.parametrize(
    ("tp", "pp", "nnodes"), [(2, 1, 2), (2, 2, 4), (4, 2, 8), (1, 3, 3), (2, 1, 1), (4, 2, 2)]
)
def test_multi_node_ranks_are_the_wheels(tp: int, pp: int, nnodes: int) -> None:
    """Stage and tensor rank per node as SGLang's _calculate_rank_ranges (the wheel's own
    function), also with several GPUs per node; the stage picks the layers."""
    wheel = wheel_rank_ranges()
    args = ["--model-path", "/m", "--tp-size", str(tp), "--pp-size", str(pp)]
    for node_rank in range(nnodes):
        config = _config(
            [*args, "--nnodes", str(nnodes), "--node-rank", str(node_rank)],
            model={"num_hidden_layers": 43},
        )
        pp_range, tp_range = wheel(node_rank, tp=tp, pp=pp, nnodes=nnodes)
        assert (config.pp_rank, config.tp_rank) == (pp_range[0], tp_range[0])
        even = stage_ranges(sglang_default_partition(num_layers=43, stages=pp))
        assert config.layers_of_this_rank() == even[pp_range[0]]


def test_tp2_ranks_hold_every_layer_and_only_rank0_serves() -> None:
    ranks = [
        _config(["--model-path", "/m", "--tp-size", "2", "--nnodes", "2", "--node-rank",
                 str(k)], model={"num_hidden_layers": 43})
        for k in range(2)
    ]  # fmt: skip
    assert [r.layers_of_this_rank() for r in ranks] == [(0, 43), (0, 43)]
    assert [(r.pp_rank, r.tp_rank, r.is_worker) for r in ranks] == [(0, 0, False), (0, 1, True)]
    assert ranks[1].server_info_args["tp_size"] == 2
    assert ranks[1].server_info_args["nnodes"] == 2


def test_startup_refuses_a_node_count_sglang_refuses() -> None:
    with pytest.raises(EngineStartupError, match="tp_size must be divisible by number of nodes"):
        _config(["--model-path", "/m", "--tp-size", "2", "--pp-size", "1", "--nnodes", "3"])


def test_ignored_flag_reports_sglang_default() -> None:
    argv = [*ARGS, "--context-length", "12288", "--max-running-requests", "8"]
    config = _config(argv, sim=SimOptions(ignored_flags=("--context-length",)),
                     model={"max_position_embeddings": 65536})  # fmt: skip
    assert config.server_info_args["context_length"] is None
    assert config.context_length == 65536
    assert config.server_info_args["max_running_requests"] == 8


def test_startup_refuses_bad_partition_and_colon_name() -> None:
    with pytest.raises(EngineStartupError, match="does not match pp_size=3"):
        _config(ARGS, env={"SGLANG_PP_LAYER_PARTITION": "21,22"})
    with pytest.raises(EngineStartupError, match="cannot contain a colon"):
        _config([*ARGS, "--served-model-name", "a:b"])


@pytest.mark.parametrize(
    ("fraction", "tokens"), [(0.57, 1_579_520), (0.5, 1_385_544), (0.285, 789_760)]
)
def test_kv_pool_scales_with_mem_fraction(fraction: float, tokens: int) -> None:
    assert kv_pool_tokens(fraction) == tokens


@pytest.mark.parametrize(
    ("max_tokens", "ignore_eos", "length", "reason"),
    [
        (None, False, 32, "stop"),
        (5, False, 5, "length"),
        (100, False, 32, "stop"),
        (100, True, 100, "length"),
    ],
)
def test_answer_lengths(max_tokens: int | None, ignore_eos: bool, length: int, reason: str) -> None:
    answer = answer_for("q", max_tokens=max_tokens, answer_tokens=32, ignore_eos=ignore_eos)
    assert (len(answer.pieces), answer.finish_reason) == (length, reason)
    assert len(answer.text.split()) == length


def test_answers_are_deterministic_per_prompt() -> None:
    first = answer_for("What is 2+2?", max_tokens=None, answer_tokens=16)
    assert first == answer_for("What is 2+2?", max_tokens=None, answer_tokens=16)
    assert first != answer_for("What is 3+3?", max_tokens=None, answer_tokens=16)


def test_chat_prompt_text_keeps_text_parts() -> None:
    parts = [{"type": "text", "text": "hi"}, {"type": "image_url"}]
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": parts}]
    assert chat_prompt_text(messages) == "be brief\nhi"


@pytest.mark.parametrize(
    ("prompt", "max_tokens", "message"),
    [
        (100, None, "The input (100 tokens) is longer than the model's context length (100 "),
        (101, 5, "The input (101 tokens) is longer than the model's context length (100 tokens)"),
        (90, 20, "Requested token count exceeds the model's maximum context length of 100 tokens. "
                 "You requested a total of 110 tokens: 90 tokens from the input messages and 20 "
                 "tokens for the completion."),
    ],
)  # fmt: skip
def test_context_window_rejections(prompt: int, max_tokens: int | None, message: str) -> None:
    with pytest.raises(RejectedRequestError) as raised:
        fit_context_window(prompt_tokens=prompt, max_tokens=max_tokens, context_length=100,
                           auto_truncate=False)  # fmt: skip
    assert raised.value.status == 400
    assert raised.value.body["message"].startswith(message)
    assert raised.value.body["type"] == "BadRequestError"


def test_context_window_fits_and_truncates() -> None:
    assert fit_context_window(prompt_tokens=99, max_tokens=1, context_length=100,
                              auto_truncate=False) == (99, 1)  # fmt: skip
    assert fit_context_window(prompt_tokens=150, max_tokens=20, context_length=100,
                              auto_truncate=True) == (100, 0)  # fmt: skip
