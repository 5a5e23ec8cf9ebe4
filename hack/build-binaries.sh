#!/usr/bin/env bash
# Build the local control plane's binaries from the Go module proxy and cache them.
#
# Why a script and not `go install`: k8s.io/kubernetes requires its ~31 staging
# modules at v0.0.0, so `go install k8s.io/kubernetes/cmd/...@vX` fails by design.
# We build inside a small helper module that replaces each staging module with its
# published v0.35.x; etcd's server module has its own `../api` replaces and needs the
# same treatment. kwok and helm install normally.
#
# Output: $SPARKLLM_CACHE/bin/<k8s-version>/{etcd,kube-apiserver,kube-controller-manager,
#         kube-scheduler,kubectl,kwok,kwokctl,helm,kubeconform,glua}. A binary already there
#         is not rebuilt. With --control-plane only the first seven (what `make demo` needs).
#
# Cold cost, measured (empty GOCACHE and SPARKLLM_CACHE, module cache warm, 2 cores shared
# with other work; go build -debug-trace): --control-plane is about 1,030 s of CPU — the
# Kubernetes four ~650 s, etcd ~140 s, kwok+kwokctl ~235 s — so on 2 idle cores it cannot
# take under ~9 minutes however it is ordered. Building fewer of the four saves little:
# of the Kubernetes build's compile time the packages only kubectl needs are 1.3 %, only
# kube-controller-manager 3 %, and the links 1 %; the standard library compiled by each
# concurrent build is ~5 %. The one large saving would be kwok: 84 % of its compile is
# k8s.io packages the Kubernetes build also compiles, but at kwok's v0.36.1, not v0.35.4.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.35.4}"
# v1.35.4: the newest patch whose every staging module (mount-utils, sample-*) the proxy serves;
# v1.35.5 lacks k8s.io/mount-utils@v0.35.5 there.
STAGING_VERSION="v0.${K8S_VERSION#v1.}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
KUBECONFORM_VERSION="${KUBECONFORM_VERSION:-v0.8.0}"  # offline schema checks of the chart
GLUA_VERSION="${GLUA_VERSION:-v1.1.2}"  # gopher-lua, the Lua Argo CD embeds (health check test)

CACHE="${SPARKLLM_CACHE:-$HOME/.cache/sparkllm}"
BIN="$CACHE/bin/$K8S_VERSION"
WORK="$CACHE/build"
mkdir -p "$BIN" "$WORK"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOTOOLCHAIN=local

STAGING=(api apiextensions-apiserver apimachinery apiserver cli-runtime client-go
  cloud-provider cluster-bootstrap code-generator component-base component-helpers
  controller-manager cri-api cri-client csi-translation-lib dynamic-resource-allocation
  endpointslice externaljwt kms kube-aggregator kube-controller-manager kube-proxy
  kube-scheduler kubectl kubelet metrics mount-utils pod-security-admission
  sample-apiserver sample-cli-plugin sample-controller)

