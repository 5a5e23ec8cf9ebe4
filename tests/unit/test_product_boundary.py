"""The product is only the product: no harness code in its package, its wheel or its CLI.

The dev cluster, the SGLang simulator, the demo and the flag extractor live in harness/
(package ``sparkllm_dev``), installed only into the dev virtualenv. Three checks hold that
line: no module of ``operator/sparkllm`` imports the harness (import-linter's
``product-harness`` contract, run by test_import_contracts.py: a lazy import inside a
function counts too), the product wheel built from what the Dockerfile copies
(pyproject.toml, README.md, operator/) holds none of the harness's files, and the product
CLI offers only the product's subcommands.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# What must never be in the product, as path parts of the wheel's files.
HARNESS_PARTS = ("sim", "devcluster", "demo.py", "flag_extract.py", "source_literals.py")
PRODUCT_COMMANDS = {
    "run", "render", "plan", "verify-model", "verify-network", "verify-memory", "engine-cache",
    "bench", "usage", "stage-model",
}  # fmt: skip


@pytest.fixture(scope="module")
def product_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The product wheel, built offline from the Dockerfile's build context only."""
    context = tmp_path_factory.mktemp("context")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, context / name)
    shutil.copytree(
        ROOT / "operator",
        context / "operator",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"),
    )
    out = tmp_path_factory.mktemp("dist")
    # The PEP 517 backend pyproject.toml names (setuptools, pinned in the dev extras too),
    # called directly: what `pip wheel --no-build-isolation` runs, without pip's overhead.
    build = "import sys; from setuptools import build_meta; build_meta.build_wheel(sys.argv[1])"
    built = subprocess.run(
        [sys.executable, "-c", build, str(out)],
        cwd=context,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = out.glob("sparkllm-*.whl")
    return wheel


@pytest.mark.needs_binary  # builds the product wheel (setuptools, a few seconds)
def test_product_wheel_holds_no_harness_file(product_wheel: Path) -> None:
    with zipfile.ZipFile(product_wheel) as archive:
        names = archive.namelist()
    packages = {name.split("/")[0] for name in names if not name.endswith((".dist-info", "/"))}
    assert "sparkllm/cli.py" in names  # the product itself is there
    assert {p for p in packages if not p.startswith("sparkllm-")} == {"sparkllm"}
    assert [name for name in names if set(name.split("/")) & set(HARNESS_PARTS)] == []


def test_product_cli_offers_only_product_commands() -> None:
    script = Path(sys.executable).with_name("sparkllm")  # the installed entry point
    command = [str(script)] if script.exists() else [sys.executable, "-m", "sparkllm.cli"]
    result = subprocess.run(
        [*command, "--help"], capture_output=True, text=True, check=True, timeout=60
    )
    commands = set(result.stdout.split("{", 1)[1].split("}", 1)[0].split(","))
    assert commands == PRODUCT_COMMANDS
    assert "devcluster" not in result.stdout
    assert "demo" not in result.stdout
