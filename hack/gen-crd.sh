#!/usr/bin/env bash
# Regenerate the InferenceCluster CRD from the pydantic models (the single source of truth).
set -euo pipefail; cd "$(dirname "$0")/.." && .venv/bin/python -m sparkllm.api.crd > crds/sparkllm.io_inferenceclusters.yaml
