"""Benchmark: what the front door costs — simulator alone, smg alone, admission + smg.

Not a pytest test (benchmarks report numbers, they never pass or fail). Run from the
repository root (about two minutes on two busy cores; no cluster needed):

    .venv/bin/python -m tests.bench.bench_front_door [--scale 1.0]

One SGLang simulator (``sparkllm_dev.sim``: TTFT 5 ms + 2 ms/1K tokens, 1 ms per output
token), one smg router and one admission layer run as local processes, configured as
the operator renders them (``router_args``/``admission_env`` of a bench
InferenceCluster; discovery replaced by ``--worker-urls``, concurrency limits raised to
64 so that neither layer queues; ``toolCallParser: deepseekv4`` as in the documents'
deployment, so the admission layer counts with DeepSeek's encoder, deepseek_prompt.py).
For concurrency 1, 16 and 64 it sends streamed chat
requests of the documents' shape — a 256-token prompt, 128 output tokens — along three
paths, and prints p50/p99 time to first token and end-to-end latency and requests/s:

* ``direct``       client -> simulator
* ``smg``          client -> smg -> simulator
* ``admission``    client -> admission -> smg -> simulator (what users get)

At concurrency 1 — the issue's goal: admission adds at most 1 ms p50 and 3 ms p99 over
smg alone — the three paths are measured *interleaved*, one request each in turn (150
rounds at scale 1, each with a text of its own: the prompt's words rotated), so that
whatever else the machine does at the moment affects all three alike; the overhead is
printed as the difference of the percentiles and as the median of the per-round
differences (each admission request minus the smg request next to it). At 16 and 64
each path runs its own batch.

Then, at concurrency 1, 2K- and 8K-token prompts without ``max_tokens`` (so the
admission layer must count the prompt exactly and fill in the rest of the window), via
smg alone and via admission: the end-to-end difference, and the admission layer's own
decision time from its ``sparkllm_gateway_admission_duration_seconds`` histogram.

The client shares the two cores with the servers; read the differences between paths,
not the absolute numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sparkllm.api import validate_inference_cluster
from sparkllm.gateway.chat_template import ChatTemplate
from sparkllm.gateway.tokens import TokenCounter
from sparkllm.gateway_settings import env_var_name
from sparkllm.render.gateway import admission_env
from sparkllm.render.ranks import EngineKeyRef
from sparkllm.render.router import router_args
from sparkllm_dev.devcluster.gateway_io import free_port, localize_router_args, with_worker_url
from tests.bench.bench_admission import MODEL, _prompt_of_tokens, train_bench_tokenizer

ENGINE_KEY, USER_KEY = "bench-engine-key", "bench-user-key"
CONCURRENCY = (1, 16, 64)
REQUESTS = {1: 150, 16: 160, 64: 320}  # per path, times --scale
OUTPUT_TOKENS = 128


def bench_cluster(model_dir: Path) -> Any:
    """The InferenceCluster whose rendered router and admission settings are measured."""
    return validate_inference_cluster(
        {
            "apiVersion": "sparkllm.io/v1alpha1",
            "kind": "InferenceCluster",
            "metadata": {"name": "bench", "namespace": "bench", "uid": "bench"},
            "spec": {
                "model": {"path": str(model_dir), "servedName": MODEL},
                "engine": {
                    "image": "nvcr.io/nvidia/sglang:26.07-py3",
                    "pipelineParallel": 1,
                    "maxRunningRequests": 64,
                    # as the documents' deployment: the gateway counts with DeepSeek's encoder
                    "toolCallParser": "deepseekv4",
                },
                "admission": {
                    "apiKeysSecretRef": {"name": "keys"},
                    "maxConcurrentRequests": 64,
                    "queueSize": 64,
                },
                "placement": {"nodeGroups": [["bench-node"]]},
            },
        }
    )


def _spawn(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as sink:
        return subprocess.Popen(argv, env=env, stdout=sink, stderr=subprocess.STDOUT)


def _wait_ok(url: str, *, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"not ready in {timeout:.0f} s: {url}")


def start_stack(scratch: Path, model_dir: Path) -> tuple[dict[str, str], str, list[Any]]:
    """Simulator, smg and admission processes: the three base URLs, the admission layer's
    metrics URL (its own port) and the processes."""
    ic = bench_cluster(model_dir)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKLLM_GATEWAY_")}
    sim_port, smg_port, gate_port, metrics_port = (free_port("127.0.0.1") for _ in range(4))
    sim = [
        sys.executable, "-m", "sparkllm_dev.sim", "--sim-host", "127.0.0.1", "--sim-port",
        str(sim_port), "--sim-answer-tokens", str(OUTPUT_TOKENS), "--",
        "--model-path", str(model_dir), "--served-model-name", MODEL, "--api-key", ENGINE_KEY,
        "--context-length", str(ic.spec.engine.context_length), "--max-running-requests", "64",
    ]  # fmt: skip
    ports = {"--port": smg_port, "--health-check-port": free_port("127.0.0.1"),
             "--prometheus-port": free_port("127.0.0.1")}  # fmt: skip
    # In the pod the router's launcher appends the key from its env (render/router.py).
    rendered = [*router_args(ic), f"--api-key={ENGINE_KEY}"]
    smg = [
        str(Path(sys.executable).parent / "smg"), "launch",
        *localize_router_args(
            with_worker_url(rendered, url=f"http://127.0.0.1:{sim_port}"), ports=ports
        ),
    ]  # fmt: skip
    keys = scratch / "keys"
    keys.mkdir()
    (keys / "bench").write_text(USER_KEY)
    gate_env = {
        e["name"]: e.get("value", ENGINE_KEY)
        for e in admission_env(ic, engine_key=EngineKeyRef("k", "k"))
    }
    gate_env.update({
        env_var_name("listen_host"): "127.0.0.1",
        env_var_name("listen_port"): str(gate_port),
        env_var_name("metrics_port"): str(metrics_port),  # /metrics is only there
        env_var_name("upstream_url"): f"http://127.0.0.1:{smg_port}",
        env_var_name("api_keys_dir"): str(keys),
        env_var_name("log_level"): "warning",
    })  # fmt: skip
    processes = [
        _spawn(sim, env, scratch / "sim.log"),
        _spawn(smg, env, scratch / "smg.log"),
        _spawn([sys.executable, "-m", "sparkllm.gateway"], {**env, **gate_env}, scratch / "gw.log"),
    ]
    urls = {
        "direct": f"http://127.0.0.1:{sim_port}",
        "smg": f"http://127.0.0.1:{smg_port}",
        "admission": f"http://127.0.0.1:{gate_port}",
    }
    _wait_ok(urls["direct"] + "/health")
    _wait_ok(urls["smg"] + "/readiness")
    _wait_ok(urls["admission"] + "/ready")
    return urls, f"http://127.0.0.1:{metrics_port}/metrics", processes


async def _one(client: httpx.AsyncClient, url: str, key: str, body: bytes) -> tuple[float, float]:
    """(time to first content chunk, end to end) in seconds for one streamed request."""
    headers = {"Authorization": f"Bearer {key}", "content-type": "application/json"}
    started = time.perf_counter()
    first = 0.0
    async with client.stream(
        "POST", url + "/v1/chat/completions", content=body, headers=headers
    ) as answer:
        if answer.status_code != 200:
            raise RuntimeError(
                f"{url}: HTTP {answer.status_code}: {(await answer.aread())[:200]!r}"
            )
        async for line in answer.aiter_lines():
            if not first and line.startswith("data: {"):
                first = time.perf_counter() - started
    return first, time.perf_counter() - started


async def run_load(
    url: str, key: str, body: bytes, *, concurrency: int, total: int
) -> dict[str, float]:
    """``total`` requests, ``concurrency`` at a time; latency percentiles and throughput."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=120, limits=limits, trust_env=False) as client:
        for _ in range(min(concurrency, 4)):
            await _one(client, url, key, body)  # warm the pools
        queue = list(range(total))
        samples: list[tuple[float, float]] = []

        async def worker() -> None:
            while queue:
                queue.pop()
                samples.append(await _one(client, url, key, body))

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return summarize(samples, elapsed=elapsed)


