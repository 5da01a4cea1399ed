#!/usr/bin/python
# Copyright: gpusplit contributors
# Apache-2.0

DOCUMENTATION = r"""
module: device_taint_rule
short_description: Create, change or remove DeviceTaintRules and report what the controller says
version_added: "0.1.0"
description:
  - Server-side applies one DeviceTaintRule (as the playbook C(isolate_gpu.yml) and the
    role C(gpu_resplit) render them), or deletes it, and waits until
    kube-controller-manager has written its C(EvictionInProgress) condition for the rule's
    present generation.
  - With effect C(None) that condition says how many published and allocated devices the rule
    selects and how many pods in how many namespaces would be evicted with C(NoExecute); the
    numbers come back parsed in C(report.impact). The controller computes them once per
    generation, so an unchanged rule reports its old numbers (see C(since)); C(refresh=true)
    recreates it.
  - With effect C(NoExecute), C(wait_eviction=true) also waits until the eviction is over
    (condition status C(False)).
  - The rule is written in the group/version the API server serves (I(api_version)) - C(resource.k8s.io/v1) on
    Kubernetes 1.37, C(resource.k8s.io/v1beta2) on 1.36 with the gate C(DRADeviceTaintRules) and that
    runtime-config on; a definition given in either is written in the one served (both have the same
    shape). Where the API server serves neither, the module fails before any change, naming the gates and
    C(--runtime-config) that serve one on the cluster's release.
  - In check mode the apply is a server dry-run and nothing is waited for.
  - With I(definitions), many rules in one step, one module execution for a fleet rather than one per
    rule. Every rule is checked before the first request, then each phase (the C(None) report of
    I(report_first), the apply, the wait) is done for all of them before the next, so the waits for the
    controller overlap. The result is then RV(rules), one entry per rule in the order given.
options:
  definition:
    description: The DeviceTaintRule. Required with I(state=present), unless I(definitions) is given.
    type: dict
  definitions:
    description:
      - Many DeviceTaintRules, each as I(definition) (with C(metadata.name)); instead of I(definition) and
        I(name). With I(state=absent) only their names are read. An empty list changes nothing.
      - A name given twice, or any rule of the wrong shape, is refused before any request, each refusal
        naming the rule's place in the list (C(definitions[2])).
    type: list
    elements: dict
  name:
    description: The rule's name; defaults to the name in I(definition). Enough for I(state=absent).
    type: str
  state:
    description: Whether the rule exists.
    type: str
    choices: [present, absent]
    default: present
  wait:
    description: Wait for the controller's condition on the rule's present generation.
    type: bool
    default: true
  wait_eviction:
    description: With effect NoExecute, also wait until the condition is C(False) (eviction over).
    type: bool
    default: false
  wait_timeout:
    description: Seconds to wait, a whole number from 0 to 86400 (anything else is refused before any request).
    type: int
    default: 90
  refresh:
    description: Recreate a rule that is already as desired, so that the controller computes its impact again.
    type: bool
    default: false
  report_first:
    description:
      - When no rule of that name exists yet and the effect asked for is not C(None), create the rule with
        effect C(None) first, wait for the controller's report (returned as C(first_report)), and only then
        change it to the effect asked for. The impact of C(NoExecute) is then known and shown before any pod
        is evicted.
      - Ignored in check mode (one server dry-run of the rule as asked).
    type: bool
    default: true
  field_manager:
    description: The server-side apply field manager.
    type: str
    default: gpusplit
  api_version:
    description:
      - The group/version to write and read the rules in, C(resource.k8s.io/v1) or C(resource.k8s.io/v1beta2).
        Default - the first of them the API server serves (discovery). One the API server does not serve is
        refused before any change.
    type: str
extends_documentation_fragment:
  - gpusplit.k8s.cluster_auth
  - gpusplit.k8s.attributes.check_mode_no_diff
author:
  - gpusplit team (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Report what isolating GPU gpu-3 of node gpu-a would evict (effect None)
  gpusplit.k8s.device_taint_rule:
    kubeconfig: "{{ gpusplit_kubeconfig }}"
    definition: &isolate_gpu_3
      apiVersion: resource.k8s.io/v1
      kind: DeviceTaintRule
      metadata:
        name: gpusplit-isolate-gpu-a-gpu-3
        labels:
          app.kubernetes.io/managed-by: gpusplit
          gpusplit.io/taint-purpose: isolate
      spec:
        deviceSelector: {driver: gpu.nvidia.com, pool: gpu-a, device: gpu-3}
        taint: {key: gpusplit.io/unhealthy, value: ecc, effect: None}
  register: isolation

- name: Evict its pods
  gpusplit.k8s.device_taint_rule:
    definition: "{{ isolation_rule | combine({'spec': {'taint': {'effect': 'NoExecute'}}}, recursive=true) }}"
    wait_eviction: true
  vars:
    isolation_rule: *isolate_gpu_3

- name: Give the GPU back
  gpusplit.k8s.device_taint_rule:
    name: gpusplit-isolate-gpu-a-gpu-3
    state: absent

- name: Keep new claims off the moving devices of every node at once (one module execution)
  gpusplit.k8s.device_taint_rule:
    definitions: "{{ fence.dra_rules }}"
  register: fenced
"""

