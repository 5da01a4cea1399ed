#!/usr/bin/python
# Copyright: gpusplit contributors
# Apache-2.0
"""Ansible module gpusplit.k8s.role_step: one step of the collection's roles, on the controller (its action plugin)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: role_step
short_description: One step of gpusplit's own roles, computed on the controller (internal)
version_added: "0.1.0"
description:
  - Works out on the controller, in one task, what the next tasks of one of gpusplit's roles need, from the plan,
    the inventory's variables and what the role read of the cluster, and returns it as the task's result.
    The roles and playbooks of this collection use it; it is not meant for your own playbooks, and its steps,
    their inputs and their results change with the roles, in any release.
  - Runs through its action plugin of the same name, in the controller's worker, with no module execution. A step
    that waits on the cluster lists pods through M(kubernetes.core.k8s_info).
  - A refusal fails the task with every message at once, under a title that names what refused (for example
    C(gpusplit render refused:)).
author:
  - gpusplit team (!UNKNOWN)
options:
  step:
    description: Which step.
    type: str
    required: true
    choices:
      - cluster_api_versions
      - cp_component_error
      - cp_detect
      - cp_gates_absent
      - cp_runtime_config
      - cp_upgrade_unreadable_kinds
      - cp_upgrade_unreadable_objects
      - cp_version
      - discovery_reports
      - dra_check_published
      - dra_containerd_config
      - dra_driver_plan
      - dra_driver_preflight
      - dra_host_report
      - dra_nodes
      - dra_split_objects
      - dra_split_scope
      - fleet_outputs_stale
      - guard_objects
      - guard_report
      - host_play
      - host_play_fleet
      - isolation_replan
      - isolation_rules
      - isolation_rules_of_gpu
      - isolation_targets
      - mig_apply
      - operator_config
      - operator_settle_wait
      - resplit_diff
      - resplit_fence
      - resplit_wait
      - rollout_batch
      - split_cluster
      - split_cluster_stock_wait
      - unsplit_cluster
      - unsplit_namespaces
      - unsplit_plan
      - unsplit_settings
      - unsplit_wait
  inputs:
    description: The step's inputs, as the role passes them.
    type: dict
    default: {}
notes:
  - Runs on the controller through its action plugin whatever the task's host; a direct module execution refuses.
seealso:
  - module: gpusplit.k8s.cluster_apply
extends_documentation_fragment:
  - gpusplit.k8s.attributes.check_mode_no_diff
"""

EXAMPLES = r"""
# from the role gpu_split_cluster
- name: Find device plugins that gpusplit does not own and that could run on a split node; render what to apply
  gpusplit.k8s.role_step:
    step: split_cluster
    inputs:
      plan: "{{ gpusplit_fleet_plan }}"
      live: "{{ gpu_split_cluster_live.resources }}"
  register: gpu_split_cluster_step
"""

RETURN = r"""
msg:
  description: Every message of a refusal, under its title.
  returned: failed
  type: str
errors:
  description: The messages of a refusal, one item each.
  returned: failed
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

STEPS = (
    "cluster_api_versions",
    "cp_component_error",
    "cp_detect",
    "cp_gates_absent",
    "cp_runtime_config",
    "cp_upgrade_unreadable_kinds",
    "cp_upgrade_unreadable_objects",
    "cp_version",
    "discovery_reports",
    "dra_check_published",
    "dra_containerd_config",
    "dra_driver_plan",
    "dra_driver_preflight",
    "dra_host_report",
    "dra_nodes",
    "dra_split_objects",
    "dra_split_scope",
    "fleet_outputs_stale",
    "guard_objects",
    "guard_report",
    "host_play",
    "host_play_fleet",
    "isolation_replan",
    "isolation_rules",
    "isolation_rules_of_gpu",
    "isolation_targets",
    "mig_apply",
    "operator_config",
    "operator_settle_wait",
    "resplit_diff",
    "resplit_fence",
    "resplit_wait",
    "rollout_batch",
    "split_cluster",
    "split_cluster_stock_wait",
    "unsplit_cluster",
    "unsplit_namespaces",
    "unsplit_plan",
    "unsplit_settings",
    "unsplit_wait",
)


def main():
    module = AnsibleModule(
        argument_spec={
            "step": {"type": "str", "required": True, "choices": list(STEPS)},
            "inputs": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    step = module.params["step"]
    module.fail_json(
        msg=f"gpusplit.k8s.role_step runs on the controller through its action plugin: step {step} cannot run on a host"
    )


if __name__ == "__main__":
    main()