async def run_interleaved(
    urls: dict[str, str], keys: dict[str, str], bodies: Sequence[bytes]
) -> dict[str, list[tuple[float, float]]]:
    """Concurrency 1: one request per path in turn, a round per body; the raw samples."""
    samples: dict[str, list[tuple[float, float]]] = {path: [] for path in urls}
    clients = {path: httpx.AsyncClient(timeout=120, trust_env=False) for path in urls}
    try:
        for path, url in urls.items():
            for _ in range(4):
                await _one(clients[path], url, keys[path], bodies[0])  # warm the pools
        for body in bodies:
            for path, url in urls.items():
                samples[path].append(await _one(clients[path], url, keys[path], body))
    finally:
        for client in clients.values():
            await client.aclose()
    return samples


def summarize(samples: Sequence[tuple[float, float]], *, elapsed: float) -> dict[str, float]:
    """p50/p99 (nearest rank) of TTFT and E2E in ms, and requests/s."""
    ttft = sorted(s[0] * 1000 for s in samples)
    e2e = sorted(s[1] * 1000 for s in samples)
    p99 = min(len(e2e) - 1, int(len(e2e) * 0.99))
    return {
        "ttft_p50": statistics.median(ttft), "ttft_p99": ttft[p99],
        "e2e_p50": statistics.median(e2e), "e2e_p99": e2e[p99], "rps": len(samples) / elapsed,
    }  # fmt: skip


