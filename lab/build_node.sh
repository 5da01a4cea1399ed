#!/usr/bin/env bash
# Build the lab's real node (lab/node.py) from the published Go modules, pinned in lab/versions.env:
#   .lab/bin/kubelet                      k8s.io/kubernetes cmd/kubelet at KUBE_VERSION, and each other
#                                         release of KUBE_VERSIONS into .lab/bin/<version>/kubelet
#                                         (K8S=<version>: that release's only)
#   .lab/bin/{containerd,ctr,containerd-shim-runc-v2}
#                                         github.com/containerd/containerd/v2 at CONTAINERD_VERSION
#   .lab/bin/runc                         github.com/opencontainers/runc at RUNC_VERSION, with seccomp
#                                         (cgo and libseccomp: Debian's libseccomp-dev)
#   .lab/bin/cni/{bridge,loopback,host-local}
#                                         github.com/containernetworking/plugins at CNI_PLUGINS_VERSION
# and the programs of the lab's images: the pause program and the workload (lab/images/*.c, static C)
# and the device plugin (lab/images/deviceplugin, Go, static).
# Like lab/build.sh (which runs this script from `all`), a binary is rebuilt only when its version
# stamp (.<name>.version beside it) differs from the pin, and a cached one is reported "cached".
#   lab/build_node.sh [all|kubelet|containerd|runc|cni|images]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=/dev/null
. "$root/lab/versions.env"
# shellcheck source=lab/kube_stamp.sh
. "$root/lab/kube_stamp.sh"
: "${KUBE_VERSION:?}" "${KUBE_VERSIONS:?}" "${GO_TOOLCHAIN:?}" "${CONTAINERD_VERSION:?}" "${RUNC_VERSION:?}" "${CNI_PLUGINS_VERSION:?}"
bin="$root/.lab/bin"
work="$root/.lab/build"
mkdir -p "$bin/cni" "$work"
export GOFLAGS=-mod=mod CGO_ENABLED=0
# a Go build is heavy on a small machine: below the lab and the tests in priority
NICE=(nice -n "${GPUSPLIT_BUILD_NICE:-10}")

log() { echo "[lab-build] $*" >&2; }
die() {
  log "error: $*"
  exit 1
}
stamp_ok() { # path version
  [ -x "$1" ] && [ "$(cat "$(dirname "$1")/.$(basename "$1").version" 2>/dev/null)" = "$2" ]
}
mark() { echo "$2" >"$(dirname "$1")/.$(basename "$1").version"; }

