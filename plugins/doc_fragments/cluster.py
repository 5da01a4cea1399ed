# Copyright: gpusplit contributors
# Apache-2.0
"""The options every cluster-side module of gpusplit shares."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path to the kubeconfig of the cluster. By default the client's own lookup
        (C(KUBECONFIG), then C(~/.kube/config)).
    type: path
  context:
    description: The kubeconfig context to use.
    type: str
requirements:
  - kubernetes (Python client)
notes:
  - "Runs where the kubeconfig is, normally the controller (C(delegate_to: localhost), C(run_once))."
"""
