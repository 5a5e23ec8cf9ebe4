"""The cheap half of `make image`: what the build script promises, checked without building.

Building the image (hack/build-image.sh: an mmdebstrap bookworm base, buildah, then the
entry points run inside it as UID 65532) takes minutes, root and PyPI, so it is its own
target (`make image`, and a step of .ci/run), not a unit test. Here: the script feeds the
Dockerfile's own PYTHON_IMAGE argument, builds a base whose python3 is the 3.11 the
project requires, runs the three entry points as the Dockerfile's USER, fails on harness
or test files in the image, and both set-up scripts parse.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.unit.test_chart_render import ROOT
from tests.unit.test_dockerfile import FINAL, GLOBAL_ARGS, STAGES

SCRIPT = (ROOT / "hack" / "build-image.sh").read_text()
MAKEFILE = (ROOT / "Makefile").read_text()


def test_make_image_and_make_test_run_the_scripts() -> None:
    assert re.search(r"^image:.*\n\tbash hack/build-image.sh$", MAKEFILE, re.M)
    assert re.search(r"^tools:.*\n\t.*bash hack/setup-test-tools.sh$", MAKEFILE, re.M)
    test_target = re.search(r"^test: (.*)$", MAKEFILE, re.M)
    assert test_target
    assert "setup" in test_target.group(1).split()
    # The set-up runs the tools beside the Go builds (one make -j2), each prefixed.
    setup = re.search(r"^setup: .*\n\t@\$\(MAKE\) .*-j2 (.*)$", MAKEFILE, re.M)
    assert setup
    assert setup.group(1).split() == ["binaries-prefixed", "tools-prefixed"]
    assert re.search(
        r"^binaries-prefixed tools-prefixed: .*\n\t.*\$\(MAKE\).*\$\(@:-prefixed=\)", MAKEFILE, re.M
    )


def test_the_base_is_fed_through_the_dockerfiles_own_argument() -> None:
    assert "PYTHON_IMAGE" in GLOBAL_ARGS
    assert all(stage.base == "${PYTHON_IMAGE}" for stage in STAGES)
    assert '--build-arg "PYTHON_IMAGE=$BASE_IMAGE"' in SCRIPT


def test_the_base_is_bookworm_whose_python3_is_311() -> None:
    """bookworm's python3 is 3.11 (the script prints it from inside the base)."""
    assert re.search(r"^SUITE=bookworm$", SCRIPT, re.M)
    packages = re.search(r'^BASE_PACKAGES="([^"]+)"$', SCRIPT, re.M)
    assert packages
    assert {"python3", "python3-venv", "python-is-python3", "passwd"} <= set(
        packages.group(1).split(",")
    )
    assert "python --version" in SCRIPT


def test_entry_points_run_as_the_dockerfiles_user() -> None:
    user = FINAL.args_of("USER")[-1]
    assert f"--user {user}" in SCRIPT
    for command in ("sparkllm --help", "smg --help", "python -m sparkllm.gateway --help"):
        assert command in SCRIPT
    assert "sparkllm_dev" in SCRIPT  # the content check names the harness package


@pytest.mark.parametrize(
    "script",
    [
        "build-image.sh",
        "setup-test-tools.sh",
        "setup-torch.sh",
        "setup-open-webui.sh",
        "lib/apt.sh",
        "lib/cached-venv.sh",
        "lib/steps.sh",
    ],
)
def test_scripts_parse(script: str) -> None:
    result = subprocess.run(
        ["bash", "-n", str(ROOT / "hack" / script)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
