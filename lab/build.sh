#!/usr/bin/env bash
# Build the lab's pinned control-plane binaries from the published Go modules.
# Output: .lab/bin/{etcd,kube-apiserver,kube-scheduler,kube-controller-manager,kubeadm,kwok} and
# the NVIDIA Container Toolkit's Go programs (TOOLKIT_COMMANDS below, for the hardening matrix,
# tests/integration/test_toolkit_matrix.py). The other Kubernetes releases of KUBE_VERSIONS go to
# .lab/bin/<version>/ (kube-apiserver, kube-scheduler, kube-controller-manager, kubeadm and kubectl:
# the venv's kubectl is the default release's, and kubectl supports one minor version of skew).
# K8S=<version> builds that release only; otherwise `all` builds every release of KUBE_VERSIONS.
# KUBE_COMPONENTS="kube-apiserver kubectl" builds only those of each release (tools/legs.py's
# Kubernetes legs leave kubeadm out: the lab writes kubeadm's manifests itself).
# A binary is rebuilt only when its version stamp (.<name>.version beside it) differs from
# lab/versions.env; a cached one is left alone and reported as "cached".
# `all` also puts the Kubernetes sources that the feature-gate catalog is checked against
# (FEATURE_GATE_SOURCES) into the Go module cache.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=/dev/null
. "$root/lab/versions.env"
: "${KUBE_VERSION:?}" "${KUBE_VERSIONS:?}" "${ETCD_VERSION:?}" "${KWOK_VERSION:?}" "${GO_TOOLCHAIN:?}" "${FEATURE_GATE_SOURCES:?}"
: "${NVIDIA_CONTAINER_TOOLKIT_VERSION:?}"
bin="$root/.lab/bin"
work="$root/.lab/build"
mkdir -p "$bin" "$work"
export GOFLAGS=-mod=mod CGO_ENABLED=0

stamp_ok() { # name version
  [ -x "$bin/$1" ] && [ "$(cat "$bin/.$1.version" 2>/dev/null)" = "$2" ]
}
mark() { echo "$2" >"$bin/.$1.version"; }
log() { echo "[lab-build] $*" >&2; }
die() { log "error: $*"; exit 1; }

version_ge() { # a b: is version a at least b (1.26.8 >= 1.26.0)?
  [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1)" = "$2" ]
}

