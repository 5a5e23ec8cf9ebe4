#!/usr/bin/env bash
# Build the local control plane's binaries from the Go module proxy and cache them.
#
# Why a script and not `go install`: k8s.io/kubernetes requires its ~33 staging
# modules at v0.0.0, so `go install k8s.io/kubernetes/cmd/...@vX` fails by design.
# We build inside a small helper module that replaces each staging module with its
# published v0.36.x, together with kwok and etcd (build_control_plane says why together).
# helm, kubeconform, glua and versitygw install normally.
#
# Output: $SPARKLLM_CACHE/bin/<k8s-version>/{etcd,kube-apiserver,kube-controller-manager,
#         kube-scheduler,kubectl,kwok,kwokctl,helm,kubeconform,glua,versitygw}. The first
#         seven are one binary (hack/control-plane/main.go) hard-linked under each name. A
#         binary already there is not rebuilt. With --control-plane only the seven (what
#         `make demo` needs).
#
# Cold cost, measured (go build -debug-trace; empty GOCACHE and SPARKLLM_CACHE, 2 Dec
# 22:35-22:51, idle but for a helper's light work, the virtualenv installing beside the
# first): the seven built as seven mains of one module, 469 s wall with the module
# download (user 565 s, sys 131 s), of which the seven links were 27.5 s of action time;
# as one binary, 408 s wall with the modules already downloaded (user 585 s, sys 127 s),
# one link of 9.5 s. The build keeps both cores busy (1.98 of 2 on average), so its wall
# time is its CPU over two. Built apart (before one module), the control plane was about
# 1,030 s of CPU, 84 % of kwok's compile being k8s.io packages the Kubernetes build also
# compiled, at another version.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.36.1}"
# v1.36.1: kwok v0.8.0's k8s.io version (see build_control_plane); the proxy serves every
# staging module at v0.36.1.
STAGING_VERSION="v0.${K8S_VERSION#v1.}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
KUBECONFORM_VERSION="${KUBECONFORM_VERSION:-v0.8.0}"  # offline schema checks of the chart
GLUA_VERSION="${GLUA_VERSION:-v1.1.2}"  # gopher-lua, the Lua Argo CD embeds (health check test)
# The model-staging tests' S3 server: versitygw checks AWS SigV4 signatures (a wrong secret
# is SignatureDoesNotMatch), serves ranged GETs and multipart uploads, on a posix directory.
# Cold build measured 3 Dec 07:29 (empty GOCACHE and GOMODCACHE, modules downloaded, 2 cores
# at load 14-15 beside a CI run's builds): 165 s wall, user 107 s, sys 16 s; 45 MB binary.
VERSITYGW_VERSION="${VERSITYGW_VERSION:-v1.8.0}"

CACHE="${SPARKLLM_CACHE:-$HOME/.cache/sparkllm}"
BIN="$CACHE/bin/$K8S_VERSION"
WORK="$CACHE/build"
mkdir -p "$BIN" "$WORK"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOTOOLCHAIN=local

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CONTROL_PLANE=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok kwokctl)

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

