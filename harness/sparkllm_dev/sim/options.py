"""The SIMULATOR's own command line: ``[--sim-… options] -- <the rank's container command>``.

Why two halves: the simulator must run the very command line the operator renders for a
rank (``python3 -c <the launcher code> --model-path … --node-rank k …``), parsed by the
same SGLang flag contract, so a flag SGLang 0.5.23 would refuse fails here too. What only
a simulator needs — where to bind on the simulated node, how slow to pretend to be, which
flag to pretend the engine ignored — goes before ``--`` with a ``--sim-`` prefix.

Latency defaults are the documents' measurements scaled DOWN so tests run fast. Measured
on three DGX Spark nodes (PP=3, mem 0.50, SEEDS.md): TTFT p95 29.18 s at 4K (4096) input
tokens and 44.37 s at 8K, a line of 13.99 s + 3.7085 s per 1K input tokens; TPOT p95
~78 ms. Defaults here: TTFT 5 ms + 2 ms per 1K input tokens, TPOT 1 ms — about 1/1850 of
the real TTFT slope, 1/2800 of its base and 1/78 of the real TPOT. Pass
``--sim-ttft-base-ms 13990 --sim-ttft-per-1k-tokens-ms 3708.5 --sim-tpot-ms 78`` to
reproduce the measured figures.

``--sim-ignore-flag`` takes a flag in any spelling; write ``--sim-ignore-flag=--pp-size``
or drop the dashes (``--sim-ignore-flag pp-size``), since argparse reads a bare
``--pp-size`` after it as an option.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sparkllm.errors import SpecError
from sparkllm.sglang_contract.command import ENGINE_LAUNCHER_CODE, launched_args
from sparkllm_dev.sim.deepseek_v4 import FAULTS
from sparkllm_dev.sim.start import StartModel


@dataclass(frozen=True, slots=True)
class LatencyModel:
    """How long simulated work takes: TTFT grows with input, then one TPOT per token."""

    ttft_base_ms: float = 5.0
    ttft_per_1k_tokens_ms: float = 2.0
    tpot_ms: float = 1.0

    def ttft_seconds(self, prompt_tokens: int) -> float:
        return (self.ttft_base_ms + self.ttft_per_1k_tokens_ms * prompt_tokens / 1000) / 1000

    @property
    def tpot_seconds(self) -> float:
        return self.tpot_ms / 1000


@dataclass(frozen=True, slots=True)
class SimOptions:
    """Everything the simulator is told besides SGLang's own arguments."""

    host: str | None = None
    port: int | None = None
    ignored_flags: tuple[str, ...] = ()
    startup_seconds: float = 0.0
    latency: LatencyModel = field(default_factory=LatencyModel)
    answer_tokens: int = 32
    fail_after: int | None = None
    hang_after: int | None = None
    """Hang (process alive, generation stalls) after N generation requests; also SIGUSR1."""
    faults: tuple[str, ...] = ()
    """Output faults (``deepseek_v4.FAULTS``) that make one acceptance check fail each."""
    start: StartModel = field(default_factory=StartModel)
    """The start's phases (weights, JIT cold or warm, graphs): ``sim/start.py``."""
    health_check_timeout: int | None = None
    """SGLang's /health window (``SGLANG_HEALTH_CHECK_TIMEOUT``) for this process instead of
    the rank's env: a test waiting for a hang to be seen needs no 20 s windows (same rule)."""


_DEFAULTS = SimOptions()


def split_command(
    argv: Sequence[str], env: Mapping[str, str] | None = None
) -> tuple[list[str], list[str]]:
    """Split ``[sim options] -- command`` into (sim options, SGLang's own arguments).

    The command may be ``python3 -c <ENGINE_LAUNCHER_CODE> ARGS`` (what the operator
    renders), ``python3 -m sglang.launch_server ARGS``, ``sglang serve ARGS`` or bare
    ``ARGS``; SGLang's arguments are what follows the launcher, plus what the launcher
    adds from the rank's ``env`` (the engine key: ``command.launched_args``). ``-c`` code
    other than the product's launcher is refused, so the dev cluster runs exactly what is
    rendered.
    """
    args = list(argv)
    if "--" not in args:
        raise SpecError("expected `--` followed by the rank's SGLang command")
    cut = args.index("--")
    sim_args, command = args[:cut], args[cut + 1 :]
    if not command:
        raise SpecError("no SGLang command after `--`")
    if command[0].rsplit("/", 1)[-1].startswith("python") and command[1:2] == ["-c"]:
        if command[2:3] != [ENGINE_LAUNCHER_CODE]:
            raise SpecError(
                "the command's `-c` code is not the operator's engine launcher "
                "(sparkllm.sglang_contract.command.ENGINE_LAUNCHER_CODE)"
            )
        return sim_args, launched_args(command[3:], env or {})
    for index, word in enumerate(command):
        if word == "sglang.launch_server" and command[index - 1 : index] == ["-m"]:
            return sim_args, command[index + 1 :]
        if word.rsplit("/", 1)[-1] == "sglang" and command[index + 1 : index + 2] == ["serve"]:
            return sim_args, command[index + 2 :]
    if command[0].startswith("-"):
        return sim_args, command
    raise SpecError(
        "the command after `--` must run `-m sglang.launch_server`, the engine launcher"
        " (`-c`) or `sglang serve`; got " + " ".join(command[:3])
    )


