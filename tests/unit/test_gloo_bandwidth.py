"""The bandwidth preflight's real collective: three processes, Gloo over loopback.

The module the ranks run before their engine (``python -m sparkllm.preflight.bandwidth``)
runs here unchanged with torch from the cached venv ``hack/setup-torch.sh`` makes (``make
test`` runs it): rendezvous, 8 to 128 MiB all_reduce and all_gather, the ranks' agreement
on the slowest time, the table, the finding, each rank's termination message and exit
code. Gloo on a 2-core machine measures nothing about a fabric, so the thresholds here
are chosen around it: one far below (passes), one far above (fails, and exits 1 only
with --gate). Sizes stay at nccl-tests' 8M-128M; iterations are few to keep it short.
"""

from __future__ import annotations

import re

import pytest

from sparkllm.preflight import Check, Severity
from sparkllm.preflight.bandwidth import DEFAULT_SIZES, MIB
from sparkllm_dev.gloo_bandwidth import GlooRun, run_gloo, torch_venv
from tests.unit.tooling import filled

pytestmark = pytest.mark.needs_binary  # the torch venv; no cluster
FAST = ("--warmup", "1", "--iterations", "2")
ROW = re.compile(r"^\s*(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$")


@pytest.fixture(scope="module")
def python() -> str:
    venv = filled(torch_venv(), marker=".complete", how="run `bash hack/setup-torch.sh`")
    return str(venv / "bin" / "python")


def _rows(run: GlooRun) -> dict[int, float]:
    """size -> busbw (Gb/s) from rank 0's table."""
    rows = [ROW.match(line) for line in run.output.splitlines()]
    return {int(m[1]): float(m[5]) for m in rows if m}


def test_three_ranks_all_reduce_print_bus_bandwidth(python: str) -> None:
    run = run_gloo(python, args=(*FAST, "--node", "spark-0", "--threshold-gbps", "0.001"))
    print(run.output)
    assert run.exit_codes == (0, 0, 0)
    rows = _rows(run)
    assert sorted(rows) == [8 * MIB, 16 * MIB, 32 * MIB, 64 * MIB, 128 * MIB]
    assert sorted(rows) == list(DEFAULT_SIZES)
    assert all(busbw > 0 for busbw in rows.values())
    line = next(x for x in run.output.splitlines() if x.startswith("spark-0: Bandwidth"))
    assert re.fullmatch(
        r"spark-0: Bandwidth \(info\): all_reduce bus bandwidth [\d.]+ Gb/s at 128 MiB "
        r"across 3 ranks",
        line,
    )
    results = [r for r in run.results if r is not None]
    assert [r.rank for r in results] == [0, 1, 2]
    # The ranks agreed on one (the slowest) measurement; only rank 0 names it.
    assert len({r.busbw_gbps for r in results}) == 1
    assert results[0].busbw_gbps == pytest.approx(rows[128 * MIB], abs=0.06)
    assert (results[0].ranks, results[0].nbytes, results[0].op) == (3, 128 * MIB, "all_reduce")
    [finding] = results[0].findings
    assert (finding.check, finding.severity) == (Check.BANDWIDTH, Severity.INFO)
    assert results[1].findings == results[2].findings == ()


@pytest.mark.parametrize("gate", [False, True])
def test_below_the_threshold_fails_and_gates(python: str, gate: bool) -> None:
    args = (*FAST, "--op", "all_gather", "--max-mib", "16", "--threshold-gbps", "1e9")
    run = run_gloo(python, args=(*args, *(("--gate",) if gate else ())))
    assert run.exit_codes == ((1, 1, 1) if gate else (0, 0, 0))
    assert sorted(_rows(run)) == [8 * MIB, 16 * MIB]
    result = run.results[0]
    assert result is not None
    [finding] = result.findings
    assert finding.severity is Severity.ERROR
    assert re.fullmatch(
        r"all_gather bus bandwidth [\d.]+ Gb/s at 16 MiB across 3 ranks, "
        r"below the threshold 1e\+09 Gb/s",
        finding.message,
    )


def test_a_missing_peer_is_a_finding_not_a_hang(python: str) -> None:
    # Ranks 0 and 1 of 3 start: the rendezvous times out and says where it waited.
    run = run_gloo(python, started=2, args=("--timeout-seconds", "2", "--gate"))
    assert run.exit_codes == (1, 1)
    for rank, result in enumerate(run.results):
        assert result is not None
        assert (result.rank, result.ranks, result.busbw_gbps) == (rank, 3, None)
        [finding] = result.findings
        assert finding.severity is Severity.ERROR
        assert f"rank {rank} of 3: no collective with rank 0 at 127.0.0.1:" in finding.message
