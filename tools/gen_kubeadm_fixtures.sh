#!/usr/bin/env bash
# Generate the kubeadm fixtures under tests/fixtures/kubeadm/ from a real kubeadm binary.
#
#   tools/gen_kubeadm_fixtures.sh [KUBEADM] [OUTDIR]
#
# KUBEADM defaults to .lab/bin/kubeadm (built by lab/build.sh), OUTDIR to tests/fixtures/kubeadm.
# Nothing here touches the host's /etc/kubernetes: every phase runs with --dry-run and
# KUBEADM_INIT_DRYRUN_DIR pointing at a scratch directory (kubeadm v1.37
# cmd/kubeadm/app/constants/constants.go: GetDryRunDir honours that variable).
#
# What it writes (all of it generated; never edit these files by hand, re-run this script):
#   <scenario>/config.yaml                    the kubeadm config given to kubeadm (written below)
#   <scenario>/kube-apiserver.yaml            static-pod manifests from
#   <scenario>/kube-controller-manager.yaml     `kubeadm init phase control-plane all --dry-run`
#   <scenario>/kube-scheduler.yaml
#   <scenario>/kubeadm-config.configmap.yaml  the ConfigMap kube-system/kubeadm-config exactly as
#                                             `kubeadm init phase upload-config kubeadm --dry-run`
#                                             would create it (needs certs + admin.conf in the
#                                             dry-run dir, so those phases run first, in scratch)
#   v1beta3/REJECTED.txt                      what kubeadm says to a v1beta3 ClusterConfiguration
#   GENERATED.txt                             kubeadm version and the scenarios
#
# Scenarios:
#   v1beta4            a plain v1.37.2 control plane (one extraArg, no feature gates)
#   v1beta4-1.36-gates a v1.36.3 control plane that was given GenericWorkload, GangScheduling,
#                      WorkloadAwarePreemption and --runtime-config=scheduling.k8s.io/v1alpha2=true,
#                      i.e. what a 1.36 gang-scheduling cluster looks like before its 1.37 upgrade
#
# Volumes in the manifests depend on which CA directories exist on the generating host
# (/etc/pki, /etc/ca-certificates, ...); the tests do not depend on them.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
kubeadm=${1:-$root/.lab/bin/kubeadm}
out=${2:-$root/tests/fixtures/kubeadm}

[ -x "$kubeadm" ] || { echo "kubeadm binary not found or not executable: $kubeadm" >&2; exit 2; }

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

write_config() { # scenario
  case "$1" in
    v1beta4)
      cat <<'EOF'
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: 192.0.2.10
  bindPort: 6443
nodeRegistration:
  name: gpu-cp-0
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: v1.37.2
clusterName: gpusplit-fixture
controlPlaneEndpoint: cp.gpusplit.invalid:6443
networking:
  podSubnet: 10.244.0.0/16
  serviceSubnet: 10.96.0.0/12
apiServer:
  extraArgs:
  - name: audit-log-maxage
    value: "7"
EOF
      ;;
    v1beta4-1.36-gates)
      cat <<'EOF'
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: 192.0.2.10
  bindPort: 6443
nodeRegistration:
  name: gpu-cp-0
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: v1.36.3
clusterName: gpusplit-fixture
controlPlaneEndpoint: cp.gpusplit.invalid:6443
networking:
  podSubnet: 10.244.0.0/16
  serviceSubnet: 10.96.0.0/12
apiServer:
  extraArgs:
  - name: feature-gates
    value: GenericWorkload=true,GangScheduling=true,WorkloadAwarePreemption=true
  - name: runtime-config
    value: scheduling.k8s.io/v1alpha2=true
controllerManager:
  extraArgs:
  - name: feature-gates
    value: GenericWorkload=true,GangScheduling=true,WorkloadAwarePreemption=true
scheduler:
  extraArgs:
  - name: feature-gates
    value: GenericWorkload=true,GangScheduling=true,WorkloadAwarePreemption=true
EOF
      ;;
    v1beta3)
      cat <<'EOF'
apiVersion: kubeadm.k8s.io/v1beta3
kind: ClusterConfiguration
kubernetesVersion: v1.37.2
clusterName: gpusplit-fixture
apiServer:
  extraArgs:
    audit-log-maxage: "7"
EOF
      ;;
  esac
}

# kubeadm prints each object of a dry run after "[dryrun] Attached object:"; keep the ConfigMap's.
extract_configmap() {
  awk '
    /Would perform action CREATE on resource "configmaps"/ { want = 1; next }
    want && /\[dryrun\] Attached object:/ { grab = 1; next }
    grab && /^$/ { exit }
    grab { print }
  '
}

gen_scenario() { # scenario
  local name=$1 dir="$out/$1" dry="$scratch/$1"
  mkdir -p "$dir" "$dry"
  write_config "$name" >"$dir/config.yaml"
  export KUBEADM_INIT_DRYRUN_DIR="$dry"
  "$kubeadm" init phase control-plane all --config "$dir/config.yaml" --dry-run >"$scratch/$name.control-plane.log" 2>&1 || {
    cat "$scratch/$name.control-plane.log" >&2
    return 1
  }
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    install -m 0644 "$dry/$c.yaml" "$dir/$c.yaml"
  done
  "$kubeadm" init phase certs all --config "$dir/config.yaml" --dry-run >/dev/null 2>&1
  "$kubeadm" init phase kubeconfig admin --config "$dir/config.yaml" --dry-run >/dev/null 2>&1
  "$kubeadm" init phase upload-config kubeadm --config "$dir/config.yaml" --dry-run >"$scratch/$name.upload.log" 2>&1
  extract_configmap <"$scratch/$name.upload.log" >"$dir/kubeadm-config.configmap.yaml"
  [ -s "$dir/kubeadm-config.configmap.yaml" ] || { echo "no ConfigMap in the upload-config dry run" >&2; return 1; }
  unset KUBEADM_INIT_DRYRUN_DIR
}

mkdir -p "$out"
gen_scenario v1beta4
gen_scenario v1beta4-1.36-gates

# v1beta3: kubeadm v1.37 refuses it (cmd/kubeadm/app/util/config/common.go: "v1.37: only v1beta4
# config"). Record what it says instead of a manifest set.
mkdir -p "$out/v1beta3"
write_config v1beta3 >"$out/v1beta3/config.yaml"
set +e
KUBEADM_INIT_DRYRUN_DIR="$scratch/v1beta3" "$kubeadm" init phase control-plane all \
  --config "$out/v1beta3/config.yaml" --dry-run >"$scratch/v1beta3.log" 2>&1
rc=$?
set -e
if [ "$rc" -eq 0 ]; then
  echo "kubeadm accepted v1beta3; add it as a scenario" >&2
  exit 1
fi
{
  echo "# kubeadm $("$kubeadm" version -o short) exit status $rc for config.yaml (v1beta3):"
  grep -v '^To see the stack trace' "$scratch/v1beta3.log"
} >"$out/v1beta3/REJECTED.txt"

{
  echo "kubeadm: $("$kubeadm" version -o short)"
  echo "generator: tools/gen_kubeadm_fixtures.sh"
  echo "scenarios: v1beta4 v1beta4-1.36-gates v1beta3 (rejected)"
} >"$out/GENERATED.txt"

echo "fixtures written to $out" >&2
