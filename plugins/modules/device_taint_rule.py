#!/usr/bin/python
# Copyright: gpusplit contributors
# Apache-2.0

DOCUMENTATION = r"""
module: device_taint_rule
short_description: Create, change or remove one DeviceTaintRule and report what the controller says
version_added: "0.1.0"
description:
  - Server-side applies one C(resource.k8s.io/v1) DeviceTaintRule (as rendered by the filter
    C(gpusplit.k8s.dra_isolation_rule)), or deletes it, and waits until
    kube-controller-manager has written its C(EvictionInProgress) condition for the rule's
    present generation.
  - With effect C(None) that condition says how many published and allocated devices the rule
    selects and how many pods in how many namespaces would be evicted with C(NoExecute); the
    numbers come back parsed in C(report.impact). The controller computes them once per
    generation, so an unchanged rule reports its old numbers (see C(since)); C(refresh=true)
    recreates it.
  - With effect C(NoExecute), C(wait_eviction=true) also waits until the eviction is over
    (condition status C(False)).
  - In check mode the apply is a server dry-run and nothing is waited for.
options:
  definition:
    description: The DeviceTaintRule. Required with I(state=present).
    type: dict
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
    description: Seconds to wait.
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
    definition: "{{ located | gpusplit.k8s.dra_isolation_rule('None', 'ecc') }}"
  register: isolation

- name: Evict its pods
  gpusplit.k8s.device_taint_rule:
    definition: "{{ located | gpusplit.k8s.dra_isolation_rule('NoExecute', 'ecc') }}"
    wait_eviction: true

- name: Give the GPU back
  gpusplit.k8s.device_taint_rule:
    name: gpusplit-isolate-gpu-a-gpu-3
    state: absent
"""

RETURN = r"""
name:
  description: The rule's name.
  returned: always
  type: str
action:
  description: created, updated, recreated, unchanged, deleted or absent.
  returned: always
  type: str
rule:
  description: The live rule after the change (the dry-run result in check mode; null when absent).
  returned: always
  type: dict
first_report:
  description:
    - The controller's report on the rule with effect C(None), made before the effect asked for
      (see I(report_first)); null otherwise.
  returned: always
  type: dict
report:
  description:
    - C(effect), C(current) (the condition belongs to the present generation), C(status), C(reason),
      C(message), C(since) and C(impact) (C(published_devices), C(allocated_devices),
      C(pods_would_be_evicted), C(pods_pending_eviction), C(namespaces), C(pods_evicted); null when
      the message does not say).
  returned: always
  type: dict
"""

