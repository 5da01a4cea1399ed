#!/usr/bin/python
# Copyright: gpusplit contributors
# Apache-2.0

DOCUMENTATION = r"""
module: cluster_apply
short_description: Server-side apply a batch of Kubernetes objects, writing only what differs
version_added: "0.1.0"
description:
  - Applies a list of Kubernetes objects with server-side apply under one field manager, in one
    module run (one LIST per kind, then a PATCH only for objects whose live state lacks a desired
    field, or still has a field this field manager applied before and no longer sends; the apply
    removes that field). A re-run against an unchanged cluster sends no write request at all.
  - Optionally prunes objects that carry the ownership label C(app.kubernetes.io/managed-by)
    but are no longer in the desired list (for example the device-plugin DaemonSet of a node
    that is no longer split).
  - Namespaces (and CRDs), then other cluster-scoped objects, then namespaced objects are applied
    in that order, each phase answered before the next is sent, so a Namespace in the batch exists
    before the objects that live in it.
  - In check mode every change is sent as a server dry-run (C(dryRun=All)), so the API server
    validates it and nothing is stored. A dry-run creates no Namespace, so objects in a Namespace
    that the same batch creates cannot be dry-run; they are reported as created (and in
    C(not_dry_run)) without a request, with a warning, and validated on the real run.
  - Uses the kubernetes Python client, like C(kubernetes.core); run it on the controller.
notes:
  - "Measured against C(kubernetes.core.k8s) with C(apply) and C(server_side_apply) (one C(definition)) on the lab,
    200 split DaemonSets (2026-12-05, 2 cores shared, C(tools/bench_cluster_modules.py), two runs each): first
    run 201 requests against 600 and 2.8 to 3.5 s of controller CPU against 6.6 to 9.2 s; unchanged re-run 1
    request and no write against 600 requests and 200 writes, 2.0 to 3.4 s against 6.9 to 8.8 s. See
    docs/performance.md."
options:
  objects:
    description: The desired objects (each with apiVersion, kind, metadata.name).
    type: list
    elements: dict
    required: true
  field_manager:
    description: The server-side apply field manager.
    type: str
    default: gpusplit
  force_conflicts:
    description: Take over fields that another manager owns.
    type: bool
    default: true
  prune:
    description:
      - Kinds to prune. Each entry needs C(api_version), C(kind) and a C(label_selector) that
        includes C(app.kubernetes.io/managed-by); C(namespace) limits it to one namespace.
    type: list
    elements: dict
    default: []
  parallel:
    description: How many apply requests run at once, from 1 to 64 (anything else is refused before any request).
    type: int
    default: 8
extends_documentation_fragment:
  - gpusplit.k8s.attributes.check_mode_and_diff
  - gpusplit.k8s.cluster_auth
author:
  - gpusplit team (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Apply the split device-plugin DaemonSets and prune those of nodes no longer split
  gpusplit.k8s.cluster_apply:
    kubeconfig: "{{ gpusplit_kubeconfig }}"
    objects: "{{ gpusplit_fleet_plan | gpusplit.k8s.render_fleet }}"
    prune:
      - api_version: apps/v1
        kind: DaemonSet
        namespace: kube-system
        label_selector: app.kubernetes.io/managed-by=gpusplit,app.kubernetes.io/name=gpusplit-device-plugin
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
created:
  description: Objects that did not exist and were created (or would be, in check mode).
  returned: always
  type: list
  elements: str
updated:
  description: Objects whose live state lacked a desired field, or kept a field gpusplit no longer sends, and were applied.
  returned: always
  type: list
  elements: str
unchanged:
  description: How many objects already matched and were not touched.
  returned: always
  type: int
pruned:
  description: Owned objects deleted because they are no longer desired.
  returned: always
  type: list
  elements: str
not_dry_run:
  description:
    - Check mode only. Objects in a Namespace that this batch creates, reported as created without
      a server dry-run (the apiserver refuses a dry-run in a namespace that does not exist yet).
  returned: always
  type: list
  elements: str
api_writes:
  description: Write requests sent (dry-run requests are not counted).
  returned: always
  type: int
"""

import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import check_number, fail_on_refusal
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.apply import Cluster, run
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.client import (
    API_ERRORS,
    CLUSTER_ARGS,
    error_text,
    require_kubernetes,
)

# more requests at once only queue at the API server's client limits
MAX_PARALLEL = 64


def main():
    module = AnsibleModule(
        argument_spec={
            "objects": {"type": "list", "elements": "dict", "required": True},
            "field_manager": {"type": "str", "default": "gpusplit"},
            "force_conflicts": {"type": "bool", "default": True},
            "prune": {"type": "list", "elements": "dict", "default": []},
            "parallel": {"type": "int", "default": 8},
            **CLUSTER_ARGS,
        },
        supports_check_mode=True,
    )
    require_kubernetes(module)
    p = module.params
    with fail_on_refusal(module):  # ApplyError: refused before any request was sent
        check_number(p["parallel"], "parallel", 1, MAX_PARALLEL, integer=True)
        try:
            cluster = Cluster(p["kubeconfig"], p["context"])
            result = run(
                cluster,
                p["objects"],
                field_manager=p["field_manager"],
                prune=p["prune"],
                check_mode=module.check_mode,
                force=p["force_conflicts"],
                parallel=p["parallel"],
            )
        except API_ERRORS as exc:  # the server's own message; a bug in the logic is not one of these
            module.fail_json(
                msg=f"applying to the cluster failed: {error_text(exc)}", exception=traceback.format_exc()
            )
    for warning in result.pop("warnings", []):
        module.warn(warning)
    diff = result.pop("diff")
    if module._diff:
        result["diff"] = diff
    module.exit_json(**result)


if __name__ == "__main__":
    main()
