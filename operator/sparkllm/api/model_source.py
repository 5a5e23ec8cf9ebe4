"""``spec.model``: which weights are served, where every rank finds them, how to verify them.

The weights are too large to copy per pod (168 GB in the documents' deployment), so the
API points at a directory that already exists on every node, or at a claim mounted at
that path, or names a ``source`` the operator stages it from (``api/model_staging.py``).
What a replica serves is only trustworthy when every rank loaded the same
complete files, so the spec also carries what the integrity check needs: the number of
layers (it must match the layer partition), the shard count, and an optional checksum
manifest that every rank's copy must agree with.
"""

from typing import Annotated

from pydantic import Field, StringConstraints

from sparkllm.api.common import ConfigMapKeyReference, DnsSubdomain
from sparkllm.api.model_staging import ModelSourceSpec
from sparkllm.api.rules import ApiModel, Rule

ABSOLUTE_PATH_PATTERN = r"^/[^\s]*$"
# SGLang rejects ':' in --served-model-name; the rest keeps it a safe label and URL part.
SERVED_NAME_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9._/-]*[A-Za-z0-9])?$"


class ChecksumsSpec(ApiModel):
    """Where the expected sha256 of every model file is published."""

    config_map_ref: ConfigMapKeyReference = Field(
        description="configMapRef is the ConfigMap key holding a sha256sum-format manifest "
        "(one '<sha256>  <relative path>' line per file). Required when checksums is set; "
        "every rank's files must match it before SGLang starts."
    )


class PersistentVolumeClaimSource(ApiModel):
    """A PersistentVolumeClaim holding the model directory."""

    claim_name: DnsSubdomain = Field(
        description="claimName is the PersistentVolumeClaim, in the InferenceCluster's "
        "namespace, mounted read-only at model.path on every rank. Required; it must be "
        "readable from every node (ReadOnlyMany or ReadWriteMany)."
    )


class ModelSpec(ApiModel):
    """The model every replica serves and the facts used to verify it."""

    cel_rules = (
        Rule(
            cel="!(has(self.source) && has(self.persistentVolumeClaim))",
            message="model.source stages the model into a hostPath on every node: it cannot "
            "be combined with model.persistentVolumeClaim",
            check=lambda m: m.source is None or m.persistent_volume_claim is None,
            field_path=".source",
        ),
    )

    path: Annotated[
        str, StringConstraints(min_length=2, max_length=1024, pattern=ABSOLUTE_PATH_PATTERN)
    ] = Field(
        description="path is the model directory as every rank sees it: a hostPath present "
        "on each node, or where persistentVolumeClaim is mounted. Required; absolute, no "
        "whitespace, at most 1024 characters. Example: /models/DeepSeek-V4-Flash-NVFP4."
    )
    served_name: Annotated[
        str, StringConstraints(min_length=1, max_length=128, pattern=SERVED_NAME_PATTERN)
    ] = Field(
        description="servedName is the model name clients send in the OpenAI 'model' field "
        "(--served-model-name). Required; 1 to 128 characters of [A-Za-z0-9._/-], starting "
        "and ending alphanumeric; no ':' (SGLang rejects it)."
    )
    num_layers: int = Field(
        default=43,
        ge=1,
        le=1024,
        description="numLayers is the model's number of transformer layers; "
        "engine.layerPartition must sum to it. Default 43 (DeepSeek V4 Flash); 1 to 1024.",
    )
    expected_shards: int = Field(
        default=46,
        ge=1,
        le=100_000,
        description="expectedShards is the number of safetensors shards the integrity "
        "check requires, besides the weight index and the tokenizer files. Default 46 "
        "(DeepSeek V4 Flash NVFP4); 1 to 100000.",
    )
    checksums: ChecksumsSpec | None = Field(
        default=None,
        description="checksums names a sha256 manifest of the model files. Optional; when "
        "absent the ranks' copies are only compared with each other.",
    )
    weights_gb: float | None = Field(
        default=None,
        gt=0,
        le=100_000,
        alias="weightsGB",
        description="weightsGB is the total size of the weights in GB (10^9 bytes), as the "
        "safetensors index reports it (metadata.total_size), used by the capacity plan "
        "(condition CapacityPlanned) before anything starts. Optional; when absent the plan "
        "is Unknown. Example: 168.27 for DeepSeek V4 Flash NVFP4.",
    )
    persistent_volume_claim: PersistentVolumeClaimSource | None = Field(
        default=None,
        description="persistentVolumeClaim mounts the model from a claim instead of a "
        "hostPath. Optional; when absent path is a hostPath on every node.",
    )
    source: ModelSourceSpec | None = Field(
        default=None,
        description="source is where the operator downloads the model from into path on "
        "every node of a group (one download, then node-to-node copies, each verified). "
        "Optional; when absent the model must already be at path on every node.",
    )
