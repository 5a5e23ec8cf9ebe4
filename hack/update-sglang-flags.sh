#!/usr/bin/env bash
# Regenerate the product's SGLang flag table (sglang_flags.json, next to the module that
# loads it: sparkllm.sglang_contract.flags) from the pinned sglang wheel.
#
# Why from the wheel and not `import sglang`: importing sglang pulls in torch. The wheel is
# downloaded once without dependencies into the cache and read with `ast` by
# sparkllm_dev.flags.extract. Run this after changing SGLANG_VERSION, then commit the
# json; harness/tests/unit/test_flag_contract.py (which reads the sglang the dev virtualenv
# installs) fails while the two disagree.
set -euo pipefail

SGLANG_VERSION="${SGLANG_VERSION:-0.5.23}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
CACHE="${SPARKLLM_CACHE:-$HOME/.cache/sparkllm}/wheels"

export PYTHONPATH="$ROOT/operator:$ROOT/harness"
WHEEL="$("$PYTHON" - "$SGLANG_VERSION" "$CACHE" <<'PY'
import sys
from pathlib import Path
from sparkllm_dev.flags.extract import ensure_wheel
print(ensure_wheel(sys.argv[1], cache_dir=Path(sys.argv[2])))
PY
)"
echo "using $WHEEL"
"$PYTHON" -m sparkllm_dev.flags.extract "$WHEEL"  # --output: next to the module, in operator/
# Then the guarded settings (sparkllm.sglang_contract.guarded), which read the new table.
"$PYTHON" -m sparkllm_dev.flags.guarded "$WHEEL"
