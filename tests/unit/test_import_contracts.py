"""The architecture holds: import-linter's contracts (pyproject.toml, [tool.importlinter]).

The contracts say what may import what — the product never imports the harness; the
product's packages in layers; a reconcile pass's steps in layers with ``decide`` at the
bottom, importing nothing doing I/O; the front door and the benchmark use the Kubernetes
client without reaching into reconcile; the client is a bottom floor. `make lint` runs
`lint-imports`; this test runs the same check, so `make unit` fails on a broken contract
and prints the chain of imports that breaks it. A second test shows the check sees an
import made inside a function (the kind a hand-written top-level scan would miss).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"


def test_the_import_contracts_hold() -> None:
    # In a process of its own: lint-imports configures logging with dictConfig, which
    # disables every logger this process made before (tests after it in the same session
    # then saw no records, e.g. test_reconcile_triggers' caplog).
    script = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(script), str(PYPROJECT), "--no-cache", "--no-logo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_lazy_import_of_the_harness_breaks_the_product_contract(tmp_path: Path) -> None:
    config = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["id"] == "product-harness"]
    for package in ("sparkllm", "sparkllm_dev"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "sparkllm_dev" / "sim.py").write_text("")
    (tmp_path / "sparkllm" / "lazy.py").write_text("def f():\n    from sparkllm_dev import sim\n")
    (tmp_path / ".importlinter").write_text(
        "[importlinter]\nroot_packages =\n    sparkllm\n    sparkllm_dev\n\n"
        f"[importlinter:contract:{contract['id']}]\nname = {contract['name']}\n"
        f"type = {contract['type']}\nsource_modules = {' '.join(contract['source_modules'])}\n"
        f"forbidden_modules = {' '.join(contract['forbidden_modules'])}\n"
    )
    script = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(script), "--no-cache", "--no-logo"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "sparkllm.lazy -> sparkllm_dev.sim" in result.stdout
