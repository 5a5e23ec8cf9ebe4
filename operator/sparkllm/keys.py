"""Every ``sparkllm.io/`` label and annotation key the product reads or writes. No logic.

Why one module, on the bottom floor: a key is a contract with the cluster — the operator
prunes by the labels, the router discovers by them, users write the annotations, the
chart's policy and the dashboards match them — so each has one spelling, here, and every
module (api, render, reconcile, bench, gateway) imports it from here rather than typing
the string. ``tests/unit/test_keys.py`` fails on a ``sparkllm.io/`` key literal anywhere
else in the product. Where one key plays two roles (the node-group label on nodes and on
the rank objects placed on them) the second name is an alias, never a second literal.
"""

from typing import Final

# On every object the operator creates (DESIGN.md, "What the operator creates").
LABEL_CLUSTER: Final = "sparkllm.io/cluster"
LABEL_REPLICA: Final = "sparkllm.io/replica"
LABEL_RANK: Final = "sparkllm.io/rank"

# On rank pods and their StatefulSets.
LABEL_GENERATION: Final = "sparkllm.io/restart-generation"  # the replica's restart count
LABEL_NODE_GROUP: Final = "sparkllm.io/node-group"  # the node group the replica runs on
# "true" while the router may send the pod requests; scaling down and planned restarts
# flip the live rank-0 pod to "false" (the router's selector requires "true") first.
LABEL_SERVING: Final = "sparkllm.io/serving"
ANNOTATION_DRAIN_STARTED: Final = "sparkllm.io/drain-started"
ANNOTATION_DRAIN_REASON: Final = "sparkllm.io/drain-reason"  # a planned restart's cause
# Digest of the rank pod template without the restart generation, so a pod made from an
# older spec is recognised (updateStrategy is OnDelete).
ANNOTATION_TEMPLATE_HASH: Final = "sparkllm.io/template-hash"
# Beside it (render/rank_stamp.py): a digest per template section (engine container, pod
# spec, init containers, probes, labels, pull secrets), of the user's rank-shaping spec, and
# the operator version that rendered the template, so an upgrade is told from a spec change.
ANNOTATION_TEMPLATE_PARTS: Final = "sparkllm.io/template-parts"
ANNOTATION_SPEC_HASH: Final = "sparkllm.io/spec-hash"
ANNOTATION_OPERATOR_VERSION: Final = "sparkllm.io/operator-version"
# On the CRDs the chart installs: the sparkllm version whose schema they carry (make crds).
ANNOTATION_CRD_VERSION: Final = "sparkllm.io/crd-version"
# On every rendered object: the hash of its desired state (a pass applies only changes).
ANNOTATION_HASH: Final = "sparkllm.io/desired-hash"

# Node labels read by label-based placement: the group a node belongs to (the key is
# configurable per InferenceCluster; this is its default) and the node's rank inside its
# group (fixed: one spelling across the fleet keeps node labelling scriptable).
DEFAULT_NODE_GROUP_LABEL: Final = LABEL_NODE_GROUP
NODE_RANK_LABEL: Final = LABEL_RANK

# Requests a user writes on the InferenceCluster (the operator answers and removes them).
ANNOTATION_RESTART: Final = "sparkllm.io/restart"  # "now": a planned gang restart
ANNOTATION_LIFT_QUARANTINE: Final = "sparkllm.io/lift-quarantine"  # node[,node]: lift
ANNOTATION_BENCHMARK: Final = "sparkllm.io/benchmark"  # <user>: run the benchmark
ANNOTATION_BENCHMARK_SCENARIOS: Final = "sparkllm.io/benchmark-scenarios"
ANNOTATION_ACCEPTANCE: Final = "sparkllm.io/acceptance"  # <user>: run the checklist
ANNOTATION_ACCEPTANCE_OPTIONS: Final = "sparkllm.io/acceptance-options"
ANNOTATION_ACCEPTANCE_SET_BASELINE: Final = "sparkllm.io/acceptance-set-baseline"
# Written by the operator from a passed acceptance run that asked for it.
BASELINE_ANNOTATION: Final = "sparkllm.io/accepted-baseline"

# On benchmark and acceptance Jobs: who asked and for which spec, so a finished Job can be
# reported on its own.
ANNOTATION_BENCHMARK_USER: Final = "sparkllm.io/benchmark-user"
ANNOTATION_SPEC_GENERATION: Final = "sparkllm.io/spec-generation"

# On a user's Secret: the one use a spec may name it for (``api.secret_refs``: the engine
# key, the governance store's password), so a reference stays in its lane.
SECRET_USE_LABEL: Final = "sparkllm.io/secret-use"

# On model staging Jobs and their pods (render/model_staging.py, spec.model.source): the
# replica whose node group they stage, the role (stage: copy the model onto the node;
# serve: hand the finished copy to the next nodes), the digest of the source staged (a
# new source is new Jobs), and the node (an annotation: a node name may be 253 long).
LABEL_STAGING_REPLICA: Final = "sparkllm.io/staging-replica"
LABEL_STAGING_ROLE: Final = "sparkllm.io/staging-role"
LABEL_STAGING_DIGEST: Final = "sparkllm.io/staging-digest"
ANNOTATION_STAGING_NODE: Final = "sparkllm.io/staging-node"
# On rank StatefulSets, their pod templates and the gateway's Deployment (spec.model.source
# only): the digest of the staged copy the pods mount (render/model_layout.py), so a new
# revision rolls replica by replica and the copy in use is never cleaned.
ANNOTATION_MODEL_DIGEST: Final = "sparkllm.io/model-digest"
