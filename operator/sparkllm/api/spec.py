"""The InferenceCluster object: its spec, the rules that span sections, and the envelope.

Each section of the spec validates itself in its own module; what is left for this one
are the rules that relate sections to each other (the layer partition against the
model's layers, the input cap against the window, node groups against the replica's
size, tensorParallel x pipelineParallel, and the replica count) and the object around
the spec (apiVersion, kind, the part of metadata the operator reads, status).

Why ``replicas`` may be 0: scaling to zero keeps the object, its Secrets and its history
while freeing every node; the gateway then answers 503.
"""

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StringConstraints

from sparkllm.api.admission import AdmissionSpec, relation_rules
from sparkllm.api.common import DNS_LABEL_PATTERN, DnsSubdomain
from sparkllm.api.engine import EngineSpec
from sparkllm.api.exposure import ExposureSpec
from sparkllm.api.governance_store import GatewaySpec
from sparkllm.api.memory import MemoryPreflightSpec
from sparkllm.api.meta import MAX_NAME_LENGTH
from sparkllm.api.model_source import ModelSpec
from sparkllm.api.operations import MonitoringSpec, NetworkSpec, RestartPolicySpec
from sparkllm.api.placement import DEFAULT_PLACEMENT, MAX_REPLICAS, PlacementSpec
from sparkllm.api.rules import ApiModel, Rule
from sparkllm.api.status import InferenceClusterStatus


def _partition_has_one_entry_per_stage(spec: "InferenceClusterSpec") -> bool:
    partition = spec.engine.layer_partition
    return partition is None or len(partition) == spec.engine.pipeline_parallel


def _partition_covers_all_layers(spec: "InferenceClusterSpec") -> bool:
    partition = spec.engine.layer_partition
    return partition is None or sum(partition) == spec.model.num_layers


def _groups_match_replica_size(spec: "InferenceClusterSpec") -> bool:
    groups = spec.placement.node_groups or ()
    return all(len(group) == spec.engine.nodes_per_replica for group in groups)


def _replicas_fit_groups(spec: "InferenceClusterSpec") -> bool:
    groups = spec.placement.node_groups
    return groups is None or spec.replicas <= len(groups)


SPEC_RULES = (
    Rule(
        cel="!has(self.engine.layerPartition) || "
        "size(self.engine.layerPartition) == self.engine.pipelineParallel",
        message="layerPartition must have exactly pipelineParallel entries, one per pipeline stage",
        check=_partition_has_one_entry_per_stage,
        field_path=".engine.layerPartition",
    ),
    Rule(
        cel="!has(self.engine.layerPartition) || "
        "self.engine.layerPartition.sum() == self.model.numLayers",
        message="layerPartition must sum to model.numLayers",
        check=_partition_covers_all_layers,
        field_path=".engine.layerPartition",
    ),
    Rule(
        cel="self.engine.pipelineParallel <= self.model.numLayers",
        message="pipelineParallel must not exceed model.numLayers: every stage needs a layer",
        check=lambda spec: spec.engine.pipeline_parallel <= spec.model.num_layers,
        field_path=".engine.pipelineParallel",
    ),
    *relation_rules(),  # maxInputTokens < engine.contextLength (gateway_settings.RELATIONS)
    Rule(
        cel="!has(self.placement.nodeGroups) || "
        "self.placement.nodeGroups.all(g, "
        "size(g) == self.engine.tensorParallel * self.engine.pipelineParallel)",
        message="every node group must have exactly engine.tensorParallel x "
        "engine.pipelineParallel nodes, one per rank",
        check=_groups_match_replica_size,
        field_path=".placement.nodeGroups",
    ),
    Rule(
        cel="!has(self.placement.nodeGroups) || self.replicas <= size(self.placement.nodeGroups)",
        message="replicas must not exceed the number of placement.nodeGroups: each "
        "replica needs its own group",
        check=_replicas_fit_groups,
        field_path=".replicas",
    ),
)