local_go_version() { # the machine's own go, whatever GOTOOLCHAIN says: 1.26.8
  local v
  v=$(GOTOOLCHAIN=local go env GOVERSION 2>/dev/null) || v=$(go version | awk '{print $3}')
  v=${v#go}
  echo "${v%% *}"
}

# The go command. The machine's own Go builds when it is new enough for a module's go
# directive; otherwise GOTOOLCHAIN selects the pinned GO_TOOLCHAIN, which the go command fetches
# from the Go module proxy (module golang.org/toolchain). A Go older than 1.21 cannot switch
# toolchains (Debian 12's golang-go is 1.19): then the pinned toolchain is downloaded as a
# module with that go and put first on PATH, as the go command itself would run it.
ensure_go() {
  command -v go >/dev/null ||
    die "no go command on PATH: install Go 1.21 or newer (Debian: apt-get install golang-go); .ci/run does this"
  local have
  have=$(local_go_version)
  version_ge "$have" 1.21 && return
  local mod dir
  mod="golang.org/toolchain@v0.0.1-$GO_TOOLCHAIN.$(go env GOOS)-$(go env GOARCH)"
  log "go $have cannot switch toolchains; fetching $GO_TOOLCHAIN from the Go module proxy ($mod)"
  dir=$(cd "$work" && GOFLAGS='' go mod download -json "$mod" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [ -n "$dir" ] && [ -f "$dir/bin/go" ] || die "could not download $mod"
  # module zips carry no file modes: make the commands executable (the go command does the same)
  find "$dir/bin" "$dir/pkg/tool" -type f ! -perm -u+x -exec chmod a+x {} +
  export PATH="$dir/bin:$PATH" GOROOT="$dir"
  log "using $("$dir/bin/go" version)"
}

use_go_for() { # go directive of the module about to be built: switch toolchains when too old
  local have
  have=$(local_go_version)
  if version_ge "$have" "$1"; then
    export GOTOOLCHAIN=local
  else
    log "the machine's go $have is older than the go $1 this build needs: GOTOOLCHAIN=$GO_TOOLCHAIN"
    export GOTOOLCHAIN=$GO_TOOLCHAIN
  fi
}

gomod_of() { # module version: path of that module's go.mod in the module cache
  (cd "$work" && GOFLAGS='' GOTOOLCHAIN=local go mod download -json "$1@v$2" |
    sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
}

go_directive() { sed -n 's/^go \([0-9.]*\).*/\1/p' "$1"; }

# `go build -v` names each package as it compiles it; print a summary line at most every
# PROGRESS_EVERY seconds, so a cold build (minutes) shows it is moving without a flood.
# Errors and anything else go build says pass through unchanged.
progress() { # label
  local label=$1 line pkgs=0 mods=0 start=$SECONDS last=$SECONDS
  while IFS= read -r line; do
    case $line in
      "go: downloading "*) mods=$((mods + 1)) ;;
      *[[:space:]:]* | "#"* | "") echo "$line" >&2 ;;
      *) pkgs=$((pkgs + 1)) ;;
    esac
    if ((SECONDS - last >= ${PROGRESS_EVERY:-30})); then
      last=$SECONDS
      log "$label: $pkgs packages compiled, $mods modules downloaded, $((SECONDS - start)) s"
    fi
  done
  log "$label: done in $((SECONDS - start)) s ($pkgs packages compiled, $mods modules downloaded)"
}

kube_versions() { echo "${KUBE_VERSIONS//,/ }"; }

check_kube_version() { # version: one of KUBE_VERSIONS, or die naming them
  local v
  for v in $(kube_versions); do [ "$v" = "$1" ] && return; done
  die "Kubernetes $1 is not a version the lab supports; lab/versions.env KUBE_VERSIONS: $KUBE_VERSIONS"
}

kube_bin() { # version: where that release's binaries go (the default release's stay in .lab/bin)
  if [ "$1" = "$KUBE_VERSION" ]; then echo "$bin"; else echo "$bin/$1"; fi
}

KUBE_COMMANDS="kube-apiserver kube-scheduler kube-controller-manager kubeadm kubectl"
check_kube_components() { # each of KUBE_COMPONENTS is a command build_kube knows, or die naming them
  local c
  for c in ${KUBE_COMPONENTS:-}; do
    case " $KUBE_COMMANDS " in *" $c "*) ;; *) die "KUBE_COMPONENTS: $c is none of $KUBE_COMMANDS" ;; esac
  done
}

kube_components() { # version: the commands to build, KUBE_COMPONENTS's where it is set
  if [ -n "${KUBE_COMPONENTS:-}" ]; then
    echo "$KUBE_COMPONENTS"
  elif [ "$1" = "$KUBE_VERSION" ]; then
    echo "${KUBE_COMMANDS% kubectl}" # the venv's kubectl is the default release's
  else
    echo "$KUBE_COMMANDS"
  fi
}

# shellcheck source=lab/kube_stamp.sh
. "$root/lab/kube_stamp.sh"

