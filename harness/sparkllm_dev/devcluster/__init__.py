"""The local development control plane: a REAL Kubernetes control plane as processes.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler run from binaries
built by ``hack/build-binaries.sh``; kwok stands in for the kubelets of six simulated
DGX Spark nodes. Only the GPU engine is simulated (``sparkllm_dev.sim``); the API server,
scheduler and controllers that the operator talks to are the real ones.
"""

from sparkllm_dev.devcluster.cluster import ClusterStatus, DevCluster
from sparkllm_dev.devcluster.faults import ContainerFault, FaultInjector
from sparkllm_dev.devcluster.nodes import SimNode, spark_nodes
from sparkllm_dev.devcluster.paths import DevPaths, default_paths
from sparkllm_dev.devcluster.wait import wait_until
from sparkllm_dev.errors import WaitTimeoutError

__all__ = [
    "ClusterStatus",
    "ContainerFault",
    "DevCluster",
    "DevPaths",
    "FaultInjector",
    "SimNode",
    "WaitTimeoutError",
    "default_paths",
    "spark_nodes",
    "wait_until",
]