def _admission_seconds(metrics_url: str) -> tuple[float, float]:
    """(sum, count) of the admission layer's decision-time histogram."""
    text = httpx.get(metrics_url, timeout=5).text
    found = {"sum": 0.0, "count": 0.0}
    for family in text_string_to_metric_families(text):
        if family.name == "sparkllm_gateway_admission_duration_seconds":
            for sample in family.samples:
                for part in found:
                    if sample.name.endswith("_" + part):
                        found[part] += sample.value
    return found["sum"], found["count"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply request counts")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        model_dir = scratch / "model"
        model_dir.mkdir()
        train_bench_tokenizer(model_dir)
        counter, template = (
            TokenCounter.from_dir(model_dir),
            ChatTemplate.load(tokenizer_dir=model_dir),
        )
        urls, metrics_url, processes = start_stack(scratch, model_dir)
        try:
            _report(urls, counter, template, scale=args.scale, metrics_url=metrics_url)
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()


def reworded(messages: list[dict[str, str]], shift: int) -> list[dict[str, str]]:
    """The same conversation with the last message's words rotated by ``shift``.

    The same words, so the same bytes and about the same tokens, but a different text:
    nothing that remembers a prompt's text (in smg, the simulator or the admission
    layer) can serve one round from an earlier one.
    """
    words = messages[-1]["content"].split(" ")
    shift %= len(words)
    return [*messages[:-1], {**messages[-1], "content": " ".join(words[shift:] + words[:shift])}]


def _concurrency_one(
    urls: dict[str, str], keys: dict[str, str], bodies: Sequence[bytes]
) -> tuple[dict[str, dict[str, float]], tuple[float, float]]:
    """The interleaved concurrency-1 run: per-path rows, and the median per-round
    difference admission - smg of (TTFT, E2E) in ms."""
    samples = asyncio.run(run_interleaved(urls, keys, bodies))
    # requests/s as if each path had run alone, back to back: its rounds over their E2E sum.
    rows = {
        path: summarize(found, elapsed=sum(sample[1] for sample in found))
        for path, found in samples.items()
    }
    pairs = list(zip(samples["admission"], samples["smg"], strict=True))
    paired = (
        statistics.median((a[0] - s[0]) * 1000 for a, s in pairs),
        statistics.median((a[1] - s[1]) * 1000 for a, s in pairs),
    )
    return rows, paired


def _report(
    urls: dict[str, str], counter: TokenCounter, template: ChatTemplate, *, scale: float,
    metrics_url: str,
) -> None:  # fmt: skip
    messages = _prompt_of_tokens(counter, template, 256)
    body = json.dumps({"model": MODEL, "messages": messages, "stream": True,
                       "max_tokens": OUTPUT_TOKENS}).encode()  # fmt: skip
    keys = {"direct": ENGINE_KEY, "smg": ENGINE_KEY, "admission": USER_KEY}
    print(f"streamed chat, 256-token prompt, {OUTPUT_TOKENS} output tokens (simulator: 1 ms/token)")
    header = ("conc", "path", "TTFT p50 ms", "p99", "E2E p50 ms", "p99", "req/s")
    print("{:>4} {:<10} {:>11} {:>8} {:>10} {:>8} {:>7}".format(*header))
    rounds = max(20, int(REQUESTS[1] * scale))
    bodies = [
        json.dumps(
            {
                "model": MODEL,
                "messages": reworded(messages, shift),
                "stream": True,
                "max_tokens": OUTPUT_TOKENS,
            }
        ).encode()
        for shift in range(rounds)
    ]
    rows, (ttft_paired, e2e_paired) = _concurrency_one(urls, keys, bodies)
    smg, gated = rows["smg"], rows["admission"]
    for concurrency in CONCURRENCY:
        total = max(concurrency, int(REQUESTS[concurrency] * scale))
        if concurrency > 1:
            rows = {
                path: asyncio.run(
                    run_load(urls[path], keys[path], body, concurrency=concurrency, total=total)
                )
                for path in ("direct", "smg", "admission")
            }
        for path, r in rows.items():
            print(f"{concurrency:>4} {path:<10} {r['ttft_p50']:>11.2f} {r['ttft_p99']:>8.2f} "
                  f"{r['e2e_p50']:>10.1f} {r['e2e_p99']:>8.1f} {r['rps']:>7.1f}")  # fmt: skip
    print("\nconcurrency 1, what admission adds over smg alone (goal: <= 1 ms p50, <= 3 ms p99)")
    print(f"  TTFT  p50 {gated['ttft_p50'] - smg['ttft_p50']:+.2f} ms   "
          f"p99 {gated['ttft_p99'] - smg['ttft_p99']:+.2f} ms   "
          f"median of per-round differences {ttft_paired:+.2f} ms")  # fmt: skip
    print(f"  E2E   p50 {gated['e2e_p50'] - smg['e2e_p50']:+.2f} ms   "
          f"p99 {gated['e2e_p99'] - smg['e2e_p99']:+.2f} ms   "
          f"median of per-round differences {e2e_paired:+.2f} ms")  # fmt: skip
    print("\nlong prompts, no max_tokens (exact count + rest of the window), concurrency 1")
    header = ("prompt", "smg E2E p50 ms", "admission E2E p50 ms", "diff ms", "decide mean ms")
    print("{:>7} {:>15} {:>21} {:>8} {:>15}".format(*header))
    for target in (2048, 8192):
        long_messages = _prompt_of_tokens(counter, template, target)
        long_body = json.dumps({"model": MODEL, "messages": long_messages, "stream": True}).encode()
        total = max(5, int(15 * scale))
        via_smg = asyncio.run(
            run_load(urls["smg"], ENGINE_KEY, long_body, concurrency=1, total=total)
        )
        before = _admission_seconds(metrics_url)
        via_gate = asyncio.run(
            run_load(urls["admission"], USER_KEY, long_body, concurrency=1, total=total)
        )
        after = _admission_seconds(metrics_url)
        decide_ms = (after[0] - before[0]) / max(1.0, after[1] - before[1]) * 1000
        diff = via_gate["e2e_p50"] - via_smg["e2e_p50"]
        print(f"{target:>7} {via_smg['e2e_p50']:>15.1f} {via_gate['e2e_p50']:>21.1f} "
              f"{diff:>8.1f} {decide_ms:>15.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
