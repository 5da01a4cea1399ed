"""Filters exposing DRA mode (plugins/module_utils/_dra/dra.py) to the roles dra_driver, dra_split and
the playbooks dra.yml and isolate_gpu.yml.

    {{ gpusplit_fleet_plan | gpusplit.k8s.gpusplit_dra_host_rules }}
    {{ gpusplit_dra_driver_settings | gpusplit.k8s.gpusplit_dra_chart_values }}
    {{ cluster | gpusplit.k8s.gpusplit_dra_preflight(hosts, pods, skip) }}
    {{ fleet_input | gpusplit.k8s.gpusplit_dra_locate_gpu(uuid) }}

Every refusal becomes one AnsibleFilterError listing all messages.
"""

from __future__ import annotations

import base64

from ansible_collections.gpusplit.k8s.plugins.module_utils._dra import dra
from ansible_collections.gpusplit.k8s.plugins.module_utils._split import planner as split_plan
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import render
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.filter_errors import filters as wrap_filters

REFUSALS = {
    dra.DraError: "gpusplit DRA",
    split_plan.PlanError: "gpusplit split plan",
    render.RenderError: "gpusplit render",
}


def gpusplit_dra_nodes(plan):
    """The node plans in mode dra."""
    return dra.dra_node_plans(plan)


def gpusplit_dra_node_patches(plan, operator_managed=False):
    """Node objects with gpusplit's labels for the nodes in mode dra (the kubelet plugin selects on them)."""
    return [render.render_node_patch(p, operator_managed) for p in dra.dra_node_plans(plan)]


def gpusplit_dra_host_rules(plan, effect="NoSchedule", slices=None):
    """One DeviceTaintRule per host-share and excluded device of every node in mode dra.

    ``slices``: the live ResourceSlices, so that the MIG devices of a reserved MIG-enabled GPU get rules too.
    """
    return dra.host_share_rules(plan, effect, slices)


def gpusplit_dra_rules_table(rules):
    return dra.rules_table(rules)


def gpusplit_dra_chart_values(settings=None):
    """The dra-driver-nvidia-gpu chart values for a gpusplit fleet."""
    return dra.chart_values(settings)


def gpusplit_dra_containerd_imports(config_text, config_path="/etc/containerd/config.toml"):
    """The absolute import globs of a containerd config."""
    return dra.containerd_imports(config_text, config_path)


def gpusplit_dra_slurped_files(results):
    """[{path, text}] from the results of a looped ansible.builtin.slurp (skipped items are left out)."""
    out = []
    for result in results or []:
        if result.get("skipped") or "content" not in result:
            continue
        text = base64.b64decode(result["content"]).decode("utf-8", errors="replace")
        out.append({"path": result.get("source") or result.get("item"), "text": text})
    return out


def gpusplit_dra_host_inputs(plan, hostvars):
    """{host: {node, driver_version, containerd}} of the hosts in mode dra, for the preflight."""
    out = {}
    for node_plan in dra.dra_node_plans(plan):
        host = node_plan["host"]
        hv = hostvars[host]
        facts = hv.get("ansible_facts", {}) or {}
        out[host] = {
            "node": node_plan["node"],
            "driver_version": facts.get("nvidia_driver_version", hv.get("nvidia_driver_version")),
            # None: the role's host side (tasks_from host.yml) did not run there
            "containerd": hv.get("dra_driver_host_report"),
        }
    return out


def gpusplit_dra_preflight(cluster_info, hosts, pods=None, skip=None, need_taint_rules=True):
    """The preflight report from k8s_cluster_info's result, the DRA hosts' inputs and their pods."""
    info = cluster_info or {}
    server = ((info.get("version") or {}).get("server") or {}).get("kubernetes") or {}
    cluster = {"git_version": server.get("gitVersion"), "apis": info.get("apis") or {}}
    return dra.preflight(cluster, hosts, pods, skip or (), need_taint_rules)


def gpusplit_dra_preflight_table(report):
    return dra.preflight_table(report)


