"""Where the local control plane's binaries, state and kubeconfig live, per dev cluster.

Everything the dev cluster needs is cached under one directory (default
``~/.cache/sparkllm``, overridable with ``SPARKLLM_CACHE``) so that a warm machine
starts in seconds and nothing touches ``~/.kube/config`` unless asked. The versions
are pinned here and in ``hack/build-binaries.sh``; a test checks the two agree.

Dev clusters can run side by side, so that `make test` passes while `make demo` runs:
a profile (``SPARKLLM_DEVCLUSTER=demo|test|test2..test5``, default ``demo``) names
everything two must not share — the kwokctl cluster name, the state and kwok directories
(kubeconfig, certificates, etcd data, logs, engine locks, the simulated nodes' files),
the simulated nodes' loopback addresses (where the engines listen, so their fixed
ports cannot collide), the control plane's ports (etcd, kube-apiserver, the controller
manager, the scheduler, kwok: left alone, kwokctl counts down from 32766 on every
cluster it creates, so two clusters would take the same ones) and the demo operator's
metrics port. The binaries are shared.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sparkllm_dev.errors import DevClusterError

# The Kubernetes version the binaries are built at (hack/build-binaries.sh reads the same
# K8S_VERSION from the environment, so a trial of another version builds and runs it alike).
K8S_VERSION = os.environ.get("K8S_VERSION") or "v1.36.1"
CLUSTER_NAME = "sparkllm"

# What a dev cluster runs (and `make demo` builds alone: hack/build-binaries.sh
# --control-plane), and the tools only the tests use (chart install, schema checks, the
# Argo CD health check's Lua).
CONTROL_PLANE_BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
    "kwokctl",
)
TOOL_BINARIES = ("helm", "kubeconform", "glua")
BINARIES = CONTROL_PLANE_BINARIES + TOOL_BINARIES


PROFILE_ENV = "SPARKLLM_DEVCLUSTER"


@dataclass(frozen=True)
class ClusterProfile:
    """What one dev cluster owns alone; see the module docstring."""

    name: str
    cluster_name: str  # kwokctl's --name
    state_dir_name: str  # under the cache root
    kwok_dir_name: str  # under the cache root
    node_address_base: int  # group g, rank k: 127.0.0.{base + 10 * (g + 1) + k + 1}
    port_base: int  # the control plane's six ports: port_base .. port_base + 5
    operator_metrics_port: int  # the demo's operator process

    def ports(self) -> dict[str, int]:
        """kwokctl's port options (what it would pick on an idle machine for the demo)."""
        names = (
            "kubeSchedulerPort",
            "kubeControllerManagerPort",
            "kwokControllerPort",
            "kubeApiserverPort",
            "etcdPort",
            "etcdPeerPort",
        )
        return {name: self.port_base + offset for offset, name in enumerate(names)}


DEMO = ClusterProfile(
    name="demo",
    cluster_name=CLUSTER_NAME,
    state_dir_name="devcluster",
    kwok_dir_name="kwok",
    node_address_base=0,
    port_base=32761,
    operator_metrics_port=18080,
)
TEST = ClusterProfile(
    name="test",
    cluster_name=f"{CLUSTER_NAME}-test",
    state_dir_name="devcluster-test",
    kwok_dir_name="kwok-test",
    node_address_base=100,
    port_base=32751,
    operator_metrics_port=18180,
)
# Two more test clusters, so that separate checkouts (or people) can run the cluster
# tests at the same time on one machine: SPARKLLM_DEVCLUSTER=test2 ... test5.
TEST2 = ClusterProfile(
    name="test2",
    cluster_name=f"{CLUSTER_NAME}-test2",
    state_dir_name="devcluster-test2",
    kwok_dir_name="kwok-test2",
    node_address_base=140,
    port_base=32741,
    operator_metrics_port=18280,
)
TEST3 = ClusterProfile(
    name="test3",
    cluster_name=f"{CLUSTER_NAME}-test3",
    state_dir_name="devcluster-test3",
    kwok_dir_name="kwok-test3",
    node_address_base=180,
    port_base=32731,
    operator_metrics_port=18380,
)
TEST4 = ClusterProfile(
    name="test4",
    cluster_name=f"{CLUSTER_NAME}-test4",
    state_dir_name="devcluster-test4",
    kwok_dir_name="kwok-test4",
    node_address_base=220,
    port_base=32721,
    operator_metrics_port=18480,
)
TEST5 = ClusterProfile(
    name="test5",
    cluster_name=f"{CLUSTER_NAME}-test5",
    state_dir_name="devcluster-test5",
    kwok_dir_name="kwok-test5",
    node_address_base=60,
    port_base=32711,
    operator_metrics_port=18580,
)
PROFILES = {profile.name: profile for profile in (DEMO, TEST, TEST2, TEST3, TEST4, TEST5)}
TEST_PROFILES = frozenset({TEST.name, TEST2.name, TEST3.name, TEST4.name, TEST5.name})