log() { printf '[build-binaries %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

have() {  # have NAME...: true when every named binary is already built
  local b
  for b in "$@"; do [[ -x "$BIN/$b" ]] || return 1; done
}

CPU_USED=""
cpu_used() {  # cpu_used: CPU_USED="user U s, sys S s" of this shell's finished children
  # (`times`' second line, e.g. "5m3.21s 1m2.05s", written to a file: a $(...) would be a
  # subshell with no children of its own).
  local file="$WORK/.times.$BASHPID" line m u=0 s=0
  times >"$file"
  line=$(tail -n 1 "$file")
  rm -f "$file"
  if [[ $line =~ ^([0-9]+)m([0-9]+)[.0-9]*s\ ([0-9]+)m([0-9]+)[.0-9]*s$ ]]; then
    m=("${BASH_REMATCH[@]}")
    u=$((10#${m[1]} * 60 + 10#${m[2]}))
    s=$((10#${m[3]} * 60 + 10#${m[4]}))
  fi
  CPU_USED="user $u s, sys $s s"
}

timed() {  # timed LABEL CMD...: run CMD, report how long it took, wall and CPU
  local label=$1 start=$SECONDS
  shift
  log "building $label ..."
  "$@" || return  # (set -e does not reach here: the caller runs us under `||`)
  # CPU as well as wall: on a shared machine the wall time says more about the load.
  cpu_used
  log "built $label in $((SECONDS - start)) s ($CPU_USED)"
}

build_etcd() {
  local dir="$WORK/etcd-$ETCD_VERSION"
  mkdir -p "$dir"
  cat >"$dir/go.mod" <<MOD
module sparkllm.local/hack/etcdbin

go 1.25.0

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
MOD
  (cd "$dir" && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" \
    && go build -trimpath -ldflags "-s -w" -o "$BIN/etcd" go.etcd.io/etcd/server/v3)
}

build_kwok() {
  GOBIN="$BIN" go install -trimpath -ldflags "-s -w \
    -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION \
    -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=$K8S_VERSION" \
    "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwokctl@$KWOK_VERSION"
}

build_kubernetes() {
  local dir="$WORK/kubernetes-$K8S_VERSION" m minor=${K8S_VERSION#v1.}
  minor=${minor%%.*}
  mkdir -p "$dir"
  {
    printf 'module sparkllm.local/hack/k8sbin\n\ngo 1.25.0\n\ngodebug default=go1.25\n\n'
    printf 'require k8s.io/kubernetes %s\n\n' "$K8S_VERSION"
    for m in "${STAGING[@]}"; do printf 'replace k8s.io/%s => k8s.io/%s %s\n' "$m" "$m" "$STAGING_VERSION"; done
  } >"$dir/go.mod"
  local pkgs=(k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)
  local ld="-s -w" p
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ld+=" -X $p.gitTreeState=clean -X $p.gitCommit=module-proxy-$K8S_VERSION"
    ld+=" -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  (cd "$dir" && go get "${pkgs[@]/%/@$K8S_VERSION}" && go build -trimpath -ldflags "$ld" -o "$BIN/" "${pkgs[@]}")
}

build_helm() {
  local minor=${K8S_VERSION#v1.}
  minor=${minor%%.*}
  GOBIN="$BIN" go install -trimpath -ldflags "-s -w \
    -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION \
    -X helm.sh/helm/v3/internal/version.gitTreeState=clean \
    -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 \
    -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$minor \
    -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 \
    -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$minor" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
}

build_kubeconform() {
  GOBIN="$BIN" go install -trimpath -ldflags "-s -w -X main.version=$KUBECONFORM_VERSION" \
    "github.com/yannh/kubeconform/cmd/kubeconform@$KUBECONFORM_VERSION"
}

build_glua() {
  GOBIN="$BIN" go install -trimpath -ldflags "-s -w" "github.com/yuin/gopher-lua/cmd/glua@$GLUA_VERSION"
}

# The builds run side by side: each spends part of its time fetching modules from the
# proxy (network) while another compiles (CPU), and Go's build cache is safe to share.
# A failed build fails the script, naming it; its output is in $WORK/<name>.log.
pids=()
names=()
start_build() {  # start_build NAME LABEL FUNCTION: run FUNCTION in the background
  local name=$1 label=$2 fn=$3
  (timed "$label" "$fn" >"$WORK/$name.log" 2>&1 || { tail -n 30 "$WORK/$name.log" >&2; exit 1; }) &
  pids+=($!)
  names+=("$name")
}

total=$SECONDS
have etcd || start_build etcd "etcd $ETCD_VERSION" build_etcd
have kwok kwokctl || start_build kwok "kwok $KWOK_VERSION" build_kwok
have kube-apiserver kube-controller-manager kube-scheduler kubectl \
  || start_build kubernetes "kubernetes $K8S_VERSION (apiserver, controller-manager, scheduler, kubectl)" build_kubernetes
# --control-plane: only what a dev cluster runs (`make demo`); the tests' tools come with
# a plain run (`make binaries`).
if [[ ${1:-} != --control-plane ]]; then
  have helm || start_build helm "helm $HELM_VERSION" build_helm
  have kubeconform || start_build kubeconform "kubeconform $KUBECONFORM_VERSION" build_kubeconform
  have glua || start_build glua "glua (gopher-lua) $GLUA_VERSION" build_glua
fi
failed=()
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || failed+=("${names[$i]}")
  grep -h '^\[build-binaries' "$WORK/${names[$i]}.log" || true
done
if ((${#failed[@]})); then
  log "FAILED: ${failed[*]} (logs: $WORK/<name>.log)"
  exit 1
fi
cpu_used
log "binaries in $BIN ($((SECONDS - total)) s; $CPU_USED)"
