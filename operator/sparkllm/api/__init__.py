"""The InferenceCluster API: pydantic models of spec and status, and the CRD made from them.

Pure code: no I/O, no clock. The models are the single source of truth (DESIGN.md); the
CRD in ``crds/`` is generated from them by :mod:`sparkllm.api.crd`. Modules:

- ``meta``: group/version/kind, CRD names, label keys.
- ``rules``: the ``Rule`` type (CEL for the API server + the same check in Python) and
  ``ApiModel``, the base of every model.
- ``common``, ``model_source``, ``engine``, ``admission``, ``placement``, ``operations``:
  the sections of the spec (``engine`` reads SGLang's flags and parser names from
  :mod:`sparkllm.sglang_contract`, re-exported here: ``OPERATOR_OWNED_FLAGS``,
  ``ENGINE_HTTP_PORT``); ``spec``: the spec, its cross-section rules, the object.
- ``status``, ``conditions``, ``reasons``: status models, the condition registry, phases, the
  reason vocabulary.
- ``schema``, ``crd``: pydantic JSON Schema -> structural OpenAPI -> the CRD. Import
  ``build_crd``/``render_crd_yaml`` from ``sparkllm.api.crd``: re-exporting them here
  would import the module before ``python -m sparkllm.api.crd`` runs it (runpy warns).
- ``validate``: mapping -> ``InferenceCluster`` or ``SpecError``; update rules.
"""

from sparkllm.api.admission import AdmissionSpec
from sparkllm.api.common import (
    ConfigMapKeyReference,
    EnvVar,
    LocalObjectReference,
    SecretKeyReference,
)
from sparkllm.api.conditions import ConditionType
from sparkllm.api.engine import OPERATOR_OWNED_ENV, EngineSpec
from sparkllm.api.meta import (
    API_VERSION,
    BENCHMARK_SCENARIOS,
    CRD_NAME,
    GROUP,
    KIND,
    PLURAL,
    VERSION,
)
from sparkllm.api.model_source import ChecksumsSpec, ModelSpec, PersistentVolumeClaimSource
from sparkllm.api.operations import MonitoringSpec, NetworkSpec, RestartPolicySpec
from sparkllm.api.placement import PlacementSpec
from sparkllm.api.reasons import Reason
from sparkllm.api.spec import InferenceCluster, InferenceClusterSpec, ObjectMeta
from sparkllm.api.status import (
    Condition,
    InferenceClusterStatus,
    LastRestart,
    Phase,
    ReplicaStatus,
)
from sparkllm.api.validate import validate_inference_cluster, validate_inference_cluster_update
from sparkllm.keys import (
    DEFAULT_NODE_GROUP_LABEL,
    LABEL_CLUSTER,
    LABEL_RANK,
    LABEL_REPLICA,
    NODE_RANK_LABEL,
)
from sparkllm.sglang_contract.fields import ENGINE_HTTP_PORT, OPERATOR_OWNED_FLAGS

__all__ = [
    "API_VERSION",
    "BENCHMARK_SCENARIOS",
    "CRD_NAME",
    "DEFAULT_NODE_GROUP_LABEL",
    "ENGINE_HTTP_PORT",
    "GROUP",
    "KIND",
    "LABEL_CLUSTER",
    "LABEL_RANK",
    "LABEL_REPLICA",
    "NODE_RANK_LABEL",
    "OPERATOR_OWNED_ENV",
    "OPERATOR_OWNED_FLAGS",
    "PLURAL",
    "VERSION",
    "AdmissionSpec",
    "ChecksumsSpec",
    "Condition",
    "ConditionType",
    "ConfigMapKeyReference",
    "EngineSpec",
    "EnvVar",
    "InferenceCluster",
    "InferenceClusterSpec",
    "InferenceClusterStatus",
    "LastRestart",
    "LocalObjectReference",
    "ModelSpec",
    "MonitoringSpec",
    "NetworkSpec",
    "ObjectMeta",
    "PersistentVolumeClaimSource",
    "Phase",
    "PlacementSpec",
    "Reason",
    "ReplicaStatus",
    "RestartPolicySpec",
    "SecretKeyReference",
    "validate_inference_cluster",
    "validate_inference_cluster_update",
]
