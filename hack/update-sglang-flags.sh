#!/usr/bin/env bash
# Regenerate operator/sparkllm/render/sglang_flags.json from the pinned sglang wheel.
#
# Why from the wheel and not `import sglang`: importing sglang pulls in torch. The wheel is
# downloaded once without dependencies into the cache and read with `ast` by
# sparkllm.render.flag_extract. Run this after changing SGLANG_VERSION, then commit the
# json; tests/unit/test_flag_contract.py fails while the two disagree.
set -euo pipefail

SGLANG_VERSION="${SGLANG_VERSION:-0.5.23}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
CACHE="${SPARKLLM_CACHE:-$HOME/.cache/sparkllm}/wheels"

WHEEL="$(PYTHONPATH="$ROOT/operator" "$PYTHON" - "$SGLANG_VERSION" "$CACHE" <<'PY'
import sys
from pathlib import Path
from sparkllm.render.flag_extract import ensure_wheel
print(ensure_wheel(sys.argv[1], cache_dir=Path(sys.argv[2])))
PY
)"
echo "using $WHEEL"
PYTHONPATH="$ROOT/operator" "$PYTHON" -m sparkllm.render.flag_extract "$WHEEL" \
  --output "$ROOT/operator/sparkllm/render/sglang_flags.json"