def _sim_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sparkllm_dev.sim",
        description="SGLang engine SIMULATOR (no GPU): serves SGLang's HTTP API and metrics.",
        allow_abbrev=False,
        exit_on_error=False,
    )
    parser.add_argument("--sim-host", help="bind here instead of the command's --host")
    parser.add_argument("--sim-port", type=int, help="bind here instead of --port")
    parser.add_argument(
        "--sim-ignore-flag",
        action="append",
        default=[],
        metavar="FLAG",
        help="pretend the engine ignored FLAG: /get_server_info reports SGLang's default",
    )
    parser.add_argument("--sim-startup-seconds", type=float, default=0.0)
    parser.add_argument("--sim-ttft-base-ms", type=float, default=_DEFAULTS.latency.ttft_base_ms)
    parser.add_argument(
        "--sim-ttft-per-1k-tokens-ms", type=float, default=_DEFAULTS.latency.ttft_per_1k_tokens_ms
    )
    parser.add_argument("--sim-tpot-ms", type=float, default=_DEFAULTS.latency.tpot_ms)
    parser.add_argument(
        "--sim-answer-tokens",
        type=int,
        default=_DEFAULTS.answer_tokens,
        help="length of the deterministic answer when max_tokens does not cut it",
    )
    parser.add_argument(
        "--sim-fail-after",
        type=int,
        help="exit with code 1 (a simulated crash) after N generation requests",
    )
    parser.add_argument(
        "--sim-hang-after",
        type=int,
        help="hang after N generation requests: the process and /metrics stay up, no token "
        "is generated again, /health answers 503 like SGLang's (SIGUSR1 hangs at once)",
    )
    parser.add_argument(
        "--sim-fault",
        action="append",
        default=[],
        choices=FAULTS,
        help="break one output property (repeatable): " + ", ".join(FAULTS),
    )
    start = StartModel()
    parser.add_argument(
        "--sim-start-scale",
        type=float,
        default=start.scale,
        metavar="FACTOR",
        help="multiply the start model's real-scale seconds (sim/start.py) by FACTOR; 0 "
        "(default): print SGLang's start lines without waiting",
    )
    parser.add_argument("--sim-weights-gb", type=float, help="this rank's weights (GB)")
    parser.add_argument("--sim-load-seconds-per-gb", type=float, default=start.load_seconds_per_gb)
    parser.add_argument("--sim-jit-cold-seconds", type=float, default=start.jit_cold_seconds)
    parser.add_argument("--sim-jit-warm-seconds", type=float, default=start.jit_warm_seconds)
    parser.add_argument("--sim-graph-seconds", type=float, default=start.graph_seconds)
    parser.add_argument(
        "--sim-health-check-timeout",
        type=int,
        metavar="SECONDS",
        help="/health's window without output before 503 (default: the rank's "
        "SGLANG_HEALTH_CHECK_TIMEOUT, else SGLang's 20 s)",
    )
    return parser


def parse_sim_options(sim_args: Sequence[str]) -> SimOptions:
    """Parse the ``--sim-…`` half; SpecError on anything unknown or malformed."""
    try:
        namespace, unknown = _sim_parser().parse_known_args(list(sim_args))
    except argparse.ArgumentError as exc:
        raise SpecError(f"simulator option: {exc}") from exc
    if unknown:
        raise SpecError(f"unknown simulator options: {' '.join(unknown)}")
    latency = LatencyModel(
        ttft_base_ms=namespace.sim_ttft_base_ms,
        ttft_per_1k_tokens_ms=namespace.sim_ttft_per_1k_tokens_ms,
        tpot_ms=namespace.sim_tpot_ms,
    )
    if min(latency.ttft_base_ms, latency.ttft_per_1k_tokens_ms, latency.tpot_ms) < 0:
        raise SpecError("simulator latencies must not be negative")
    if namespace.sim_health_check_timeout is not None and namespace.sim_health_check_timeout < 1:
        raise SpecError("--sim-health-check-timeout must be at least 1 second")
    start = StartModel(
        scale=namespace.sim_start_scale,
        weights_gb=namespace.sim_weights_gb,
        load_seconds_per_gb=namespace.sim_load_seconds_per_gb,
        jit_cold_seconds=namespace.sim_jit_cold_seconds,
        jit_warm_seconds=namespace.sim_jit_warm_seconds,
        graph_seconds=namespace.sim_graph_seconds,
    )
    figures = (start.scale, start.load_seconds_per_gb, start.jit_cold_seconds,
               start.jit_warm_seconds, start.graph_seconds, start.weights_gb or 0.0)  # fmt: skip
    if min(figures) < 0:
        raise SpecError("simulator start figures must not be negative")
    return SimOptions(
        host=namespace.sim_host,
        port=namespace.sim_port,
        ignored_flags=tuple(
            name if name.startswith("--") else "--" + name.replace("_", "-")
            for name in namespace.sim_ignore_flag
        ),
        startup_seconds=namespace.sim_startup_seconds,
        latency=latency,
        answer_tokens=namespace.sim_answer_tokens,
        fail_after=namespace.sim_fail_after,
        hang_after=namespace.sim_hang_after,
        faults=tuple(namespace.sim_fault),
        health_check_timeout=namespace.sim_health_check_timeout,
        start=start,
    )
