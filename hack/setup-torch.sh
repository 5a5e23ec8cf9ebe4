#!/usr/bin/env bash
# A separate, cached venv with torch, for the bandwidth preflight's three-process Gloo run
# in the tests (harness/sparkllm_dev/gloo_bandwidth.py) and the dev cluster's
# verify-bandwidth init containers. Why separate: the dev venv must stay small and the
# operator's image has no torch; on the nodes the collective runs with the engine image's.
#
# Why --no-deps from a fully pinned list (hack/torch-requirements.txt): the x86_64 PyPI
# wheel's own dependencies are ~5 GB of CUDA packages (triton, the whole CUDA toolkit);
# `import torch` loads only the libraries libtorch_cuda.so and libtorch_python.so link
# against, so exactly those wheels are installed (~4 GB, about a minute from PyPI).
# Measured, not guessed: the import fails naming any one that is left out.
#
# The venv is keyed by the requirements' hash under $SPARKLLM_CACHE (default
# ~/.cache/sparkllm)/torch-venv/<key>; a warm run is one file check. PYTHON is the
# interpreter the venv is made from (default python3; 3.11 like the dev venv).
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${SPARKLLM_CACHE:-$HOME/.cache/sparkllm}"
PYTHON="${PYTHON:-python3}"
REQUIREMENTS=hack/torch-requirements.txt
key=$(grep -v '^#' "$REQUIREMENTS" | sha256sum | cut -c1-12)
VENV="$CACHE/torch-venv/$key"

# shellcheck source=hack/lib/cached-venv.sh
source hack/lib/cached-venv.sh
cached_venv_ready "$VENV" && exit 0
started=$SECONDS
# --no-compile: pip would byte-compile all of torch's 2,566 modules; the check below imports
# what the Gloo run imports, so exactly those are compiled, once (bytecode written even
# where the environment says PYTHONDONTWRITEBYTECODE).
cached_venv_install "$PYTHON" "$VENV" "$REQUIREMENTS" --no-compile
env -u PYTHONDONTWRITEBYTECODE "$VENV/bin/python" -W ignore -c '
import torch, torch.distributed as dist
assert dist.is_gloo_available(), "this torch has no Gloo backend"
print("setup-torch: torch", torch.__version__, "with Gloo")'
cached_venv_done setup-torch "$VENV" "$started"
