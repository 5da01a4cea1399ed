#!/usr/bin/python
# Copyright: gpusplit contributors
# Apache-2.0

DOCUMENTATION = r"""
module: node_taints
short_description: Set and take off taints on many nodes in one step
version_added: "0.1.0"
description:
  - Reads the cluster's Node objects once and, for each node listed in O(nodes), sets the taints of its
    C(present) and takes off those of its C(absent). Only the nodes whose taints change
    are patched; a re-run that changes nothing sends no write.
  - A taint is known by its key and effect, as the API server and C(kubectl taint) know it. Setting one
    whose key and effect the node already has replaces its value in place; taking one off removes the
    node's taint of that key and effect whatever its value. Every other taint of the node is kept, in
    its order.
  - Each patch is a JSON patch that first tests the node's C(resourceVersion) as read. A node changed by
    someone else in between is read again and worked out again (3 attempts), so no one else's taint is
    overwritten.
  - One module execution for the whole fleet, where C(kubernetes.core.k8s_taint) is one per node.
  - Every problem of O(nodes) is refused at once before the cluster is read, and a listed node that the
    cluster does not have is refused before any node is patched.
notes:
  - "Measured against C(kubernetes.core.k8s_taint) in a loop over the nodes on the lab at 200 nodes (2026-12-05, 2
    cores shared, C(tools/bench_cluster_modules.py), two runs each): tainting every node 2.9 to 3.1 s of controller
    CPU against 312 to 333 s, 201 requests against 400; an unchanged re-run 1 request against 200, 2.3 to 2.4 s
    against 267 to 285 s, no write from either. See docs/performance.md."
options:
  nodes:
    description:
      - The nodes to change, each at most once. Each is a mapping with C(name) (the node's name), C(present)
        (taints the node must have, each with C(key), C(value) and C(effect)) and C(absent) (taints the node
        must not have, C(key) and C(effect); a C(value) is not compared). C(present) and C(absent) default to
        none.
      - C(effect) is one of C(NoSchedule), C(PreferNoSchedule), C(NoExecute).
    type: list
    elements: dict
    required: true
extends_documentation_fragment:
  - gpusplit.k8s.cluster_auth
  - gpusplit.k8s.attributes.check_mode_and_diff
author:
  - gpusplit team (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Keep pods without a toleration off the GPU nodes, and let them back on gpu-07
  gpusplit.k8s.node_taints:
    nodes:
      - name: gpu-01
        present: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
      - name: gpu-02
        present: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
      - name: gpu-07
        absent: [{key: nvidia.com/gpu, effect: NoSchedule}]
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
nodes:
  description:
    - The nodes whose taints changed (in check mode, would change), in the order given, each with its
      C(name) and its taints C(before) and C(after).
  returned: success
  type: list
  elements: dict
  sample: [{name: gpu-07, before: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}], after: []}]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, fail_on_refusal
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.client import (
    API_ERRORS,
    CLUSTER_ARGS,
    api_client,
    error_text,
    require_kubernetes,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.taints import (
    NodeTaintsApi,
    apply_changes,
    check_requests,
    diff_entry,
)


def main():
    module = AnsibleModule(
        # each node's keys are checked by check_requests, every problem at once
        argument_spec={"nodes": {"type": "list", "elements": "dict", "required": True}, **CLUSTER_ARGS},
        supports_check_mode=True,
    )
    require_kubernetes(module)
    params = module.params
    with fail_on_refusal(module, changed=False):
        checked = check_requests(params["nodes"])  # refused before the cluster is reached
        changes = _apply(params, checked, module.check_mode)
    result = {
        "changed": bool(changes),
        "nodes": [{k: c[k] for k in ("name", "before", "after")} for c in changes],
    }
    if module._diff:
        result["diff"] = [diff_entry(c) for c in changes]
    module.exit_json(**result)


def _apply(params, checked, check_mode):
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    try:
        api = NodeTaintsApi(client.CoreV1Api(api_client(params)), ApiException)
        return apply_changes(api, checked, check_mode)
    except API_ERRORS as exc:
        raise GpusplitError(f"reading or patching the nodes failed: {error_text(exc)}") from exc


if __name__ == "__main__":
    main()
