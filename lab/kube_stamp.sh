# shellcheck shell=bash
# Sourced by lab/build.sh and lab/build_node.sh: the version stamp of a Kubernetes binary built from its Go
# module, as Kubernetes' own build sets it (hack/lib/version.sh: gitMinor is the minor alone, 36 for 1.36.3).
kube_ldflags() { # version
  local minor=${1#*.}
  minor=${minor%%.*}
  echo "-s -w -X k8s.io/component-base/version.gitVersion=v$1 -X k8s.io/component-base/version.gitMajor=${1%%.*} -X k8s.io/component-base/version.gitMinor=$minor"
}
