#!/usr/bin/env bash
# Offline Kubernetes JSON schemas for kubeconform, from the PyPI package kubernetes-validate
# (pinned): its v1.36 "local-strict" schemas (the dev cluster's minor; the wheel has up to
# v1.37), fetched with pip and made loadable by kubeconform. Why the rewrite: those
# schemas carry `$id: https://kubernetes.io/...` and `$ref: /api/_definitions.json#...`,
# which kubernetes-validate resolves with its own registry but kubeconform would try to
# download; dropping `$id` and making the ref
# relative (`_definitions.json#...`) resolves it from the same directory, offline.
#
# Output: $SPARKLLM_CACHE/kubernetes-json-schema/v1.36.0-local-strict/ (cached).
set -euo pipefail
KV_VERSION="${KV_VERSION:-1.37.0}"
SCHEMA_VERSION="${SCHEMA_VERSION:-v1.36.0}"
CACHE="${SPARKLLM_CACHE:-$HOME/.cache/sparkllm}"
OUT="$CACHE/kubernetes-json-schema/$SCHEMA_VERSION-local-strict"
PYTHON="${PYTHON:-python3}"

if [[ -f "$OUT/.complete-$KV_VERSION" ]]; then
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PYTHON" -m pip download --quiet --no-deps --no-cache-dir --only-binary=:all: \
  "kubernetes-validate==$KV_VERSION" -d "$tmp"
rm -rf "$OUT"
mkdir -p "$OUT"
"$PYTHON" - "$tmp"/kubernetes_validate-*.whl "$OUT" "$SCHEMA_VERSION" <<'PY'
import json
import sys
import zipfile
from pathlib import Path

wheel, out, version = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
prefix = f"kubernetes_validate/kubernetes-json-schema/{version}-local-strict/"


def relative_refs(node):
    if isinstance(node, dict):
        return {
            k: (v.replace("/api/_definitions.json", "_definitions.json", 1)
                if k == "$ref" and isinstance(v, str) else relative_refs(v))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [relative_refs(v) for v in node]
    return node


count = 0
with zipfile.ZipFile(wheel) as archive:
    for name in archive.namelist():
        if not name.startswith(prefix) or not name.endswith(".json"):
            continue
        schema = json.loads(archive.read(name))
        schema.pop("$id", None)
        (out / name[len(prefix):]).write_text(json.dumps(relative_refs(schema)))
        count += 1
if count == 0:
    sys.exit(f"no {version}-local-strict schemas in {wheel}")
print(f"fetch-kube-schemas: {count} schemas in {out}")
PY
touch "$OUT/.complete-$KV_VERSION"