import copy
import time
import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpusplit.k8s.plugins.module_utils._dra.names import (
    API_GROUP_VERSION,
    EFFECTS,
    DraError,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._dra.report import rule_report, rule_settled
from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import fail_on_refusal, type_name
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.apply import Cluster, is_subset
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.client import (
    API_ERRORS,
    CLUSTER_ARGS,
    error_text,
    require_kubernetes,
)

API_VERSION = API_GROUP_VERSION
KIND = "DeviceTaintRule"


def _get(cluster, res, name):
    from kubernetes.dynamic.exceptions import NotFoundError

    try:
        return cluster.client.get(res, name=name).to_dict()
    except NotFoundError:
        return None


def _wait_gone(cluster, res, name, deadline):
    while time.time() < deadline:
        if _get(cluster, res, name) is None:
            return True
        time.sleep(0.5)
    return False


def _wait_settled(cluster, res, name, rule, wait_eviction, deadline):
    """Poll the rule until the controller has reported on its generation; None on timeout."""
    while not rule_settled(rule, wait_eviction):
        if time.time() > deadline:
            return None
        time.sleep(1)
        rule = _get(cluster, res, name) or rule
    return rule


def _not_a(field, value, what="a mapping"):
    return f"{field}: expected {what}, got {type_name(value)}"


def _metadata_name(definition):
    """``definition.metadata.name`` (None when not given); refused when the definition has another shape."""
    metadata = definition.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise DraError(_not_a("definition.metadata", metadata))
    name = metadata.get("name")
    if name is not None and not isinstance(name, str):
        raise DraError(_not_a("definition.metadata.name", name, "a string"))
    return name


def _check_definition(definition):
    problems = []
    if definition.get("apiVersion") != API_VERSION or definition.get("kind") != KIND:
        problems.append(f"definition must be a {API_VERSION} {KIND}")
    spec = definition.get("spec") or {}
    taint = (spec.get("taint") or {}) if isinstance(spec, dict) else {}
    if not isinstance(spec, dict):
        problems.append(_not_a("definition.spec", spec))
    elif not isinstance(taint, dict):
        problems.append(_not_a("definition.spec.taint", taint))
    elif taint.get("effect") not in EFFECTS:
        problems.append(f"spec.taint.effect {taint.get('effect')!r} is not one of {', '.join(EFFECTS)}")
    return problems


def checked(params):
    """``(name, definition)`` from the module's parameters; every refusal (DraError) is raised here,
    before any request. ``definition`` is None for state=absent, else carries ``metadata.name``."""
    definition = params["definition"]
    if definition is not None and not isinstance(definition, dict):
        raise DraError(_not_a("definition", definition))
    name = params["name"] or _metadata_name(definition or {})
    if not name:
        raise DraError("give name, or a definition with metadata.name")
    if params["state"] == "absent":
        return name, None
    if not definition:
        raise DraError("state=present needs a definition")
    definition = dict(definition)
    definition["metadata"] = dict(definition.get("metadata") or {}, name=name)
    problems = _check_definition(definition)
    if problems:
        raise DraError("nothing was applied: " + "; ".join(problems))
    return name, definition


def run(module, cluster):
    """Refusals (:func:`checked`) come before the first request; the requests' own errors are the caller's."""
    p = module.params
    name, definition = checked(p)
    res = cluster.resource(API_VERSION, KIND)
    live = _get(cluster, res, name)
    deadline = time.time() + p["wait_timeout"]

    if p["state"] == "absent":
        if live is None:
            return {
                "changed": False,
                "name": name,
                "action": "absent",
                "rule": None,
                "report": rule_report(None),
                "first_report": None,
            }
        cluster.delete(live, dry_run=module.check_mode)
        if not module.check_mode and p["wait"] and not _wait_gone(cluster, res, name, deadline):
            module.fail_json(
                msg=f"DeviceTaintRule {name} was deleted but is still there after {p['wait_timeout']}s"
            )
        return {
            "changed": True,
            "name": name,
            "action": "deleted",
            "rule": None,
            "report": rule_report(None),
            "first_report": None,
        }

    first_report = None
    created_first = False
    effect = definition["spec"]["taint"]["effect"]
    if live is None and effect != "None" and p["report_first"] and not module.check_mode:
        probe = copy.deepcopy(definition)
        probe["spec"]["taint"]["effect"] = "None"
        live = _wait_settled(cluster, res, name, cluster.apply(probe, p["field_manager"]), False, deadline)
        if live is None:
            module.fail_json(
                msg=(
                    f"DeviceTaintRule {name} was created with effect None to report first, but kube-controller-manager "
                    f"has not reported on it within {p['wait_timeout']}s; effect {effect} was not applied "
                    "(does it run the device-taint-eviction controller?)"
                ),
                changed=True,
                name=name,
                action="created",
            )
        first_report = rule_report(live)
        created_first = True

    if live is not None and is_subset(definition, live) and not p["refresh"]:
        action, rule = "unchanged", live
    elif live is not None and is_subset(definition, live):
        action = "recreated"
        if module.check_mode:
            rule = live
        else:
            cluster.delete(live)
            if not _wait_gone(cluster, res, name, deadline):
                module.fail_json(msg=f"DeviceTaintRule {name} did not go away for its re-creation")
            rule = cluster.apply(definition, p["field_manager"])
    else:
        action = "created" if live is None else "updated"
        rule = cluster.apply(definition, p["field_manager"], dry_run=module.check_mode)
    if created_first:
        action = "created"
    changed = action != "unchanged"

    if p["wait"] and not module.check_mode:
        settled = _wait_settled(cluster, res, name, rule, p["wait_eviction"], deadline)
        if settled is None:
            rule = _get(cluster, res, name) or rule
            report = rule_report(rule)
            what = "finished evicting" if report["current"] else "reported on the rule"
            module.fail_json(
                msg=(
                    f"DeviceTaintRule {name} was {action}, but kube-controller-manager has not {what} within "
                    f"{p['wait_timeout']}s (does it run the device-taint-eviction controller?)"
                ),
                changed=changed,
                name=name,
                action=action,
                rule=rule,
                report=report,
                first_report=first_report,
            )
        rule = settled
    return {
        "changed": changed,
        "name": name,
        "action": action,
        "rule": rule,
        "report": rule_report(rule),
        "first_report": first_report,
    }


def main():
    module = AnsibleModule(
        argument_spec={
            "definition": {"type": "dict"},
            "name": {"type": "str"},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "wait": {"type": "bool", "default": True},
            "wait_eviction": {"type": "bool", "default": False},
            "wait_timeout": {"type": "int", "default": 90},
            "refresh": {"type": "bool", "default": False},
            "report_first": {"type": "bool", "default": True},
            "field_manager": {"type": "str", "default": "gpusplit"},
            **CLUSTER_ARGS,
        },
        required_if=[("state", "present", ("definition",))],
        supports_check_mode=True,
    )
    require_kubernetes(module)
    with fail_on_refusal(module):  # a refused definition: fail_json with the refusal's text
        checked(module.params)  # before the cluster is reached
        try:
            cluster = Cluster(module.params["kubeconfig"], module.params["context"])
            result = run(module, cluster)
        except API_ERRORS as exc:  # the server's own message; a bug in the logic is not one of these
            module.fail_json(
                msg=f"DeviceTaintRule: the API request failed: {error_text(exc)}",
                exception=traceback.format_exc(),
            )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
