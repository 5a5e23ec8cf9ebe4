#!/usr/bin/env bash
# The set-up `make test` runs before pytest, so that no test ever installs or downloads:
#
#  1. promtool and prometheus (Debian's `prometheus` package, apt): the alert rules are
#     checked and unit-tested with Prometheus's own tool, and a real Prometheus scrapes the
#     dev cluster in tests/e2e/test_prometheus_scrape.py, with a real node-exporter
#     (`prometheus-node-exporter`) beside it.
#  2. The Prometheus Operator's CRDs (ServiceMonitor, PodMonitor, PrometheusRule) at a
#     pinned version, from the Go module proxy (`go mod download`, the module ships them in
#     example/prometheus-operator-crd/): the monitoring objects are validated against them,
#     by kubeconform and by the API server (server-side dry run).
#     node_exporter's own end-to-end fixture output (Go module, pinned) is kept too: the
#     metric names the resource-safety alerts read (pressure, infiniband, vmstat, swap) are
#     checked against what node-exporter really exports.
#  3. aarch64 wheels of every runtime dependency, resolved transitively by pip for
#     CPython 3.11 on manylinux aarch64, binary only: DGX Spark is arm64, and a dependency
#     without such a wheel would need a compiler in the image. pip's own resolution is the
#     proof; tests/unit/test_aarch64_wheels.py reads what it left in the cache.
#
# Everything is cached under $SPARKLLM_CACHE (default ~/.cache/sparkllm); a warm run is a
# few file checks. PYTHON is the interpreter whose pip downloads (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${SPARKLLM_CACHE:-$HOME/.cache/sparkllm}"
PYTHON="${PYTHON:-python3}"
PROMETHEUS_OPERATOR_VERSION="${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}"
CRD_DIR="$CACHE/prometheus-operator-crds/$PROMETHEUS_OPERATOR_VERSION"
CRD_KINDS=(servicemonitors podmonitors prometheusrules)
NODE_EXPORTER_VERSION="${NODE_EXPORTER_VERSION:-v1.12.1}"
NODE_EXPORTER_METRICS="$CACHE/exporter-metrics/node_exporter-$NODE_EXPORTER_VERSION.txt"

# shellcheck source=hack/lib/apt.sh
source hack/lib/apt.sh
# shellcheck source=hack/lib/steps.sh
source hack/lib/steps.sh

go_module_dir() {  # go_module_dir MODULE@VERSION: download into the Go cache, print its dir
  GOFLAGS=-mod=mod go mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'
}

apt_install promtool prometheus
apt_install prometheus prometheus
apt_install prometheus-node-exporter prometheus-node-exporter
apt_install redis-server redis-server  # the shared governance store's tests (a real Redis)

monitoring_crds() {  # 2. the Prometheus Operator's CRDs, node_exporter's fixtures
  local dir kind
  if [[ ! -f $CRD_DIR/.complete ]]; then
    dir=$(go_module_dir "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION")
    mkdir -p "$CRD_DIR"
    for kind in "${CRD_KINDS[@]}"; do
      cp "$dir/example/prometheus-operator-crd/monitoring.coreos.com_$kind.yaml" "$CRD_DIR/"
    done
    touch "$CRD_DIR/.complete"
    echo "setup-test-tools: Prometheus Operator $PROMETHEUS_OPERATOR_VERSION CRDs in $CRD_DIR"
  fi
  if [[ ! -f $NODE_EXPORTER_METRICS ]]; then
    dir=$(go_module_dir "github.com/prometheus/node_exporter@$NODE_EXPORTER_VERSION")
    mkdir -p "$(dirname "$NODE_EXPORTER_METRICS")"
    # Its fixture /sys too (ttar archive): this machine has no InfiniBand port, so the e2e
    # test runs a second node-exporter on it to export the infiniband series for real.
    rm -rf "$NODE_EXPORTER_METRICS.sysfs"
    mkdir -p "$NODE_EXPORTER_METRICS.sysfs"
    (cd "$NODE_EXPORTER_METRICS.sysfs" && bash "$dir/ttar" -x -f "$dir/collector/fixtures/sys.ttar")
    cp "$dir/collector/fixtures/e2e-output.txt" "$NODE_EXPORTER_METRICS"
  fi
}

aarch64_wheels() {  # 3. the runtime dependencies' aarch64 wheels
  local deps key wheels platforms minor
  deps=$("$PYTHON" - <<'PY'
import tomllib
print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))
PY
  )
  # The key changes with the pins: a new pin downloads again into a fresh directory.
  key=$(printf '%s\n' "$deps" | sha256sum | cut -c1-12)
  wheels="$CACHE/wheels-aarch64/cp311-$key"
  [[ -f $wheels/.complete ]] && return 0
  rm -rf "$wheels"
  mkdir -p "$wheels"
  printf '%s\n' "$deps" >"$wheels/requirements.txt"
  # Every manylinux tag up to glibc 2.39, DGX OS's (Ubuntu 24.04): pip matches --platform
  # tags exactly, so each is listed (smg, for one, ships manylinux_2_28_aarch64 only).
  platforms=(--platform manylinux2014_aarch64)
  for minor in $(seq 17 39); do platforms+=(--platform "manylinux_2_${minor}_aarch64"); done
  "$PYTHON" -m pip download --quiet --disable-pip-version-check --dest "$wheels" \
    --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
    "${platforms[@]}" \
    -r "$wheels/requirements.txt"
  touch "$wheels/.complete"
  echo "setup-test-tools: $(find "$wheels" -name '*.whl' | wc -l) aarch64 wheels in $wheels"
}

# Steps 2-6 side by side: each waits on the network and on unpacking, not on another's
# output (a warm run: five file checks). Their lines are prefixed with the step's name.
step monitoring-crds monitoring_crds
step aarch64-wheels aarch64_wheels
step torch env PYTHON="$PYTHON" bash hack/setup-torch.sh  # 4. torch's venv, for the Gloo run
step gateway-crds bash hack/fetch-gateway-crds.sh  # 5. Gateway API, Inference Extension, KEDA CRDs
step open-webui env PYTHON="$PYTHON" bash hack/setup-open-webui.sh  # 6. its venv, chromium, driver
wait_steps
