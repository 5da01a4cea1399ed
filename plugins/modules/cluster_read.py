#!/usr/bin/python
# Copyright: gpusplit contributors
# Apache-2.0
"""Ansible module gpusplit.k8s.cluster_read: several kinds read from the cluster in one module execution."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cluster_read
short_description: Read several kinds of objects from the cluster in one step
version_added: "0.1.0"
description:
  - Lists the objects of each query (a kind, optionally label selectors and a namespace) through one kubernetes
    client, and returns them by the query's name. One task of it replaces a C(kubernetes.core.k8s_info) task per
    kind, each of which is a module execution that loads the client and reads the API's discovery again.
  - Every query is checked before the first request; a bad one fails the module naming it. A kind the cluster does
    not serve, or a request that fails, fails the module naming the query.
  - Read-only. Run it on the controller.
notes:
  - "Measured against C(kubernetes.core.k8s_info) (a task per kind) on the lab at 200 nodes, reading the labelled
    Nodes, the split DaemonSets and 400 pods (2026-12-05, 2 cores shared, C(tools/bench_cluster_modules.py), two
    runs each): 1.6 to 2.2 s of controller CPU against 5.9 to 8.1 s, 1 module execution against 3, the same 3
    requests. In a fresh environment its client reads every API group's discovery first: 27 requests against 7.
    See docs/performance.md."
author:
  - gpusplit team (!UNKNOWN)
options:
  queries:
    description:
      - Name of the result to its query. A query has C(api_version) and C(kind) (both required),
        C(label_selectors) (a list of selectors, all of which must match, as in C(kubernetes.core.k8s_info)) and
        C(namespace) (for a namespaced kind; every namespace when left out) and C(fields).
      - C(fields) is a list of paths such as C(metadata.name) or C(status.phase) (keys separated by dots). Where
        it is given, each object comes back with only those paths (and its C(apiVersion) and C(kind)); what a
        path reaches is kept whole, and a path an object does not have is left out of it. A read at fleet size
        costs the controller mostly in handling the result, in proportion to its size, so a query should keep
        only what its caller reads.
      - C(metadata.managedFields) are left out of every object (as C(kubectl get) does) unless C(fields) names
        C(metadata.managedFields); then C(field_manager) (a field manager's name) keeps only that manager's
        entries of them, which is what a caller needs to tell what its own server-side applies own (a node's
        entries of its kubelet and controllers are most of them).
    type: dict
    required: true
extends_documentation_fragment:
  - gpusplit.k8s.cluster_auth
  - gpusplit.k8s.attributes.check_mode_no_diff
"""

EXAMPLES = r"""
- name: Read the split device-plugin DaemonSets and every pod, in one step
  gpusplit.k8s.cluster_read:
    queries:
      daemonsets:
        api_version: apps/v1
        kind: DaemonSet
        label_selectors:
          - app.kubernetes.io/managed-by=gpusplit
      pods:  # only what the next task reads of each pod
        api_version: v1
        kind: Pod
        fields:
          - metadata.namespace
          - metadata.name
          - status.phase
  register: live
  delegate_to: localhost
  run_once: true

- name: Use them
  ansible.builtin.debug:
    msg: "{{ live.resources.daemonsets | length }} DaemonSets, {{ live.counts.pods }} pods"
"""

RETURN = r"""
resources:
  description:
    - Per query name, the objects found (each with its C(apiVersion) and C(kind)), as the API returns them without
      C(metadata.managedFields), or with only the query's C(fields).
  returned: success
  type: dict
  sample: {daemonsets: [], pods: []}
counts:
  description: Per query name, how many objects were found.
  returned: success
  type: dict
  sample: {daemonsets: 0, pods: 12}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import fail_on_refusal
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.apply import Cluster
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.client import CLUSTER_ARGS, require_kubernetes
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.read import check_queries, read_queries


def main():
    module = AnsibleModule(
        argument_spec={"queries": {"type": "dict", "required": True}, **CLUSTER_ARGS},
        supports_check_mode=True,
    )
    require_kubernetes(module)
    params = module.params
    with fail_on_refusal(module, changed=False):
        checked = check_queries(params["queries"])  # refused before the cluster is reached
        resources = read_queries(lambda: Cluster(params["kubeconfig"], params["context"]), checked)
    module.exit_json(
        changed=False, resources=resources, counts={name: len(objs) for name, objs in resources.items()}
    )


if __name__ == "__main__":
    main()