# The control plane is one Go module and one `go build` of one binary: Kubernetes' four,
# kwok and kwokctl, and etcd. One module means one version of every shared dependency, so a package two of
# them import (client-go, apimachinery, grpc, otel, protobuf: most of kwok's compile and a
# good part of etcd's) compiles once instead of once per binary. That is why K8S_VERSION
# follows kwok's: kwok v0.8.0 is built against k8s.io v0.36.1.
build_control_plane() {
  local dir="$WORK/control-plane-$K8S_VERSION" m minor=${K8S_VERSION#v1.} gomod
  minor=${minor%%.*}
  mkdir -p "$dir"
  # k8s.io/kubernetes requires its staging modules at v0.0.0 (replaced by ./staging in its own
  # tree): read their names from its go.mod and pin each to the published v0.<minor>.<patch>.
  gomod=$(cd "$dir" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" \
    | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  [[ -f $gomod ]] || { echo "no go.mod for k8s.io/kubernetes@$K8S_VERSION" >&2; return 1; }
  local staging
  staging=$(sed -n 's|^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*|\1|p' "$gomod" | sort -u)
  [[ -n $staging ]] || { echo "no staging modules in $gomod" >&2; return 1; }
  {
    printf 'module sparkllm.local/hack/controlplane\n\ngo 1.26.0\n\ngodebug default=go1.26\n\n'
    printf 'require (\n\tk8s.io/kubernetes %s\n\tsigs.k8s.io/kwok %s\n\tgo.etcd.io/etcd/server/v3 %s\n)\n\n' \
      "$K8S_VERSION" "$KWOK_VERSION" "$ETCD_VERSION"
    for m in $staging; do printf 'replace %s => %s %s\n' "$m" "$m" "$STAGING_VERSION"; done
  } >"$dir/go.mod"
  local pkgs=(k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
    sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok/cmd/kwokctl go.etcd.io/etcd/server/v3)
  local ld="-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION"
  ld+=" -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=$K8S_VERSION"
  local p
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ld+=" -X $p.gitTreeState=clean -X $p.gitCommit=module-proxy-$K8S_VERSION"
    ld+=" -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  local out="$dir/out"
  rm -rf "$out" && mkdir -p "$out"
  # One main package (hack/control-plane/main.go) runs all seven, chosen by the name it is
  # started as: the seven links of a build of seven mains were one link each of ~100 MB
  # (main.go says why, and how kwokctl's copies still find their program).
  cp "$HERE/control-plane/main.go" "$dir/main.go"
  # -dwarf=false: the link drops DWARF anyway (-s -w), but the compiler still makes it. A cold
  # kubectl alone, both builds side by side at load 12-39: 423 s of CPU (user 352, sys 71)
  # without against 466 s (user 390, sys 75) with, -9 %; the binaries are byte-for-byte the same size.
  # `go get` of the seven programs' packages resolves one version of everything (the module
  # graph's maximum); -mod=mod then lets the build record, at those versions, the modules
  # main.go imports from directly (component-base, kubectl, cobra: in the graph already).
  local at=("${pkgs[@]:0:4}")
  at=("${at[@]/%/@$K8S_VERSION}" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
    "sigs.k8s.io/kwok/cmd/kwokctl@$KWOK_VERSION" "go.etcd.io/etcd/server/v3@$ETCD_VERSION")
  (cd "$dir" && go get "${at[@]}" \
    && go build -mod=mod -trimpath -gcflags=all=-dwarf=false -ldflags "$ld" -o "$out/control-plane" .) || return
  # Into place only when the binary built and answers to each name: a half-made set is
  # never "already built". Hard links (see main.go), made beside it first, then renamed over.
  local name
  mv -f "$out/control-plane" "$BIN/.control-plane.new"
  for name in "${CONTROL_PLANE[@]}"; do
    ln -f "$BIN/.control-plane.new" "$BIN/.$name.new"
  done
  for name in "${CONTROL_PLANE[@]}"; do
    mv -f "$BIN/.$name.new" "$BIN/$name"
  done
  rm -f "$BIN/.control-plane.new"
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

build_versitygw() {
  GOBIN="$BIN" go install -trimpath -ldflags "-s -w -X main.Version=$VERSITYGW_VERSION" \
    "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
}

# The builds run side by side: each spends part of its time fetching modules from the
# proxy (network) while another compiles (CPU), and Go's build cache is safe to share.
# A failed build fails the script, naming it; its output is in $WORK/<name>.log.
pids=()
names=()
start_build() {  # start_build NAME LABEL FUNCTION: run FUNCTION in the background
  local name=$1 label=$2 fn=$3
  # Said at once: a cold build is minutes of silence otherwise (its lines come at its end).
  log "started: $label (output in $WORK/$name.log)"
  (timed "$label" "$fn" >"$WORK/$name.log" 2>&1 || { tail -n 30 "$WORK/$name.log" >&2; exit 1; }) &
  pids+=($!)
  names+=("$name")
}

total=$SECONDS
have "${CONTROL_PLANE[@]}" || start_build control-plane "the control plane: kubernetes $K8S_VERSION (apiserver, controller-manager, scheduler, kubectl), kwok $KWOK_VERSION, etcd $ETCD_VERSION" build_control_plane
# --control-plane: only what a dev cluster runs (`make demo`); the tests' tools come with
# a plain run (`make binaries`).
if [[ ${1:-} != --control-plane ]]; then
  have helm || start_build helm "helm $HELM_VERSION" build_helm
  have kubeconform || start_build kubeconform "kubeconform $KUBECONFORM_VERSION" build_kubeconform
  have glua || start_build glua "glua (gopher-lua) $GLUA_VERSION" build_glua
  have versitygw || start_build versitygw "versitygw $VERSITYGW_VERSION" build_versitygw
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
