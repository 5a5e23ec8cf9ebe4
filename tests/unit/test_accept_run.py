"""The whole checklist, small, against the simulator; regression and resource rows alone."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from tokenizers import Tokenizer

from sparkllm.bench import bench_main
from sparkllm.bench.accept.load import LoadSizes, poisson_offsets
from sparkllm.bench.accept.regression import make_baseline, parse_tolerances, regression_rows
from sparkllm.bench.accept.report import report_json, report_markdown, status_summary
from sparkllm.bench.accept.resources import (
    node_selector,
    prometheus_rows,
    restart_count,
    restarts_row,
)
from sparkllm.bench.accept.rows import Row
from sparkllm.bench.accept.run import AcceptConfig, AcceptRun, run_acceptance
from sparkllm.bench.runner import BenchTarget
from sparkllm.errors import SpecError
from sparkllm_dev.sim.server import prepare
from tests.unit.accept_sim import KEY, MODEL, SMALL, FrontDoor, model_dir, sim_argv
from tests.unit.gateway_fixtures import train_tokenizer, write_model_dir


def statuses(*restarts: int) -> Any:
    """A status reader returning the given restart totals in turn (the last one repeats)."""
    seen = list(restarts)

    async def read() -> Mapping[str, Any]:
        value = seen.pop(0) if len(seen) > 1 else seen[0]
        return {"replicaStatuses": [{"restarts": value, "nodes": ["a", "b", "c"]}]}

    return read


def accept(tmp_path: Path, *, faults: tuple[str, ...] = (), **extra: Any) -> Any:
    sim = [f"--sim-fault={fault}" for fault in faults]
    app = FrontDoor(prepare(sim_argv(model_dir(tmp_path), sim=sim), env={}).app)
    config = AcceptConfig(
        target=BenchTarget(base_url="http://sim", model=MODEL, api_key=KEY),
        sizes=SMALL,
        transport=httpx.ASGITransport(app=app),
        **extra,
    )
    with (tmp_path / "bar").open("w") as bar:
        return config, asyncio.run(run_acceptance(config, progress_out=bar))


def test_every_row_against_a_healthy_simulator(tmp_path: Path) -> None:
    config, run = accept(tmp_path, read_status=statuses(2))
    verdicts = {(row.section, row.name): row.verdict for row in run.rows}
    assert verdicts == {
        ("functional", "deterministic answer"): "pass",
        ("functional", "streaming"): "pass",
        ("functional", "reasoning"): "pass",
        ("functional", "function call"): "pass",
        ("functional", "unsupported tool forms refused"): "pass",
        ("stress", "Scale8"): "pass",
        ("stress", "Arrival"): "pass",
        ("soak", "soak errors"): "pass",
        ("soak", "rank restarts during the soak"): "pass",
        ("regression", "scale8 vs baseline"): "not measured",
        ("regression", "arrival vs baseline"): "not measured",
        ("resources", "rank restarts"): "pass",
        ("resources", "memory pressure (PSI)"): "not measured",
        ("resources", "swap"): "not measured",
        ("resources", "OOM kills"): "not measured",
        ("resources", "GPU XID errors"): "not measured",
        ("resources", "RDMA port errors"): "not measured",
    }
    assert run.passed
    rows = {row.name: row for row in run.rows}
    assert rows["Scale8"].detail == "6/6 completed"
    assert "at closed-loop concurrency 3" in rows["Scale8"].basis
    assert "Poisson arrivals at 40 req/s" in rows["Arrival"].basis
    assert "<= 0.10 req/s for 256 -> 128" in rows["Arrival"].basis
    assert rows["swap"].detail == "no Prometheus URL"
    assert "| resources | swap | **not measured** |" in report_markdown(run, config)
    data = report_json(run, config)
    assert data["counts"] == {"pass": 10, "not measured": 7}
    assert set(data["figures"]) == {"scale8", "arrival"}
    summary = status_summary(run)
    assert (summary["pass"], summary["fail"], summary["notMeasured"]) == (10, 0, 7)
    bar = (tmp_path / "bar").read_text()
    assert bar.count("[bench] functional") >= 1
    assert "[bench] soak      [########################] 1/1 errors 0" in bar  # seconds
    assert "[accept] Arrival: 4 requests 16 -> 8 tokens, Poisson arrivals at 40 req/s" in bar
    assert "[accept] Scale8: 6 requests 16 -> 8 tokens at closed-loop concurrency 3" in bar
    assert summary["verdicts"]["resources/swap"] == "not measured"
    assert summary["verdicts"]["functional/streaming"] == "pass"
    assert len(summary["verdicts"]) == 17
    assert summary["failed"] == []
    assert set(summary["figures"]) == {"scale8", "arrival"}
    assert summary["startedAt"] <= summary["endedAt"]
    assert "Result: **PASSED** — 10 pass, 0 fail, 7 not measured" in report_markdown(run, config)


def test_a_restart_during_the_run_fails_the_rows(tmp_path: Path) -> None:
    _, run = accept(tmp_path, sections=("soak", "resources"), read_status=statuses(0, 0, 1))
    rows = {row.name: row for row in run.rows}
    assert rows["rank restarts during the soak"].verdict == "fail"
    assert rows["rank restarts during the soak"].detail == "1 gang restart(s) (0 -> 1)"
    assert rows["rank restarts"].verdict == "fail"
    assert not run.passed


def test_a_broken_engine_fails_stress_naming_the_error(tmp_path: Path) -> None:
    _, run = accept(tmp_path, faults=("broken-stream",), sections=("stress",))
    rows = {row.name: row for row in run.rows}
    assert rows["Scale8"].verdict == "fail"
    assert "0/6 completed; errors: stream ended without [DONE]" in rows["Scale8"].detail
    assert rows["Arrival"].verdict == "fail"
    assert "0/4 completed; errors: stream ended without [DONE]" in rows["Arrival"].detail
    summary = status_summary(run)
    assert summary["failed"][0].startswith(
        "stress/Scale8: 0/6 completed; errors: stream ended without [DONE]"
    )
    assert (summary["fail"], summary["verdicts"]["stress/Arrival"]) == (2, "fail")


def test_the_status_summary_fits_a_termination_message() -> None:
    rows = [
        Row(section="functional", name=f"check {i}", verdict="fail", basis="b", detail="x" * 500)
        for i in range(40)
    ]
    summary = status_summary(AcceptRun(rows=rows, started=0.0, ended=1.0))
    assert len(json.dumps(summary, separators=(",", ":")).encode()) <= 3584
    assert summary["fail"] == 40  # the counts are never cut
    assert all(len(entry) <= 200 for entry in summary["failed"])
    assert summary["failed"][0].startswith("functional/check 0: xxx")


def test_regression_against_a_baseline_per_metric() -> None:
    baseline = make_baseline({"scale8": {"ttftP95Ms": 100.0, "outputTokensPerS": 10.0}})
    tolerances = parse_tolerances("ttftP95Ms=0.1")
    within = {"scale8": {"ttftP95Ms": 109.0, "outputTokensPerS": 9.0}}
    worse = {"scale8": {"ttftP95Ms": 111.0, "outputTokensPerS": 8.0}}
    [ok] = regression_rows(within, baseline=baseline, tolerances=tolerances)
    [bad] = regression_rows(worse, baseline=baseline, tolerances=tolerances)
    assert ok.verdict == "pass"
    assert bad.verdict == "fail"
    assert "ttftP95Ms 111 > 110 (baseline 100 +10%)" in bad.detail
    assert "outputTokensPerS 8 < 8.5 (baseline 10 -15%)" in bad.detail
    [none] = regression_rows(within, baseline=None, tolerances=tolerances)
    assert (none.verdict, none.detail) == ("not measured", "no accepted baseline")
    with pytest.raises(SpecError, match="unknown tolerance metric 'x'"):
        parse_tolerances("x=1")


def prometheus(values: Mapping[str, float | None]) -> httpx.AsyncClient:
    """A Prometheus stand-in answering each query by the metric name it mentions."""

    def answer(request: httpx.Request) -> httpx.Response:
        query = request.url.params["query"]
        value = next((v for name, v in values.items() if name in query), None)
        result = [] if value is None else [{"metric": {}, "value": [0, str(value)]}]
        return httpx.Response(200, json={"status": "success", "data": {"result": result}})

    return httpx.AsyncClient(transport=httpx.MockTransport(answer))


def test_prometheus_rows_pass_fail_and_not_measured() -> None:
    client = prometheus(
        {
            "node_pressure_memory_waiting": 0.0,
            "SwapTotal": 0.0,
            "oom_kill": 1.0,
            "DCGM_FI_DEV_XID_ERRORS": None,
            "node_infiniband_port_errors": 0.0,
        }
    )
    rows = asyncio.run(
        prometheus_rows(
            client, url="http://prom", window_s=120, end=1.0, selector=node_selector(["n1"])
        )
    )
    verdicts = {row.name: row.verdict for row in rows}
    assert verdicts == {
        "memory pressure (PSI)": "pass",
        "swap": "pass",
        "OOM kills": "fail",
        "GPU XID errors": "not measured",
        "RDMA port errors": "pass",
    }
    oom = next(row for row in rows if row.name == "OOM kills")
    assert 'node_vmstat_oom_kill{instance=~"(n1)(:[0-9]+)?"}[120s]' in oom.detail


def test_restart_rows_and_poisson_times() -> None:
    assert restart_count({"replicaStatuses": [{"restarts": 1}, {"restarts": 2}]}) == 3
    assert restart_count(None) is None
    assert restarts_row(before=None, after=3).verdict == "not measured"
    offsets = poisson_offsets(2000, rate=0.1, seed=19)
    assert offsets[0] == 0.0
    assert offsets == sorted(offsets)
    assert 9.0 < offsets[-1] / 1999 < 11.0  # mean gap ~ 1 / rate
    assert json.dumps(make_baseline({"s": {"e2eP95Ms": 1.0}}))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--sections", "functional,bogus"], "unknown section(s) ['bogus']"),
        (["--arrival-rate", "0"], "the arrival rate must be positive"),
        (["--set-baseline"], "--set-baseline needs --inference-cluster"),
        (["--tolerance", "e2eP95Ms=x"], "tolerance 'e2eP95Ms=x' is not metric=fraction"),
    ],
)
def test_accept_mode_usage_errors(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--base-url", "http://127.0.0.1:9", "--model", "m", "--accept", *extra]
    assert bench_main(argv) == 2
    assert message in capsys.readouterr().err


class Recording(httpx.AsyncBaseTransport):
    """Passes requests to ``inner`` and keeps their JSON bodies; ``strip`` drops fields."""

    def __init__(self, inner: httpx.AsyncBaseTransport, *, strip: tuple[str, ...] = ()) -> None:
        self.inner, self.strip, self.bodies = inner, strip, list[dict[str, Any]]()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content or b"{}")
        self.bodies.append(body)
        if self.strip:
            kept = {k: v for k, v in body.items() if k not in self.strip}
            headers = {k: v for k, v in request.headers.items() if k != "content-length"}
            request = httpx.Request(request.method, request.url, headers=headers, json=kept)
        return await self.inner.handle_async_request(request)


def load_run(
    tmp_path: Path, *, sizes: LoadSizes, tokenizer: Path | None, strip: tuple[str, ...] = ()
) -> tuple[AcceptConfig, AcceptRun, Recording]:
    app = FrontDoor(prepare(sim_argv(model_dir(tmp_path / "sim")), env={}).app)
    recording = Recording(httpx.ASGITransport(app=app), strip=strip)
    config = AcceptConfig(
        target=BenchTarget(base_url="http://sim", model=MODEL, api_key=KEY),
        sizes=sizes,
        sections=("stress",),
        transport=recording,
        tokenizer=tokenizer,
    )
    with (tmp_path / "bar").open("w") as bar:
        return config, asyncio.run(run_acceptance(config, progress_out=bar)), recording


def test_the_load_is_sized_in_the_models_tokens(tmp_path: Path) -> None:
    """Issue 19: Scale8 and Arrival send 256-token prompts by the model's tokenizer, with
    the output length forced (max_tokens + ignore_eos), and the basis says so."""
    model = write_model_dir(tmp_path / "model", train_tokenizer())
    sizes = replace(SMALL, scale8_requests=3, arrival_requests=2, input_tokens=256)
    config, run, recording = load_run(tmp_path, sizes=sizes, tokenizer=model)
    counter = Tokenizer.from_file(str(model / "tokenizer.json"))
    load = [body for body in recording.bodies if body.get("max_tokens") == sizes.output_tokens]
    assert len(load) == 5  # 3 Scale8 + 2 Arrival
    for body in load:
        (message,) = body["messages"]
        assert len(counter.encode(message["content"], add_special_tokens=False).ids) == 256
        assert body["ignore_eos"] is True
    rows = {row.name: row for row in run.rows}
    assert [rows[n].verdict for n in ("Scale8", "Arrival")] == ["pass", "pass"]
    for name in ("Scale8", "Arrival"):
        assert "input: 256 tokens of user text by the model's tokenizer" in rows[name].basis
        assert "output: exactly 8 tokens (max_tokens with ignore_eos" in rows[name].basis
    data = report_json(run, config)
    assert data["sizes"]["tokens"]["inputCounting"].startswith("tokenizer (")
    assert f"- Prompt lengths: tokenizer ({model / 'tokenizer.json'})" in report_markdown(
        run, config
    )
    assert "[accept] prompt lengths: tokenizer (" in (tmp_path / "bar").read_text()


def test_without_a_tokenizer_the_basis_says_approximate(tmp_path: Path) -> None:
    _, run, _ = load_run(tmp_path, sizes=replace(SMALL, arrival_requests=1), tokenizer=None)
    for row in run.rows:
        assert "input: 16 words standing in for tokens (approximate)" in row.basis


def test_an_unforced_output_length_fails_the_stress_rows(tmp_path: Path) -> None:
    """A front door that drops ignore_eos: the simulator stops at its own answer length
    (32 tokens), short of the 64 asked; every request 'completes' but the basis is not met."""
    sizes = replace(SMALL, scale8_requests=3, arrival_requests=2, output_tokens=64)
    _, run, _ = load_run(tmp_path, sizes=sizes, tokenizer=None, strip=("ignore_eos",))
    rows = {row.name: row for row in run.rows}
    for name, done in (("Scale8", 3), ("Arrival", 2)):
        assert rows[name].verdict == "fail"
        assert rows[name].detail.startswith(f"{done}/{done} completed; output ")
        assert f"{done * 64} asked (64 per request): the output length was not forced" in (
            rows[name].detail
        )
