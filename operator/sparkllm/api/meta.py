"""Names that identify the InferenceCluster API.

Everything here is part of the published contract (DESIGN.md): the group/version/kind a
user writes in a manifest, the CRD's names, and the benchmark scenario names a user may
write in an annotation; the label and annotation keys are :mod:`sparkllm.keys`. (The
engine's serving port is an SGLang launch fact: it lives in
:mod:`sparkllm.sglang_contract.fields` and ``sparkllm.api`` re-exports it.) They live in one
module, with no logic, so that ``render``, ``reconcile``, the gateway and the CLI import
one spelling of each name instead of re-typing string literals.
"""

from typing import Final

GROUP: Final = "sparkllm.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "InferenceCluster"
LIST_KIND: Final = "InferenceClusterList"
PLURAL: Final = "inferenceclusters"
SINGULAR: Final = "inferencecluster"
SHORT_NAMES: Final = ("icl",)
CATEGORIES: Final = ("sparkllm",)
CRD_NAME: Final = f"{PLURAL}.{GROUP}"

# The benchmark scenarios a user may name in the annotation
# ``sparkllm.io/benchmark-scenarios`` (render/benchmark.py), in matrix order. The matrix
# itself (sparkllm.bench.scenarios) has exactly one row per name, checked when it loads.
BENCHMARK_SCENARIOS: Final = ("short-c1", "short-c4", "short-c8", "cold-4k", "cold-8k", "niah")

# Longest metadata.name: derived names must stay valid. The longest is a rank
# StatefulSet ``<name>-r<replica>-rank<rank>`` (up to 11 more characters), whose pods get
# the label ``controller-revision-hash: <statefulset>-<10-char hash>``; a label value is
# at most 63 characters, so 63 - 11 - 11 = 41, rounded down to a memorable 40.
MAX_NAME_LENGTH: Final = 40
