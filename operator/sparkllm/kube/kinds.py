"""Where each kind the operator reads or writes lives in the Kubernetes REST API. Pure.

Why apart from the client: a kind's path is data, not I/O. The decide step names the
objects it will delete by kind (``Removal``) and lists the kinds an InferenceCluster owns,
and must not import the module that holds an HTTP client to do so; the client
(``kube.client``) turns a ``Kind`` into requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

from sparkllm.errors import ClusterAPIError

JSON = dict[str, Any]  # a Kubernetes object, as the API server sends it


@dataclass(frozen=True)
class Kind:
    """Where a kind lives in the REST API."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool = True

    def collection_path(self, namespace: str | None) -> str:
        base = (
            f"/api/{self.api_version}"
            if "/" not in self.api_version
            else f"/apis/{self.api_version}"
        )
        if self.namespaced:
            if namespace is None:
                return f"{base}/{self.plural}"  # across all namespaces (list only)
            return f"{base}/namespaces/{quote(namespace)}/{self.plural}"
        return f"{base}/{self.plural}"

    def object_path(self, name: str, namespace: str | None) -> str:
        return f"{self.collection_path(namespace)}/{quote(name)}"


KINDS: dict[tuple[str, str], Kind] = {
    (k.api_version, k.kind): k
    for k in (
        Kind("v1", "Pod", "pods"),
        Kind("v1", "Service", "services"),
        Kind("v1", "Secret", "secrets"),
        Kind("v1", "ConfigMap", "configmaps"),
        Kind("v1", "ServiceAccount", "serviceaccounts"),
        Kind("v1", "Node", "nodes", namespaced=False),
        Kind("v1", "Event", "events"),
        Kind("apps/v1", "StatefulSet", "statefulsets"),
        Kind("apps/v1", "Deployment", "deployments"),
        Kind("batch/v1", "Job", "jobs"),
        Kind("rbac.authorization.k8s.io/v1", "Role", "roles"),
        Kind("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings"),
        Kind("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets"),
        Kind("monitoring.coreos.com/v1", "PodMonitor", "podmonitors"),
        Kind("monitoring.coreos.com/v1", "ServiceMonitor", "servicemonitors"),
        Kind("monitoring.coreos.com/v1", "PrometheusRule", "prometheusrules"),
        Kind("networking.k8s.io/v1", "Ingress", "ingresses"),
        Kind("gateway.networking.k8s.io/v1", "HTTPRoute", "httproutes"),
        Kind("inference.networking.k8s.io/v1", "InferencePool", "inferencepools"),
        Kind("sparkllm.io/v1alpha1", "InferenceCluster", "inferenceclusters"),
        Kind(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            namespaced=False,
        ),
    )
}

INFERENCE_CLUSTER: Final = KINDS[("sparkllm.io/v1alpha1", "InferenceCluster")]
"""The InferenceCluster itself: the operator, the acceptance run and the tests read it."""


# Groups of CRDs the operator works without (monitoring; spec.exposure's Gateway API
# route and InferencePool): listing them where they are not installed finds nothing.
OPTIONAL_API_GROUPS: Final = (
    "monitoring.coreos.com/",
    "gateway.networking.k8s.io/",
    "inference.networking.k8s.io/",
)


def kind_of(obj: Mapping[str, Any]) -> Kind:
    try:
        return KINDS[(obj["apiVersion"], obj["kind"])]
    except KeyError as exc:
        raise ClusterAPIError(
            f"unsupported kind {obj.get('apiVersion')}/{obj.get('kind')}"
        ) from exc


def lookup_kind(api_version: str, kind: str) -> Kind:
    return kind_of({"apiVersion": api_version, "kind": kind})