build_kube() { # version
  local ver=$1 dest need=() c comps ldflags
  check_kube_version "$ver"
  dest=$(kube_bin "$ver")
  ldflags=$(kube_ldflags "$ver")
  read -r -a comps <<<"$(kube_components "$ver")"
  mkdir -p "$dest"
  # a binary stamped otherwise (.<binary>.ldflags) is linked again: from a warm Go build cache in seconds
  for c in "${comps[@]}"; do
    [ -x "$dest/$c" ] && [ "$(cat "$dest/.$c.version" 2>/dev/null)" = "$ver" ] &&
      [ "$(cat "$dest/.$c.ldflags" 2>/dev/null)" = "$ldflags" ] || need+=("$c")
  done
  [ ${#need[@]} -eq 0 ] && { log "kubernetes v$ver binaries cached (${dest#"$root"/})"; return; }
  local d="$work/kube-$ver" modfile
  [ "$ver" = "$KUBE_VERSION" ] && d="$work/kube"
  mkdir -p "$d"
  log "preparing module k8s.io/kubernetes v$ver (staging modules pinned to v0.${ver#1.})"
  modfile=$(gomod_of k8s.io/kubernetes "$ver")
  [ -n "$modfile" ] || die "could not download k8s.io/kubernetes v$ver"
  {
    echo "module gpusplit.lab/kube"
    echo
    echo "go $(go_directive "$modfile")"
    echo
    echo "require k8s.io/kubernetes v$ver"
    echo
    echo "replace ("
    sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 v0.'"${ver#1.}"'#p' "$modfile"
    echo ")"
  } >"$d/go.mod"
  use_go_for "$(go_directive "$modfile")"
  (cd "$d" && for c in "${need[@]}"; do
     log "building $c v$ver (a cold build takes many minutes on two cores)"
     go build -v -trimpath -ldflags "$ldflags" -o "$dest/$c" "k8s.io/kubernetes/cmd/$c" 2>&1 | progress "$c"
     echo "$ver" >"$dest/.$c.version"
     echo "$ldflags" >"$dest/.$c.ldflags"
   done)
}

# the releases `kube` and `all` build: K8S alone when it is set, else every one of KUBE_VERSIONS
build_kube_versions() {
  local v
  if [ -n "${K8S:-}" ]; then
    build_kube "$K8S"
  else
    for v in $(kube_versions); do build_kube "$v"; done
  fi
}

build_simple() { # name module-version pkg go-module-path
  local name=$1 ver=$2 pkg=$3 mod=$4
  stamp_ok "$name" "$ver" && { log "$name v$ver cached"; return; }
  local d="$work/$name" modfile godir
  mkdir -p "$d"
  # the go directive is the pinned module's own: the oldest Go that module builds with
  modfile=$(gomod_of "$mod" "$ver")
  [ -n "$modfile" ] || die "could not download $mod v$ver"
  godir=$(go_directive "$modfile")
  [ -n "$godir" ] || die "$mod v$ver: no go directive in its go.mod"
  printf 'module gpusplit.lab/%s\n\ngo %s\n\nrequire %s v%s\n' "$name" "$godir" "$mod" "$ver" >"$d/go.mod"
  use_go_for "$godir"
  log "building $name v$ver"
  (cd "$d" && go build -v -trimpath -ldflags "-s -w" -o "$bin/$name" "$pkg" 2>&1 | progress "$name")
  mark "$name" "$ver"
}

# The NVIDIA Container Toolkit's programs (module github.com/NVIDIA/nvidia-container-toolkit,
# directory cmd/<name>), for the hardening matrix. They need cgo (go-nvml opens libnvidia-ml with
# dlopen), so a C compiler; linked as the toolkit's own Makefile links them (NVML's symbols left
# for run time, so no driver is needed to build or to start them) with the version stamped in
# (internal/info.version, what `--version` prints). Only nvidia-container-cli (C,
# libnvidia-container) touches the driver; the matrix puts a stand-in in its place.
TOOLKIT_MODULE=github.com/NVIDIA/nvidia-container-toolkit
# the hook, the runtime and nvidia-ctk for the matrix; the installer (the GPU Operator's toolkit
# container program) with the rest of what it installs: nvidia-cdi-hook and the runtime's .cdi and
# .legacy variants
TOOLKIT_COMMANDS=(nvidia-container-runtime-hook nvidia-container-runtime nvidia-ctk nvidia-ctk-installer
  nvidia-cdi-hook nvidia-container-runtime.cdi nvidia-container-runtime.legacy)
build_toolkit() {
  local ver=$NVIDIA_CONTAINER_TOOLKIT_VERSION need=() c
  for c in "${TOOLKIT_COMMANDS[@]}"; do stamp_ok "$c" "$ver" || need+=("$c"); done
  [ ${#need[@]} -eq 0 ] && { log "nvidia-container-toolkit v$ver binaries cached (${TOOLKIT_COMMANDS[*]})"; return; }
  command -v "${CC:-cc}" >/dev/null ||
    die "the NVIDIA Container Toolkit needs cgo and there is no C compiler (${CC:-cc}): install one (Debian: apt-get install gcc libc6-dev); .ci/run does this"
  local d="$work/nvidia-container-toolkit" modfile godir
  mkdir -p "$d"
  modfile=$(gomod_of "$TOOLKIT_MODULE" "$ver")
  [ -n "$modfile" ] || die "could not download $TOOLKIT_MODULE v$ver"
  godir=$(go_directive "$modfile")
  [ -n "$godir" ] || die "$TOOLKIT_MODULE v$ver: no go directive in its go.mod"
  printf 'module gpusplit.lab/nvidia-container-toolkit\n\ngo %s\n\nrequire %s v%s\n' "$godir" "$TOOLKIT_MODULE" "$ver" >"$d/go.mod"
  use_go_for "$godir"
  (cd "$d" && for c in "${need[@]}"; do
     log "building $c v$ver"
     # (CGO_CFLAGS: go's default, less the warnings about NVML functions the toolkit never calls)
     CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" go build -v -trimpath -o "$bin/$c" \
       -ldflags "-s -w '-extldflags=-Wl,--export-dynamic -Wl,--unresolved-symbols=ignore-in-object-files -Wl,-z,lazy' -X $TOOLKIT_MODULE/internal/info.version=$ver" \
       "$TOOLKIT_MODULE/cmd/$c" 2>&1 | progress "$c"
     mark "$c" "$ver"
   done)
}

gate_sources() {
  # tests/unit/plugins/module_utils/_control_plane/test_gates.py reads pkg/features/kube_features.go
  # of these releases (and of KUBE_VERSION, which build_kube downloads) from the Go module cache
  local v mods=()
  for v in ${FEATURE_GATE_SOURCES//,/ }; do mods+=("k8s.io/kubernetes@v$v"); done
  (cd "$work" && GOFLAGS='' GOTOOLCHAIN=local go mod download "${mods[@]}" "k8s.io/kubernetes@v$KUBE_VERSION") ||
    die "could not download the feature-gate sources ${mods[*]}"
  log "feature-gate sources in the Go module cache ($(go env GOMODCACHE)): ${mods[*]} k8s.io/kubernetes@v$KUBE_VERSION"
}

cmd=${1:-all}
[ -z "${K8S:-}" ] || check_kube_version "$K8S"
check_kube_components
case "$cmd" in
  kube | etcd | kwok | toolkit | gate-sources | all | go | node) ensure_go ;;
  *) echo "usage: $0 [all|kube|etcd|kwok|toolkit|gate-sources|go|node]" >&2; exit 2 ;;
esac
case "$cmd" in
  go) log "go: $(go version) (GO_TOOLCHAIN=$GO_TOOLCHAIN when a module needs a newer one)" ;;
  kube) build_kube_versions ;;
  etcd) build_simple etcd "$ETCD_VERSION" go.etcd.io/etcd/server/v3 go.etcd.io/etcd/server/v3 ;;
  kwok) build_simple kwok "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok ;;
  toolkit) build_toolkit ;;
  node) "$root/lab/build_node.sh" all ;;
  gate-sources) gate_sources ;;
  all)
    build_simple etcd "$ETCD_VERSION" go.etcd.io/etcd/server/v3 go.etcd.io/etcd/server/v3
    build_simple kwok "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok
    build_kube_versions
    build_toolkit
    gate_sources
    "$root/lab/build_node.sh" all ;; # the real node: kubelet, containerd, runc, CNI plugins (lab/node.py)
esac
