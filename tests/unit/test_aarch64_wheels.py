"""Every runtime dependency installs on DGX Spark (arm64) from a binary wheel.

DGX Spark runs aarch64 Linux; the image's builder stage installs with pip and has no
compiler, so a dependency without an aarch64 (or pure-Python) wheel would break the arm64
build that no machine here runs. ``hack/setup-test-tools.sh`` (run by ``make test``) lets
pip resolve ``[project.dependencies]`` for CPython 3.11 on manylinux aarch64, binary
wheels only, into the cache; this test reads that cache and checks it independently of
pip: each pin is there at its exact version, every wheel's tags fit cp311/aarch64, and
every wheel's own requirements (markers evaluated for linux/aarch64/3.11) are met by
another wheel in the set — the transitive closure, not only the top-level pins.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
import zipfile
from email.parser import HeaderParser
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from sparkllm_dev.devcluster.paths import cache_root
from tests.unit.test_chart_render import ROOT
from tests.unit.tooling import filled

pytestmark = pytest.mark.needs_binary  # the aarch64 wheel cache hack/setup-test-tools.sh fills
PINS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
# The image's interpreter (Dockerfile: ARG PYTHON_IMAGE=python:3.11.N-...): markers on the
# full version (redis: async-timeout only below 3.11.3) are evaluated for the Python that runs.
IMAGE_PYTHON = re.findall(
    r"^ARG PYTHON_IMAGE=python:(3\.11\.\d+)-", (ROOT / "Dockerfile").read_text(), re.M
)[0]
SPARK = {
    "platform_machine": "aarch64",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "os_name": "posix",
    "python_version": "3.11",
    "python_full_version": IMAGE_PYTHON,
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "extra": "",
}


def wheel_dir() -> Path:
    """The cache the set-up script filled for exactly these pins (its key: their hash)."""
    key = hashlib.sha256(("\n".join(PINS) + "\n").encode()).hexdigest()[:12]
    return filled(cache_root() / "wheels-aarch64" / f"cp311-{key}", marker=".complete")


@pytest.fixture(scope="module")
def wheels() -> dict[str, Path]:
    found = {
        canonicalize_name(parse_wheel_filename(p.name)[0]): p for p in wheel_dir().glob("*.whl")
    }
    assert found, "the wheel cache is empty"
    return found


def fits_spark(tag_python: str, tag_abi: str, tag_platform: str) -> bool:
    python_ok = tag_python in {"py3", "py2.py3", "cp311"} or (
        tag_python.startswith("cp3") and tag_abi == "abi3" and int(tag_python[3:]) <= 11
    )
    platform_ok = tag_platform == "any" or (
        tag_platform.endswith("_aarch64")
        and tag_platform.startswith(("manylinux2014", "manylinux_2_"))
    )
    return python_ok and tag_abi in {"none", "abi3", "cp311"} and platform_ok


def test_every_pin_has_an_aarch64_wheel_at_its_version(wheels: dict[str, Path]) -> None:
    for pin in PINS:
        requirement = Requirement(pin)
        name = canonicalize_name(requirement.name)
        assert name in wheels, f"{pin}: no wheel"
        version = parse_wheel_filename(wheels[name].name)[1]
        assert requirement.specifier.contains(version), f"{pin}: got {version}"


def test_every_wheel_is_for_cp311_on_linux_aarch64(wheels: dict[str, Path]) -> None:
    for path in wheels.values():
        tags = parse_wheel_filename(path.name)[3]
        assert any(fits_spark(t.interpreter, t.abi, t.platform) for t in tags), path.name
    compiled = [p.name for p in wheels.values() if not p.name.endswith("-any.whl")]
    # The control: the native ones really are arm64 builds (tokenizers, smg, pydantic-core).
    assert {"tokenizers", "smg", "pydantic-core"} <= {
        canonicalize_name(parse_wheel_filename(n)[0]) for n in compiled
    }
    assert all("aarch64" in n for n in compiled)


def requires_on_spark(path: Path) -> list[Requirement]:
    with zipfile.ZipFile(path) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = HeaderParser().parsestr(archive.read(name).decode())
    requirements = [Requirement(r) for r in metadata.get_all("Requires-Dist") or []]
    return [r for r in requirements if r.marker is None or r.marker.evaluate(SPARK)]


def test_the_set_is_closed_under_requirements(wheels: dict[str, Path]) -> None:
    """Each wheel's dependencies on linux/aarch64/3.11 are in the set, at a fitting version."""
    for path in wheels.values():
        for requirement in requires_on_spark(path):
            name = canonicalize_name(requirement.name)
            assert name in wheels, f"{path.name} needs {requirement}: no aarch64 wheel"
            version = parse_wheel_filename(wheels[name].name)[1]
            assert requirement.specifier.contains(version, prereleases=True), (
                f"{path.name} needs {requirement}, the set has {version}"
            )
