"""The chart's alerts, checked and unit-tested by Prometheus's own tool.

``promtool check rules`` parses every expression and template the chart renders (with
default values and with every option changed), and ``promtool test rules`` runs
tests/promtool/sparkllm-alerts.test.yaml against the rendered rules: every alert fires on
series that should fire it, with its exact labels and rendered annotations, and stays silent
on series that should not. A new alert without both a firing and a silent case fails here.
promtool comes from Debian's ``prometheus`` package, installed by hack/setup-test-tools.sh
(``make test`` runs it); the kustomize trees carry no rule file (checked below).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.test_chart_kubeconform import kustomize
from tests.unit.test_chart_monitoring import CHANGED_THRESHOLDS
from tests.unit.test_chart_render import ALL_MONITORING, MONITORING_API, ROOT, one
from tests.unit.test_chart_render import render_chart as helm_template
from tests.unit.tooling import on_path

pytestmark = pytest.mark.needs_binary  # promtool, helm, kubectl
UNIT_TESTS = ROOT / "tests" / "promtool" / "sparkllm-alerts.test.yaml"
RULES_NAME = "sparkllm-rules.yaml"
CHANGED = {"prometheusRule": CHANGED_THRESHOLDS}


def rule_groups(values: dict[str, Any] | None = None) -> dict[str, Any]:
    """The PrometheusRule's spec: exactly a Prometheus rule file ({groups: [...]})."""
    objs = helm_template({**ALL_MONITORING, **(values or {})}, api_versions=MONITORING_API)
    spec: dict[str, Any] = one(objs, "PrometheusRule")["spec"]
    return spec


def run_promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [on_path("promtool"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("values", [None, CHANGED], ids=["defaults", "changed"])
def test_promtool_check_rules(values: dict[str, Any] | None, tmp_path: Path) -> None:
    (tmp_path / RULES_NAME).write_text(yaml.safe_dump(rule_groups(values)))
    result = run_promtool("check", "rules", RULES_NAME, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    alerts = sum(len(g["rules"]) for g in rule_groups(values)["groups"])
    assert f"SUCCESS: {alerts} rules found" in result.stdout


def test_promtool_unit_tests_pass(tmp_path: Path) -> None:
    (tmp_path / RULES_NAME).write_text(yaml.safe_dump(rule_groups()))
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    result = run_promtool("test", "rules", UNIT_TESTS.name, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_a_wrong_expectation_fails(tmp_path: Path) -> None:
    """Control: promtool really compares (a threshold moved makes the tests fail)."""
    groups = rule_groups({"prometheusRule": {**CHANGED_THRESHOLDS, "ttftP95Seconds": 30}})
    (tmp_path / RULES_NAME).write_text(yaml.safe_dump(groups))
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    result = run_promtool("test", "rules", UNIT_TESTS.name, cwd=tmp_path)
    assert result.returncode != 0
    assert "SparkLLMTimeToFirstTokenHigh" in result.stdout + result.stderr


def test_every_alert_has_a_firing_and_a_silent_case() -> None:
    tests = yaml.safe_load(UNIT_TESTS.read_text())
    assert tests["rule_files"] == [RULES_NAME]
    fires: set[str] = set()
    silent: set[str] = set()
    for case in tests["tests"]:
        for check in case["alert_rule_test"]:
            (fires if check["exp_alerts"] else silent).add(check["alertname"])
    alerts = {r["alert"] for g in rule_groups()["groups"] for r in g["rules"]}
    assert len(alerts) == 16
    assert alerts - fires == set(), "alerts without a firing case"
    assert alerts - silent == set(), "alerts without a silent case"
    assert (fires | silent) <= alerts, "tests of alerts that no longer exist"


@pytest.mark.parametrize("overlay", ["base", "overlays/dev", "overlays/ha"])
def test_kustomize_trees_carry_no_rule_file(overlay: str) -> None:
    """The alerts ship with the chart only; promtool above covers every rule rendered."""
    assert "PrometheusRule" not in {d["kind"] for d in kustomize(overlay)}
