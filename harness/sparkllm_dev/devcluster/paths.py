"""Where the local control plane's binaries, state and kubeconfig live.

Everything the dev cluster needs is cached under one directory (default
``~/.cache/sparkllm``, overridable with ``SPARKLLM_CACHE``) so that a warm machine
starts in seconds and nothing touches ``~/.kube/config`` unless asked. The versions
are pinned here and in ``hack/build-binaries.sh``; a test checks the two agree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sparkllm_dev.errors import DevClusterError

K8S_VERSION = "v1.35.4"
CLUSTER_NAME = "sparkllm"

BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
    "kwokctl",
    "helm",
    "kubeconform",
    "glua",
)


def cache_root() -> Path:
    """The cache directory: ``$SPARKLLM_CACHE`` or ``~/.cache/sparkllm``."""
    override = os.environ.get("SPARKLLM_CACHE")
    return Path(override) if override else Path.home() / ".cache" / "sparkllm"


@dataclass(frozen=True)
class DevPaths:
    """The files of one dev cluster, all under the cache root."""

    root: Path

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin" / K8S_VERSION

    @property
    def state_dir(self) -> Path:
        """Our own state: kubeconfig, generated kwokctl config, simulator logs."""
        return self.root / "devcluster"

    @property
    def kwok_workdir(self) -> Path:
        """kwokctl's working directory (certificates, etcd data, component logs)."""
        return self.root / "kwok"

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def kwokctl_config(self) -> Path:
        return self.state_dir / "kwokctl.yaml"

    @property
    def audit_policy(self) -> Path:
        return self.state_dir / "audit-policy.yaml"

    def binary(self, name: str) -> Path:
        return self.bin_dir / name

    def missing_binaries(self) -> list[str]:
        """Names of required binaries that are not built yet."""
        return [b for b in BINARIES if not os.access(self.binary(b), os.X_OK)]

    def require_binaries(self) -> None:
        """Raise a DevClusterError naming what is missing and how to build it."""
        missing = self.missing_binaries()
        if missing:
            raise DevClusterError(
                f"missing binaries in {self.bin_dir}: {', '.join(missing)}; "
                "build them with `bash hack/build-binaries.sh` (cached; cold build takes "
                "tens of minutes on 2 cores)"
            )


def default_paths() -> DevPaths:
    return DevPaths(root=cache_root())