def gpusplit_dra_check_published(plan, slices):
    """Published ResourceSlices against the plan: errors when gpu-<minor> is another GPU."""
    return dra.check_published(plan, slices)


def gpusplit_dra_locate_gpu(fleet_input, uuid):
    """{host, node, mode, uuid, minor_number, device, ...} of one GPU UUID in the planner input."""
    return dra.locate_gpu(fleet_input, uuid)


def gpusplit_dra_isolation_rule(located, effect="None", reason=None):
    """The DeviceTaintRule isolating a located GPU."""
    return dra.isolation_rule(located, effect, reason)


def gpusplit_dra_isolation_rules(located, effect="None", reason=None, slices=None):
    """Every DeviceTaintRule isolating a located GPU (its MIG devices too, from the live ResourceSlices)."""
    return dra.isolation_rules(located, effect, reason, slices)


def gpusplit_dra_rules_of_gpu(rules, uuid, purpose="isolate"):
    """Names of the live gpusplit DeviceTaintRules of a purpose that name one GPU UUID."""
    return dra.rules_of_gpu(rules, uuid, purpose)


def gpusplit_dra_isolation_targets(fleet_input, uuid=None, unhealthy=False):
    """The GPUs an isolate_gpu run acts on: the one UUID, or every GPU whose facts say it is unhealthy."""
    return dra.isolation_targets(fleet_input, uuid, unhealthy)


def gpusplit_dra_isolation_toleration(effect=None):
    """A DeviceToleration for gpusplit's isolation taint (every effect when none is given)."""
    return dra.isolation_toleration(effect)


def gpusplit_dra_diagnostic_claim(located, name, namespace, kind="ResourceClaim"):
    """A claim for exactly one isolated GPU (by UUID), tolerating its isolation taint."""
    return dra.diagnostic_claim(name, namespace, located, kind)


def gpusplit_dra_isolation_input(fleet_input, host, uuid, reason=None):
    """The planner input of one host with the GPU marked lost (the planner then excludes it)."""
    return dra.isolation_fleet_input(fleet_input, host, uuid, reason)


def gpusplit_dra_rule_report(rule):
    """{name, effect, current, status, reason, message, impact} of a live DeviceTaintRule."""
    return dra.rule_report(rule)


def gpusplit_dra_parse_eviction(message):
    """The numbers in a DeviceTaintRule's EvictionInProgress message."""
    return dra.parse_eviction_message(message)


def gpusplit_dra_claim(name, namespace, count=1, tolerations=None, kind="ResourceClaimTemplate", **kwargs):
    """A ResourceClaimTemplate (or ResourceClaim) for NVIDIA GPUs, with device tolerations."""
    return dra.render_claim(name, namespace, count=count, tolerations=tolerations or (), kind=kind, **kwargs)


def gpusplit_dra_host_share_toleration(effect="NoSchedule"):
    """A DeviceToleration for gpusplit's host-share taint."""
    return dra.host_share_toleration(effect)


class FilterModule:
    def filters(self):
        funcs = (
            gpusplit_dra_nodes,
            gpusplit_dra_node_patches,
            gpusplit_dra_host_rules,
            gpusplit_dra_rules_table,
            gpusplit_dra_chart_values,
            gpusplit_dra_containerd_imports,
            gpusplit_dra_slurped_files,
            gpusplit_dra_host_inputs,
            gpusplit_dra_preflight,
            gpusplit_dra_preflight_table,
            gpusplit_dra_check_published,
            gpusplit_dra_locate_gpu,
            gpusplit_dra_isolation_rule,
            gpusplit_dra_isolation_input,
            gpusplit_dra_isolation_rules,
            gpusplit_dra_isolation_targets,
            gpusplit_dra_rules_of_gpu,
            gpusplit_dra_isolation_toleration,
            gpusplit_dra_diagnostic_claim,
            gpusplit_dra_rule_report,
            gpusplit_dra_parse_eviction,
            gpusplit_dra_claim,
            gpusplit_dra_host_share_toleration,
        )
        return wrap_filters(funcs, REFUSALS)
