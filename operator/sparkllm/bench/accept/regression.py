"""Performance regression against an accepted baseline, per scenario and metric.

Why: the documents list "performance regression for the current configuration" as still
to do before production. A baseline is a run someone accepted (set on request, never
implicitly); every later run is compared with it per scenario on TTFT, TPOT and E2E p95
(lower is better) and output throughput (higher is better), each with its own stated
tolerance. The baseline is kept on the InferenceCluster as the JSON of the annotation
``sparkllm.io/accepted-baseline`` (a file works too), so it travels with the deployment.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from sparkllm.bench.accept.rows import Row
from sparkllm.bench.stats import LoadMetrics
from sparkllm.errors import SpecError

SECTION: Final = "regression"
LOWER_IS_BETTER: Final = ("ttftP95Ms", "tpotP95Ms", "e2eP95Ms")
HIGHER_IS_BETTER: Final = ("outputTokensPerS",)
DEFAULT_TOLERANCE: Final[Mapping[str, float]] = {
    "ttftP95Ms": 0.20,
    "tpotP95Ms": 0.20,
    "e2eP95Ms": 0.20,
    "outputTokensPerS": 0.15,
}


def scenario_figures(metrics: LoadMetrics) -> dict[str, float]:
    """The compared figures of one scenario (a metric without data is left out)."""
    figures = {"outputTokensPerS": round(metrics.output_tokens_per_s, 3)}
    for key, dist in (
        ("ttftP95Ms", metrics.ttft),
        ("tpotP95Ms", metrics.tpot),
        ("e2eP95Ms", metrics.e2e),
    ):
        if dist is not None:
            figures[key] = round(dist.p95_ms, 3)
    return figures


def make_baseline(
    figures: Mapping[str, Mapping[str, float]], *, now: datetime | None = None
) -> dict[str, Any]:
    moment = (now or datetime.now(UTC)).replace(microsecond=0)
    return {
        "setAt": moment.isoformat().replace("+00:00", "Z"),
        "scenarios": {name: dict(values) for name, values in figures.items()},
    }


def parse_tolerances(text: str | None) -> dict[str, float]:
    """``metric=fraction,...`` over the defaults; SpecError naming a bad entry."""
    tolerances = dict(DEFAULT_TOLERANCE)
    for entry in filter(None, (part.strip() for part in (text or "").split(","))):
        name, _, value = entry.partition("=")
        if name not in tolerances:
            raise SpecError(f"unknown tolerance metric {name!r}; known: {', '.join(tolerances)}")
        try:
            tolerances[name] = float(value)
        except ValueError:
            raise SpecError(f"tolerance {entry!r} is not metric=fraction") from None
        if tolerances[name] < 0:
            raise SpecError(f"tolerance {entry!r} must not be negative")
    return tolerances


def _compare(metric: str, *, base: float, now: float, tolerance: float) -> str | None:
    if metric in HIGHER_IS_BETTER:
        floor = base * (1 - tolerance)
        return (
            f"{metric} {now:g} < {floor:g} (baseline {base:g} -{tolerance:.0%})"
            if now < floor
            else None
        )
    ceiling = base * (1 + tolerance)
    return (
        f"{metric} {now:g} > {ceiling:g} (baseline {base:g} +{tolerance:.0%})"
        if now > ceiling
        else None
    )


def regression_rows(
    figures: Mapping[str, Mapping[str, float]],
    *,
    baseline: Mapping[str, Any] | None,
    tolerances: Mapping[str, float],
) -> list[Row]:
    """One row per measured scenario; ``not measured`` without a baseline for it."""
    stated = ", ".join(f"{name} {value:.0%}" for name, value in tolerances.items())
    rows = []
    base_scenarios = (baseline or {}).get("scenarios") or {}
    for scenario, values in figures.items():
        base = base_scenarios.get(scenario)
        name = f"{scenario} vs baseline"
        if not isinstance(base, Mapping):
            where = "no accepted baseline" if baseline is None else "baseline has no such scenario"
            rows.append(
                Row(
                    section=SECTION,
                    name=name,
                    verdict="not measured",
                    basis=f"tolerances: {stated}",
                    detail=where,
                )
            )
            continue
        basis = (
            f"baseline set {baseline.get('setAt', '?')}; tolerances: {stated}" if baseline else ""
        )
        problems = [
            problem
            for metric, now in values.items()
            if isinstance(base.get(metric), (int, float))
            and (
                problem := _compare(
                    metric, base=float(base[metric]), now=now, tolerance=tolerances.get(metric, 0.0)
                )
            )
        ]
        compared = [metric for metric in values if isinstance(base.get(metric), (int, float))]
        if not compared:
            rows.append(
                Row(
                    section=SECTION,
                    name=name,
                    verdict="not measured",
                    basis=basis,
                    detail="no common metric",
                )
            )
            continue
        detail = "; ".join(problems) or f"within tolerance on {', '.join(compared)}"
        rows.append(
            Row(
                section=SECTION,
                name=name,
                verdict="fail" if problems else "pass",
                basis=basis,
                detail=detail,
            )
        )
    return rows