RETURN = r"""
name:
  description: The rule's name.
  returned: without I(definitions)
  type: str
action:
  description: created, updated, recreated, unchanged, deleted or absent.
  returned: without I(definitions)
  type: str
rule:
  description: The live rule after the change (the dry-run result in check mode; null when absent).
  returned: without I(definitions)
  type: dict
first_report:
  description:
    - The controller's report on the rule with effect C(None), made before the effect asked for
      (see I(report_first)); null otherwise.
  returned: without I(definitions)
  type: dict
report:
  description:
    - C(effect), C(current) (the condition belongs to the present generation), C(status), C(reason),
      C(message), C(since) and C(impact) (C(published_devices), C(allocated_devices),
      C(pods_would_be_evicted), C(pods_pending_eviction), C(namespaces), C(pods_evicted); null when
      the message does not say).
  returned: without I(definitions)
  type: dict
rules:
  description:
    - With I(definitions), one entry per rule in the order given, each with C(name), C(action), C(changed),
      C(rule), C(report) and C(first_report) as above. Also on a failure after a change (which rules were
      changed, and where the controller did not report in time).
  returned: with I(definitions)
  type: list
  elements: dict
"""

import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane import api_versions
from ansible_collections.gpusplit.k8s.plugins.module_utils._dra import taint_rules
from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import fail_on_refusal
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.apply import Cluster
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.client import (
    API_ERRORS,
    CLUSTER_ARGS,
    error_text,
    require_kubernetes,
)

OPTIONS = ("state", "wait", "wait_eviction", "wait_timeout", "refresh", "report_first", "field_manager")


def served_version(cluster, requested=None):
    """The group/version to write the rules in: ``requested`` where the API server serves it, else the first of
    api_versions.APIS["device_taint_rule"] it serves; ApiVersionError (before any change) naming the gates and
    runtime-config of the cluster's release otherwise. Discovery only: the dynamic client's resource lookup."""
    from kubernetes.dynamic.exceptions import (
        ResourceNotFoundError,
    )  # guarded: only a module's run reaches here

    served = {}
    for group_version in api_versions.APIS["device_taint_rule"]["versions"]:
        try:
            cluster.resource(group_version, taint_rules.KIND)
        except ResourceNotFoundError:
            continue
        served[group_version] = {taint_rules.KIND: {}}
    try:
        release = cluster.client.version["kubernetes"]["gitVersion"]
    except (AttributeError, KeyError, TypeError):
        release = None
    return api_versions.chosen_version("device_taint_rule", requested, served, release)


def in_version(requests, group_version):
    """``requests`` with each definition's apiVersion set to ``group_version`` (the same shape in both)."""
    return [
        (name, definition if definition is None else {**definition, "apiVersion": group_version})
        for name, definition in requests
    ]


def run(module, cluster):
    """Refusals (taint_rules.checked, then the version the cluster serves) come before the first change; the
    requests' own errors are the caller's. One rule: its result fields; ``definitions``: ``rules``, one result
    per rule."""
    p = module.params
    requests = taint_rules.checked(p)
    single = p.get("definitions") is None
    group_version = served_version(cluster, p.get("api_version")) if requests else None
    requests = in_version(requests, group_version)
    try:
        results = taint_rules.run_rules(
            taint_rules.ClusterRules(cluster, group_version) if requests else None,
            requests,
            {k: p[k] for k in OPTIONS},
            check_mode=module.check_mode,
        )
    except taint_rules.RuleWaitError as exc:
        failed = dict(exc.result)
        if single and failed.get("rules"):
            failed.update(failed.pop("rules")[0])
            failed["changed"] = exc.result.get("changed", True)
        module.fail_json(**failed)
    if single:
        return results[0]
    return {"changed": any(r["changed"] for r in results), "rules": results}


def main():
    module = AnsibleModule(
        argument_spec={
            "definition": {"type": "dict"},
            "definitions": {"type": "list", "elements": "dict"},
            "name": {"type": "str"},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "wait": {"type": "bool", "default": True},
            "wait_eviction": {"type": "bool", "default": False},
            "wait_timeout": {"type": "int", "default": 90},
            "refresh": {"type": "bool", "default": False},
            "report_first": {"type": "bool", "default": True},
            "field_manager": {"type": "str", "default": "gpusplit"},
            "api_version": {"type": "str"},
            **CLUSTER_ARGS,
        },
        required_if=[("state", "present", ("definition", "definitions"), True)],
        mutually_exclusive=[("definitions", "definition"), ("definitions", "name")],
        supports_check_mode=True,
    )
    require_kubernetes(module)
    with fail_on_refusal(module):  # a refused definition: fail_json with the refusal's text
        requests = taint_rules.checked(module.params)  # before the cluster is reached
        try:
            # an empty definitions list changes nothing: no connection either
            cluster = Cluster(module.params["kubeconfig"], module.params["context"]) if requests else None
            result = run(module, cluster)
        except API_ERRORS as exc:  # the server's own message; a bug in the logic is not one of these
            module.fail_json(
                msg=f"DeviceTaintRule: the API request failed: {error_text(exc)}",
                exception=traceback.format_exc(),
            )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
