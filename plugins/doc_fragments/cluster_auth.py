# Copyright: gpusplit contributors
# Apache-2.0
"""How gpusplit's cluster modules find the cluster: kubeconfig and context with the fallbacks of
plugins/module_utils/_k8s/client.py, and the action group gpusplit.k8s.cluster."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path to the kubeconfig of the cluster, on the host the module runs on (normally the controller).
      - When not set, the environment variable E(K8S_AUTH_KUBECONFIG), as for C(kubernetes.core); when that is
        not set either, the kubernetes client's own default, the files listed in E(KUBECONFIG), else
        C(~/.kube/config).
      - A kubeconfig named here or in E(K8S_AUTH_KUBECONFIG) that does not exist, or no kubeconfig at all, fails
        the module before any request, saying which was looked for.
      - One path; unlike C(kubernetes.core) a list of files or a dictionary is not accepted here.
    type: path
  context:
    description:
      - The kubeconfig context to use.
      - When not set, the environment variable E(K8S_AUTH_CONTEXT); when that is not set either, the
        kubeconfig's current context.
    type: str
attributes:
  action_group:
    description: Use C(group/gpusplit.k8s.cluster) in C(module_defaults) to set O(kubeconfig) and O(context) once.
    support: full
    membership:
      - gpusplit.k8s.cluster
requirements:
  - kubernetes (Python client)
notes:
  - "Runs where the kubeconfig is, normally the controller (C(delegate_to: localhost), C(run_once))."
  - >-
    Set the cluster once for every task:
    C(module_defaults: {group/gpusplit.k8s.cluster: {kubeconfig: ..., context: ...}}), or export
    E(K8S_AUTH_KUBECONFIG) and E(K8S_AUTH_CONTEXT), which C(kubernetes.core) reads too.
"""