version_ge() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1)" = "$2" ]; }
local_go_version() {
  local v
  v=$(GOTOOLCHAIN=local go env GOVERSION 2>/dev/null) || v=$(go version | awk '{print $3}')
  v=${v#go}
  echo "${v%% *}"
}
command -v go >/dev/null || die "no go command on PATH: install Go 1.21 or newer (Debian: apt-get install golang-go)"
version_ge "$(local_go_version)" 1.21 ||
  die "go $(local_go_version) cannot switch toolchains: run lab/build.sh all, which fetches $GO_TOOLCHAIN first"

use_go_for() { # go directive of the module about to be built
  if version_ge "$(local_go_version)" "$1"; then
    export GOTOOLCHAIN=local
  else
    log "the machine's go $(local_go_version) is older than the go $1 this build needs: GOTOOLCHAIN=$GO_TOOLCHAIN"
    export GOTOOLCHAIN=$GO_TOOLCHAIN
  fi
}
gomod_of() { # module version: that module's go.mod in the module cache
  (cd "$work" && GOFLAGS='' GOTOOLCHAIN=local go mod download -json "$1@v$2" |
    sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
}
go_directive() { sed -n 's/^go \([0-9.]*\).*/\1/p' "$1"; }

gobuild() { # label out pkg [go build flags...]: in the current directory's module, niced, timed
  local label=$1 out=$2 pkg=$3 start=$SECONDS
  shift 3
  log "building $label"
  "${NICE[@]}" go build -trimpath "$@" -o "$out" "$pkg" || die "building $label failed"
  log "$label: done in $((SECONDS - start)) s"
}

wrapper_module() { # dir name module version: a go.mod that requires the pinned module, its go directive
  local d=$1 name=$2 mod=$3 ver=$4 modfile godir
  modfile=$(gomod_of "$mod" "$ver")
  [ -n "$modfile" ] || die "could not download $mod v$ver"
  godir=$(go_directive "$modfile")
  [ -n "$godir" ] || die "$mod v$ver: no go directive in its go.mod"
  mkdir -p "$d"
  printf 'module gpusplit.lab/%s\n\ngo %s\n\nrequire %s v%s\n' "$name" "$godir" "$mod" "$ver" >"$d/go.mod"
  use_go_for "$godir"
}

build_kubelet() { # version (default KUBE_VERSION; another release's goes to .lab/bin/<version>/)
  local ver=${1:-$KUBE_VERSION} out="$bin/kubelet" d="$work/node-kubelet" modfile
  if [ "$ver" != "$KUBE_VERSION" ]; then
    out="$bin/$ver/kubelet" d="$work/node-kubelet-$ver"
    mkdir -p "$bin/$ver"
  fi
  local ldflags
  ldflags=$(kube_ldflags "$ver")
  # a kubelet stamped otherwise (.kubelet.ldflags) is linked again: from a warm Go build cache in seconds
  stamp_ok "$out" "$ver" && [ "$(cat "$(dirname "$out")/.kubelet.ldflags" 2>/dev/null)" = "$ldflags" ] &&
    { log "kubelet v$ver cached"; return; }
  modfile=$(gomod_of k8s.io/kubernetes "$ver")
  [ -n "$modfile" ] || die "could not download k8s.io/kubernetes v$ver"
  mkdir -p "$d"
  # k8s.io/kubernetes replaces its staging modules with ./staging/src/...: pin them to v0.<minor>
  {
    printf 'module gpusplit.lab/kubelet\n\ngo %s\n\nrequire k8s.io/kubernetes v%s\n\nreplace (\n' \
      "$(go_directive "$modfile")" "$ver"
    sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 v0.'"${ver#1.}"'#p' "$modfile"
    echo ")"
  } >"$d/go.mod"
  use_go_for "$(go_directive "$modfile")"
  (cd "$d" && gobuild "kubelet v$ver" "$out" k8s.io/kubernetes/cmd/kubelet -ldflags "$ldflags")
  mark "$out" "$ver"
  echo "$ldflags" >"$(dirname "$out")/.kubelet.ldflags"
}

build_kubelets() { # K8S's release, else every release of KUBE_VERSIONS
  local v
  if [ -n "${K8S:-}" ]; then
    build_kubelet "$K8S"
  else
    for v in ${KUBE_VERSIONS//,/ }; do build_kubelet "$v"; done
  fi
}

CONTAINERD_MODULE=github.com/containerd/containerd/v2
CONTAINERD_COMMANDS=(containerd ctr containerd-shim-runc-v2)
build_containerd() {
  local ver=$CONTAINERD_VERSION need=() c d="$work/node-containerd"
  for c in "${CONTAINERD_COMMANDS[@]}"; do stamp_ok "$bin/$c" "$ver" || need+=("$c"); done
  [ ${#need[@]} -eq 0 ] && { log "containerd v$ver cached (${CONTAINERD_COMMANDS[*]})"; return; }
  wrapper_module "$d" containerd "$CONTAINERD_MODULE" "$ver"
  # no_btrfs: the btrfs snapshotter needs cgo and the btrfs headers; the lab uses overlayfs
  (cd "$d" && for c in "${need[@]}"; do
    gobuild "$c v$ver" "$bin/$c" "$CONTAINERD_MODULE/cmd/$c" -tags no_btrfs -ldflags \
      "-s -w -X $CONTAINERD_MODULE/version.Version=v$ver -X $CONTAINERD_MODULE/version.Package=$CONTAINERD_MODULE"
    mark "$bin/$c" "$ver"
  done)
}

build_runc() {
  local ver=$RUNC_VERSION d="$work/node-runc"
  stamp_ok "$bin/runc" "$ver" && { log "runc v$ver cached"; return; }
  # runc's nsenter is C (cgo); without the seccomp tag every container fails with
  # "config provided but seccomp not supported", and the tag needs libseccomp's headers
  command -v "${CC:-cc}" >/dev/null || die "runc needs cgo and there is no C compiler (${CC:-cc}): apt-get install gcc libc6-dev"
  [ -f /usr/include/seccomp.h ] || die "runc's seccomp support needs libseccomp's headers: apt-get install libseccomp-dev"
  wrapper_module "$d" runc github.com/opencontainers/runc "$ver"
  (cd "$d" && CGO_ENABLED=1 gobuild "runc v$ver (seccomp)" "$bin/runc" github.com/opencontainers/runc \
    -tags "seccomp urfave_cli_no_docs" -ldflags "-s -w -X main.version=$ver")
  mark "$bin/runc" "$ver"
}

CNI_MODULE=github.com/containernetworking/plugins
CNI_PLUGINS=(main/bridge main/loopback ipam/host-local)
build_cni() {
  local ver=$CNI_PLUGINS_VERSION need=() p d="$work/node-cni"
  for p in "${CNI_PLUGINS[@]}"; do stamp_ok "$bin/cni/${p#*/}" "$ver" || need+=("$p"); done
  [ ${#need[@]} -eq 0 ] && { log "cni plugins v$ver cached (${CNI_PLUGINS[*]#*/})"; return; }
  wrapper_module "$d" cni "$CNI_MODULE" "$ver"
  (cd "$d" && for p in "${need[@]}"; do
    gobuild "cni ${p#*/} v$ver" "$bin/cni/${p#*/}" "$CNI_MODULE/plugins/$p" \
      -ldflags "-s -w -X $CNI_MODULE/pkg/utils/buildversion.BuildVersion=v$ver"
    mark "$bin/cni/${p#*/}" "$ver"
  done)
}

# the images' programs: static C, stamped with the hash of their source
build_images() {
  local src name sum
  command -v "${CC:-cc}" >/dev/null || die "the lab's image programs need a C compiler (${CC:-cc}): apt-get install gcc libc6-dev"
  mkdir -p "$bin/images"
  for src in "$root"/lab/images/*.c; do
    name=$(basename "$src" .c)
    sum=$(sha256sum "$src" | cut -c1-16)
    if stamp_ok "$bin/images/$name" "$sum"; then
      log "image program $name cached"
      continue
    fi
    "${CC:-cc}" -static -O2 -Wall -Werror -o "$bin/images/$name" "$src" || die "compiling lab/images/$name.c failed"
    mark "$bin/images/$name" "$sum"
    log "image program $name built"
  done
}

# the lab's device plugin (lab/images/deviceplugin/main.go, its own package main) against the
# device-plugin API of k8s.io/kubelet at KUBE_VERSION's staging version, stamped with its source's hash
build_deviceplugin() {
  local src="$root/lab/images/deviceplugin/main.go" d="$work/node-deviceplugin" sum modfile
  sum="$(sha256sum "$src" | cut -c1-16)-$KUBE_VERSION"
  stamp_ok "$bin/images/device-plugin" "$sum" && { log "image program device-plugin cached"; return; }
  modfile=$(gomod_of k8s.io/kubelet "0.${KUBE_VERSION#1.}")
  [ -n "$modfile" ] || die "could not download k8s.io/kubelet v0.${KUBE_VERSION#1.}"
  mkdir -p "$d" "$bin/images"
  printf 'module gpusplit.lab/deviceplugin\n\ngo %s\n\nrequire k8s.io/kubelet v0.%s\n' \
    "$(go_directive "$modfile")" "${KUBE_VERSION#1.}" >"$d/go.mod"
  cp "$src" "$d/main.go"
  use_go_for "$(go_directive "$modfile")"
  (cd "$d" && gobuild "image program device-plugin" "$bin/images/device-plugin" . -ldflags "-s -w")
  mark "$bin/images/device-plugin" "$sum"
}

case "${1:-all}" in
  kubelet) build_kubelets ;;
  containerd) build_containerd ;;
  runc) build_runc ;;
  cni) build_cni ;;
  images)
    build_images
    build_deviceplugin
    ;;
  all)
    build_images
    build_deviceplugin
    build_runc
    build_cni
    build_containerd
    build_kubelets
    ;;
  *)
    echo "usage: $0 [all|kubelet|containerd|runc|cni|images]" >&2
    exit 2
    ;;
esac
