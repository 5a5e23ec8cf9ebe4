#!/usr/bin/env bash
# Copy the generated CRDs (crds/, the single source: hack/gen-crd.sh) into the places that
# ship them: the Helm chart (charts/sparkllm/files/crds/, applied by templates/crds.yaml so
# `helm upgrade` updates them; issue 32) and the kustomize base (manifests/base/crds/),
# plus kopf's peering CRDs (kept in the chart's crds/) into the kustomize HA overlay. `--check` changes nothing and exits 1 when a copy has drifted (what
# tests/unit/test_chart_crds.py asserts too).
#
# Why copies and not links: `helm package` and kustomize's load restrictor both refuse
# files outside the chart / kustomization root.
set -euo pipefail
cd "$(dirname "$0")/.."

check=false
[[ "${1:-}" == "--check" ]] && check=true

pairs=()
for src in crds/*.yaml; do
  pairs+=("$src charts/sparkllm/files/crds/$(basename "$src")")
  pairs+=("$src manifests/base/crds/$(basename "$src")")
done
pairs+=("charts/sparkllm/crds/kopf.dev_peerings.yaml manifests/overlays/ha/kopf.dev_peerings.yaml")

drift=0
for pair in "${pairs[@]}"; do
  read -r src dst <<<"$pair"
  if cmp -s "$src" "$dst"; then
    continue
  fi
  if $check; then
    echo "drift: $dst differs from $src (run hack/sync-chart-crds.sh)" >&2
    drift=1
  else
    mkdir -p "$(dirname "$dst")"
    cp "$src" "$dst"
    echo "synced $dst"
  fi
done
# A CRD removed from crds/ must not linger in the copies.
for dir in charts/sparkllm/files/crds charts/sparkllm/crds manifests/base/crds; do
  for dst in "$dir"/*.yaml; do
    name=$(basename "$dst")
    [[ -f "crds/$name" || "$dst" == charts/sparkllm/crds/kopf.dev_peerings.yaml ]] && continue
    if $check; then
      echo "drift: $dst has no source in crds/" >&2
      drift=1
    else
      rm "$dst"
      echo "removed $dst"
    fi
  done
done
exit $drift
