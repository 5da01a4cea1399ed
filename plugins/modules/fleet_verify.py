#!/usr/bin/python
# Copyright: gpusplit contributors
# Apache-2.0

DOCUMENTATION = r"""
module: fleet_verify
short_description: Check that what Kubernetes counts on every node equals the split plan
version_added: "0.1.0"
description:
  - Reads the Node objects and the device-plugin pods once and compares them, node by node,
    with the fleet plan and the hosts' GPU facts.
  - Per node the verdict is C(OK), C(DRIFT) (not as planned yet or any more, nothing a pod can
    misuse) or C(FAIL) (the split does not hold, for example more GPUs advertised than the
    Kubernetes share, a host process on a Kubernetes GPU, two device plugins on one node).
  - With I(wait_seconds) it re-reads every 2 seconds until no node is in DRIFT, for plugins that are still
    starting; a FAIL must hold for 15 seconds (within I(wait_seconds)) before it is reported,
    since right after an apply the old plugin pod or the kubelet's last count can still show.
  - I(wait_seconds) counts from the last read with fewer nodes in DRIFT than any read before it, so the
    wait goes on while a big fleet's plugins keep coming up (the controller-manager creates their pods at
    its client rate, about five writes per node at 20 per second by default) and ends I(wait_seconds)
    after the last node came right.
  - Read-only. Run it on the controller.
  - Its action plugin, on the controller, sends the module only what the comparison reads of O(plan) and
    O(facts) (of each node plan its mode, host, node, UUIDs, resources and the uuid and share of its GPUs; of
    each GPU in the facts its uuid and processes), so that a big fleet's plan and facts are not carried whole
    into the module's arguments.
options:
  plan:
    description: The fleet plan (the gpu_plan role's C(gpusplit_fleet_plan)).
    type: dict
    required: true
  facts:
    description:
      - GPU facts per host (host -> C(nvidia_gpus)), for the process checks.
      - When left out, the action plugin reads them on the controller from the variables of each host O(plan)
        has a node plan of (C(ansible_facts.nvidia_gpus), as M(gpusplit.k8s.nvidia_gpu_facts) sets them); a host
        without them gets no process check, a host the inventory does not have is refused by name.
    type: dict
  wait_seconds:
    description:
      - Keep re-reading while any node is in DRIFT, until no node has come right for this many seconds.
      - The whole wait is at most (planned nodes + 1) times this (and a read each time). C(0) reads once.
      - A whole number from 0 to 86400 (a day); anything else is refused before the cluster is read.
    type: int
    default: 0
extends_documentation_fragment:
  - gpusplit.k8s.cluster_auth
  - gpusplit.k8s.attributes.check_mode_no_diff
author:
  - gpusplit team (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Verify the split
  gpusplit.k8s.fleet_verify:
    plan: "{{ hostvars['localhost']['gpusplit_fleet_plan'] }}"
    # facts left out: each planned host's GPU facts (gpusplit.k8s.nvidia_gpu_facts) are read from its variables
    wait_seconds: 60
  register: report
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
report:
  description:
    - Per node name, mode, host_gpus, kubernetes_gpus, excluded_gpus, verdict, reasons; and counts.
    - C(allocatable) / C(expected_allocatable) are the node's and the plan's C(nvidia.com/gpu);
      C(resources) / C(expected_resources) hold every GPU resource (C(nvidia.com/gpu) and, under
      mig_strategy mixed, each C(nvidia.com/mig-<profile>)). Each of them is compared.
    - C(plan_digest) is the digest of the whole O(plan) it verified (C(sha256:) and the hex digest of its
      canonical JSON, added on the controller), which ties out/fleet-report.json to out/fleet-plan.json by
      content (playbooks/diagnose.yml).
  returned: always
  type: dict
waited_seconds:
  description: How long it re-read the cluster (see I(wait_seconds)); 0 for one read.
  returned: always
  type: float
reads:
  description: How often it read the cluster.
  returned: always
  type: int
table:
  description: The report as a fixed-width table.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import (
    MAX_SECONDS,
    check_number,
    fail_on_refusal,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.client import (
    API_ERRORS,
    CLUSTER_ARGS,
    api_client,
    error_text,
    list_path,
    require_kubernetes,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._split import verify


def read_cluster(api):
    return list_path(api, "/api/v1/nodes"), list_path(api, "/api/v1/pods")


def main():
    module = AnsibleModule(
        argument_spec={
            "plan": {"type": "dict", "required": True},
            "facts": {"type": "dict"},
            "wait_seconds": {"type": "int", "default": 0},
            **CLUSTER_ARGS,
        },
        supports_check_mode=True,
    )
    require_kubernetes(module)
    p = module.params
    with fail_on_refusal(module, changed=False):
        check_number(p["wait_seconds"], "wait_seconds", 0, MAX_SECONDS, integer=True, unit="seconds")
        verify.require_fleet_plan(p["plan"], p["facts"])  # refused before the cluster is read
        report, waited, reads = watch(module, p)
    module.exit_json(
        changed=False, report=report, table=verify.report_table(report), waited_seconds=waited, reads=reads
    )


def watch(module, p):
    """``(report, seconds waited, reads)``: the fleet report, re-read while a node is in DRIFT (or a FAIL has not
    settled), verify.wait_for_fleet."""
    api = reading(module, api_client, p)

    def read_report():
        nodes, pods = reading(module, read_cluster, api)
        return verify.verify_fleet(p["plan"], nodes, pods, p["facts"])

    return verify.wait_for_fleet(read_report, p["wait_seconds"])


def reading(module, read, *args):
    """``read(*args)``; whatever goes wrong reaching the cluster (API_ERRORS) fails the module, saying so."""
    try:
        return read(*args)
    except API_ERRORS as exc:
        module.fail_json(msg=f"reading the cluster failed: {error_text(exc)}")


if __name__ == "__main__":
    main()
