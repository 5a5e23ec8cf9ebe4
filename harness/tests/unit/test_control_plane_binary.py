"""The control plane's seven programs are one binary (hack/control-plane/main.go), hard-linked
under each name: each name must run its own program at the pinned version, a name kwokctl
gives a copy (``kwok-controller``) must run kwok, and any other name must be refused with
the list of names, not run some program by accident."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sparkllm_dev.devcluster.paths import CONTROL_PLANE_BINARIES, K8S_VERSION, default_paths

pytestmark = pytest.mark.needs_binary  # the control plane's build (make binaries or make demo)

# What each program prints of its own version (its own words, at the versions the build pins).
VERSION_ARGS = {
    "etcd": (["--version"], "etcd Version: 3.6.16"),
    "kube-apiserver": (["--version"], f"Kubernetes {K8S_VERSION}"),
    "kube-controller-manager": (["--version"], f"Kubernetes {K8S_VERSION}"),
    "kube-scheduler": (["--version"], f"Kubernetes {K8S_VERSION}"),
    "kubectl": (["version", "--client"], f"Client Version: {K8S_VERSION}"),
    "kwok": (["--version"], "kwok version v0.8.0"),
    "kwokctl": (["--version"], "kwokctl version v0.8.0"),
}


def run(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(path), *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_every_name_runs_its_own_program() -> None:
    paths = default_paths()
    assert sorted(VERSION_ARGS) == sorted(CONTROL_PLANE_BINARIES)
    inodes = set()
    for name, (args, expected) in VERSION_ARGS.items():
        binary = paths.binary(name)
        inodes.add(binary.stat().st_ino)
        result = run(binary, *args)
        assert result.returncode == 0, (name, result.stderr)
        assert expected in result.stdout + result.stderr, (name, result.stdout, result.stderr)
    assert len(inodes) == 1  # one binary, hard-linked: built and linked once


def test_kwokctls_name_for_the_controller_runs_kwok(tmp_path: Path) -> None:
    link = tmp_path / "kwok-controller"
    link.symlink_to(default_paths().binary("kwok"))
    result = run(link, "--version")
    assert result.returncode == 0, result.stderr
    assert "kwok version v0.8.0" in result.stdout + result.stderr


def test_an_unknown_name_is_refused_with_the_names(tmp_path: Path) -> None:
    copy = tmp_path / "kube-proxy"
    copy.write_bytes(default_paths().binary("kubectl").read_bytes())
    os.chmod(copy, 0o755)
    result = run(copy, "--version")
    assert result.returncode == 2
    assert "kube-proxy: run this binary as one of etcd, kube-apiserver" in result.stderr
