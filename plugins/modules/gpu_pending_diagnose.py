#!/usr/bin/python
# Copyright: gpusplit contributors
# Apache-2.0

DOCUMENTATION = r"""
module: gpu_pending_diagnose
short_description: Explain why GPU pods are Pending, one line per pod
version_added: "0.1.0"
description:
  - Reads, once each, all pods, all nodes, the C(FailedScheduling) events, the PodGroups
    (when a Pending pod names one) and the DRA objects (ResourceSlices, DeviceTaintRules,
    DeviceClasses, ResourceClaims and ResourceClaimTemplates, when a Pending pod has
    C(spec.resourceClaims)), each in the version the API server serves (asked through discovery
    then; PodGroups C(scheduling.k8s.io/v1beta1) on Kubernetes 1.37 and C(v1alpha2) on 1.36,
    DeviceTaintRules C(resource.k8s.io/v1) on 1.37 and C(v1beta2) on 1.36, the other DRA objects
    C(resource.k8s.io/v1)). What is not served in a version gpusplit reads counts as not served.
  - Classifies every unscheduled Pending pod that wants a GPU (an C(nvidia.com/gpu*) or
    C(nvidia.com/mig-*) extended resource, or DRA resource claims) as C(untolerated_taint),
    C(insufficient_gpu), C(gang_quorum), C(dra_device_taint), C(dra_no_device),
    C(node_selector_mismatch), C(scheduling_gated) or C(unknown), with the reason and the next
    place to look.
  - The taints, the per-node GPU numbers and the DRA devices are computed from the objects,
    because the scheduler's message counts nodes but names neither the taint nor the device.
  - Read-only. Run it on the controller.
options:
  namespaces:
    description: Only diagnose Pending pods in these namespaces (every pod still counts for node usage).
    type: list
    elements: str
    default: []
  resource_prefixes:
    description: Extended resources whose name starts with one of these count as GPUs.
    type: list
    elements: str
    default: [nvidia.com/gpu, nvidia.com/mig-]
requirements:
  - common-expression-language == 0.10.0 (Python package, where the module runs; usually the controller) to
    evaluate the CEL selectors of DeviceClasses and claims; without it they are listed as not evaluated
extends_documentation_fragment:
  - gpusplit.k8s.cluster_auth
  - gpusplit.k8s.attributes.check_mode_no_diff
author:
  - gpusplit team (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Explain the Pending GPU pods
  gpusplit.k8s.gpu_pending_diagnose:
    kubeconfig: "{{ gpusplit_kubeconfig }}"
  register: pending
  delegate_to: localhost
  run_once: true

- name: Show them
  ansible.builtin.debug:
    msg: "{{ pending.table.split('\n') }}"
"""

RETURN = r"""
report:
  description:
    - C(pods) (one entry per Pending GPU pod with namespace, name, class, summary, next, message,
      events, wants, candidates, nodes and per class details), C(counts) per class, and C(apis)
      (whether PodGroups and DRA are served).
  returned: always
  type: dict
table:
  description: One line per pod (pod, class, reason, next place to look) and a count line.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

try:
    from kubernetes.client.rest import ApiException
except ImportError:  # reported by require_kubernetes()
    pass

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane import api_versions
from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.report import diagnose, report_table
from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import fail_on_refusal
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.client import (
    API_ERRORS,
    CLUSTER_ARGS,
    api_client,
    error_text,
    get_json,
    list_path,
    require_kubernetes,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.scheduling import (
    GPU_RESOURCE_PREFIXES,
    is_unscheduled_pending,
    wants_gpu,
)

# the API groups whose served versions decide what is read (module_utils/_control_plane/api_versions.py picks them)
GROUPS = ("scheduling.k8s.io", "resource.k8s.io")
DRA_KINDS = {
    "slices": "ResourceSlice",
    "rules": "DeviceTaintRule",
    "classes": "DeviceClass",
    "claims": "ResourceClaim",
    "templates": "ResourceClaimTemplate",
}


def _get_or_none(api, path):
    """The JSON at ``path``, or None when the API server does not serve it."""
    try:
        return get_json(api, path)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def served_apis(api, groups=GROUPS):
    """Discovery of ``groups`` as kubernetes.core.k8s_cluster_info gives it: ``{group/version: {kind: {name}}}``."""
    out = {}
    for group in groups:
        for version in (_get_or_none(api, f"/apis/{group}") or {}).get("versions") or []:
            group_version = version.get("groupVersion")
            listing = _get_or_none(api, f"/apis/{group_version}") or {}
            out[group_version] = {
                r["kind"]: {"name": r["name"]}
                for r in listing.get("resources") or []
                if "/" not in r.get("name", "/")
            }
    return out


def _list_kind(api, served, group_version, kind):
    """The items of ``kind`` in ``group_version`` (a served one), None when it is not served there."""
    resource = (served.get(group_version) or {}).get(kind) if group_version else None
    if resource is None:
        return None
    return list_path(api, f"/apis/{group_version}/{resource['name']}")


def read_cluster(api, prefixes):
    pods = list_path(api, "/api/v1/pods")
    nodes = list_path(api, "/api/v1/nodes")
    pending = [p for p in pods if is_unscheduled_pending(p) and wants_gpu(p, prefixes)]
    events = []
    if pending:
        events = list_path(api, "/api/v1/events", field_selector="reason=FailedScheduling")
    gangs = any((p.get("spec") or {}).get("schedulingGroup") for p in pending)
    claims = any((p.get("spec") or {}).get("resourceClaims") for p in pending)
    served = served_apis(api) if gangs or claims else {}
    chosen = api_versions.choose(("podgroup", "dra", "device_taint_rule"), served)["api_versions"]
    podgroups = _list_kind(api, served, chosen["podgroup"], "PodGroup") if gangs else None
    resource = None
    if claims and chosen["dra"]:
        resource = {}
        for key, kind in DRA_KINDS.items():
            group_version = chosen["device_taint_rule"] if key == "rules" else chosen["dra"]
            resource[key] = _list_kind(api, served, group_version, kind) or []
    return pods, nodes, events, podgroups, resource


def main():
    module = AnsibleModule(
        argument_spec={
            "namespaces": {"type": "list", "elements": "str", "default": []},
            "resource_prefixes": {
                "type": "list",
                "elements": "str",
                "default": list(GPU_RESOURCE_PREFIXES),
            },
            **CLUSTER_ARGS,
        },
        supports_check_mode=True,
    )
    require_kubernetes(module)
    p = module.params
    prefixes = tuple(p["resource_prefixes"])
    with fail_on_refusal(module, changed=False):
        try:
            api = api_client(p)
            pods, nodes, events, podgroups, resource = read_cluster(api, prefixes)
        except API_ERRORS as exc:  # a failed read; a refusal or a bug in the logic is not one of these
            module.fail_json(msg=f"reading the cluster failed: {error_text(exc)}")
        report = diagnose(
            pods, nodes, events, podgroups, resource, namespaces=p["namespaces"], prefixes=prefixes
        )
    module.exit_json(changed=False, report=report, table=report_table(report))


if __name__ == "__main__":
    main()
