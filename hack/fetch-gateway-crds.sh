#!/usr/bin/env bash
# The CRDs spec.exposure's objects are validated against (issue 21), at pinned versions,
# from the Go module proxy (`go mod download`: each project ships its CRDs in its module):
#
#  1. Gateway API, standard channel (HTTPRoute, Gateway, GatewayClass, ...):
#     sigs.k8s.io/gateway-api config/crd/standard.
#  2. Gateway API Inference Extension (InferencePool inference.networking.k8s.io/v1):
#     sigs.k8s.io/gateway-api-inference-extension config/crd/bases.
#  3. KEDA (ScaledObject, for the autoscaling sample): github.com/kedacore/keda/v2
#     config/crd/bases.
#
# tests/integration/test_exposure_crds.py installs them on the dev cluster and creates the
# rendered objects there. Cached under $SPARKLLM_CACHE/front-door-crds/<pins>; a warm run
# is one file check. hack/setup-test-tools.sh calls this script.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${SPARKLLM_CACHE:-$HOME/.cache/sparkllm}"
GATEWAY_API_VERSION="${GATEWAY_API_VERSION:-v1.3.0}"
INFERENCE_EXTENSION_VERSION="${INFERENCE_EXTENSION_VERSION:-v1.0.0}"
KEDA_VERSION="${KEDA_VERSION:-v2.17.0}"
DIR="$CACHE/front-door-crds/gateway-api-$GATEWAY_API_VERSION-gie-$INFERENCE_EXTENSION_VERSION-keda-$KEDA_VERSION"

go_module_dir() {  # go_module_dir MODULE@VERSION: download into the Go cache, print its dir
  GOFLAGS=-mod=mod go mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'
}

[[ -f $DIR/.complete ]] && exit 0
rm -rf "$DIR"
mkdir -p "$DIR"
dir=$(go_module_dir "sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION")
cp "$dir"/config/crd/standard/gateway.networking.k8s.io_*.yaml "$DIR/"
dir=$(go_module_dir "sigs.k8s.io/gateway-api-inference-extension@$INFERENCE_EXTENSION_VERSION")
cp "$dir/config/crd/bases/inference.networking.k8s.io_inferencepools.yaml" "$DIR/"
dir=$(go_module_dir "github.com/kedacore/keda/v2@$KEDA_VERSION")
cp "$dir/config/crd/bases/keda.sh_scaledobjects.yaml" "$DIR/"
chmod u+w "$DIR"/*.yaml  # the Go module cache is read-only
touch "$DIR/.complete"
echo "fetch-gateway-crds: Gateway API $GATEWAY_API_VERSION, Inference Extension" \
  "$INFERENCE_EXTENSION_VERSION, KEDA $KEDA_VERSION CRDs in $DIR"
