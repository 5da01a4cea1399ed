#!/usr/bin/env bash
# Build the lab's pinned control-plane binaries from the published Go modules.
# Output: .lab/bin/{etcd,kube-apiserver,kube-scheduler,kube-controller-manager,kubeadm,kwok}
# A binary is rebuilt only when its version stamp differs from lab/versions.env.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=/dev/null
. "$root/lab/versions.env"
bin="$root/.lab/bin"
work="$root/.lab/build"
mkdir -p "$bin" "$work"
export GOFLAGS=-mod=mod CGO_ENABLED=0

stamp_ok() { # name version
  [ -x "$bin/$1" ] && [ "$(cat "$bin/.$1.version" 2>/dev/null)" = "$2" ]
}
mark() { echo "$2" >"$bin/.$1.version"; }
log() { echo "[lab-build] $*" >&2; }

build_kube() {
  local need=()
  for c in kube-apiserver kube-scheduler kube-controller-manager kubeadm; do
    stamp_ok "$c" "$KUBE_VERSION" || need+=("$c")
  done
  [ ${#need[@]} -eq 0 ] && { log "kubernetes v$KUBE_VERSION binaries cached"; return; }
  local d="$work/kube"
  mkdir -p "$d"
  log "preparing module k8s.io/kubernetes v$KUBE_VERSION (staging modules pinned to v0.${KUBE_VERSION#1.})"
  modfile=$(cd "$d" && go mod download -json "k8s.io/kubernetes@v$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  {
    echo "module gpusplit.lab/kube"
    echo
    echo "go $(sed -n 's/^go \(.*\)/\1/p' "$modfile")"
    echo
    echo "require k8s.io/kubernetes v$KUBE_VERSION"
    echo
    echo "replace ("
    sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 v0.'"${KUBE_VERSION#1.}"'#p' "$modfile"
    echo ")"
  } >"$d/go.mod"
  (cd "$d" && for c in "${need[@]}"; do
     log "building $c (cold builds take many minutes on two cores)"
     go build -trimpath -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=v$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${KUBE_VERSION#1.}" -o "$bin/$c" "k8s.io/kubernetes/cmd/$c"
     mark "$c" "$KUBE_VERSION"
   done)
}

build_simple() { # name module-version pkg go-module-path
  local name=$1 ver=$2 pkg=$3 mod=$4
  stamp_ok "$name" "$ver" && { log "$name v$ver cached"; return; }
  local d="$work/$name"
  mkdir -p "$d"
  printf 'module gpusplit.lab/%s\n\ngo 1.26\n\nrequire %s v%s\n' "$name" "$mod" "$ver" >"$d/go.mod"
  log "building $name v$ver"
  (cd "$d" && go build -trimpath -ldflags "-s -w" -o "$bin/$name" "$pkg")
  mark "$name" "$ver"
}

case "${1:-all}" in
  kube) build_kube ;;
  etcd) build_simple etcd "$ETCD_VERSION" go.etcd.io/etcd/server/v3 go.etcd.io/etcd/server/v3 ;;
  kwok) build_simple kwok "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok ;;
  all)
    build_simple etcd "$ETCD_VERSION" go.etcd.io/etcd/server/v3 go.etcd.io/etcd/server/v3
    build_simple kwok "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok
    build_kube ;;
  *) echo "usage: $0 [all|kube|etcd|kwok]" >&2; exit 2 ;;
esac