def active_profile() -> ClusterProfile:
    """The profile ``$SPARKLLM_DEVCLUSTER`` names (default ``demo``)."""
    name = os.environ.get(PROFILE_ENV) or DEMO.name
    try:
        return PROFILES[name]
    except KeyError:
        raise DevClusterError(
            f"{PROFILE_ENV}={name!r} is not a dev cluster; choose one of {', '.join(PROFILES)}"
        ) from None


def cache_root() -> Path:
    """The cache directory: ``$SPARKLLM_CACHE`` or ``~/.cache/sparkllm``."""
    override = os.environ.get("SPARKLLM_CACHE")
    return Path(override) if override else Path.home() / ".cache" / "sparkllm"


@dataclass(frozen=True)
class DevPaths:
    """The files of one dev cluster (its profile's), all under the cache root."""

    root: Path
    profile: ClusterProfile = DEMO

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin" / K8S_VERSION

    @property
    def state_dir(self) -> Path:
        """Our own state: kubeconfig, generated kwokctl config, simulator logs."""
        return self.root / self.profile.state_dir_name

    @property
    def kwok_workdir(self) -> Path:
        """kwokctl's working directory (certificates, etcd data, component logs)."""
        return self.root / self.profile.kwok_dir_name

    @property
    def cluster_dir(self) -> Path:
        """kwokctl's directory of this cluster (its config, pids, logs, copied binaries)."""
        return self.kwok_workdir / "clusters" / self.profile.cluster_name

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def kwokctl_config(self) -> Path:
        return self.state_dir / "kwokctl.yaml"

    @property
    def audit_policy(self) -> Path:
        return self.state_dir / "audit-policy.yaml"

    @property
    def pod_logs_dir(self) -> Path:
        """The pods' container logs as kwok serves them (``pod_logs.py``)."""
        return self.state_dir / "pod-logs"

    def binary(self, name: str) -> Path:
        return self.bin_dir / name

    def missing_binaries(self, names: tuple[str, ...] = BINARIES) -> list[str]:
        """Those of ``names`` (default: every binary the tests use) not built yet."""
        return [b for b in names if not os.access(self.binary(b), os.X_OK)]

    def require_binaries(self, names: tuple[str, ...] = CONTROL_PLANE_BINARIES) -> None:
        """Raise a DevClusterError naming what is missing and how to build it."""
        missing = self.missing_binaries(names)
        if missing:
            raise DevClusterError(
                f"missing binaries in {self.bin_dir}: {', '.join(missing)}; "
                "build them with `bash hack/build-binaries.sh` (cached; a cold build takes "
                "about seven minutes on 2 cores)"
            )


def default_paths() -> DevPaths:
    """The paths of the active profile's cluster (``$SPARKLLM_DEVCLUSTER``)."""
    return DevPaths(root=cache_root(), profile=active_profile())