class InferenceClusterSpec(ApiModel):
    """The desired state: one served model, as ``replicas`` independent pipelines."""

    cel_rules = SPEC_RULES

    replicas: int = Field(
        default=1,
        ge=0,
        le=MAX_REPLICAS,
        description="replicas is the number of independent replicas, each on its own "
        "group of engine.tensorParallel x engine.pipelineParallel nodes; the scale "
        "subresource sets it. Default "
        f"1; 0 to {MAX_REPLICAS}; with explicit placement.nodeGroups at most their number.",
    )
    model: ModelSpec = Field(
        description="model is what every replica serves and how its files are verified. Required."
    )
    engine: EngineSpec = Field(
        description="engine is how each rank's SGLang server is launched. Required (at "
        "least engine.image)."
    )
    admission: AdmissionSpec = Field(
        description="admission is what the gateway enforces before a request reaches an "
        "engine. Required (at least admission.apiKeysSecretRef)."
    )
    gateway: GatewaySpec = Field(
        default=GatewaySpec(),
        description="gateway is the front door's replicas and where their governance state "
        "lives. Default: one replica, state in its process.",
    )
    exposure: ExposureSpec = Field(
        default=ExposureSpec(),
        description="exposure is how clients reach the front door over HTTPS (an HTTPRoute, "
        "an Ingress, or TLS in the gateway) and whether an InferencePool is published. "
        "Default: the front-door ClusterIP Service only.",
    )
    placement: PlacementSpec = Field(
        default=DEFAULT_PLACEMENT,
        description="placement is which nodes form each replica. Default: groups "
        "discovered from the node label sparkllm.io/node-group.",
    )
    network: NetworkSpec = Field(
        default=NetworkSpec(),
        description="network is the RoCE host networking between ranks. Default: the DGX "
        "Spark three-node ring of the documents.",
    )
    memory_preflight: MemoryPreflightSpec = Field(
        default=MemoryPreflightSpec(),
        description="memoryPreflight is the memory check right before each rank's engine "
        "starts (condition MemoryVerified): MemAvailable against the rank's plan, swap, "
        "memory pressure. Default mode off.",
    )
    restart_policy: RestartPolicySpec = Field(
        default=RestartPolicySpec(),
        description="restartPolicy is how a replica is restarted as a whole when a rank "
        "drops. Default: 30 min startup grace, backoff 10/30/60/300 s, 6 restarts per hour.",
    )
    monitoring: MonitoringSpec = Field(
        default=MonitoringSpec(),
        description="monitoring is what the operator publishes for Prometheus. Default: "
        "PodMonitors for the ranks and the front door, when the cluster serves them.",
    )


ClusterName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_NAME_LENGTH, pattern=DNS_LABEL_PATTERN),
]


class ObjectMeta(ApiModel):
    """The part of Kubernetes object metadata the operator reads.

    Unlike the spec, unknown fields are ignored here: objects read back from the API
    server carry resourceVersion, managedFields, finalizers and more.
    """

    model_config = ConfigDict(extra="ignore")

    name: ClusterName = Field(
        description=f"name of the InferenceCluster. Required; an RFC 1035 label of at most "
        f"{MAX_NAME_LENGTH} characters, because every object the operator creates derives "
        "its name from it (e.g. the StatefulSet <name>-r<replica>-rank<rank>)."
    )
    namespace: DnsSubdomain | None = Field(
        default=None, description="namespace of the InferenceCluster. Optional in manifests."
    )
    uid: str | None = Field(default=None, description="uid assigned by the API server.")
    generation: int | None = Field(
        default=None, description="generation of the spec, assigned by the API server."
    )
    labels: dict[str, str] = Field(
        default_factory=dict, exclude_if=lambda v: not v, description="labels of the object."
    )
    annotations: dict[str, str] = Field(
        default_factory=dict,
        exclude_if=lambda v: not v,
        description="annotations of the object.",
    )


class InferenceCluster(ApiModel):
    """One served model on DGX Spark nodes: spec (desired) and status (observed)."""

    api_version: Literal["sparkllm.io/v1alpha1"] = Field(
        default="sparkllm.io/v1alpha1", description="apiVersion is sparkllm.io/v1alpha1."
    )
    kind: Literal["InferenceCluster"] = Field(
        default="InferenceCluster", description="kind is InferenceCluster."
    )
    metadata: ObjectMeta = Field(description="metadata is the standard object metadata.")
    spec: InferenceClusterSpec = Field(description="spec is the desired state. Required.")
    status: InferenceClusterStatus | None = Field(
        default=None, description="status is the observed state, written by the operator."
    )

    def to_manifest(self) -> dict[str, Any]:
        """The object as a manifest: camelCase keys, absent optionals and status omitted."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"status"})
