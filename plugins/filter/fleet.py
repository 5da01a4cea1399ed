"""Filters that gather fleet-wide inputs from inventory and turn live data into the verify report.

{{ hostvars | gpusplit.k8s.gpusplit_fleet_input(ansible_play_hosts) }}
{{ plan | gpusplit.k8s.gpusplit_verify(nodes, pods, hostvars | gpusplit.k8s.gpusplit_fleet_facts(hosts)) }}
{{ report | gpusplit.k8s.gpusplit_report_table }}
{{ hostvars | gpusplit.k8s.gpusplit_inventory_nodes(groups['all']) }}
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpusplit.k8s.plugins.module_utils._split import verify

# inventory variable -> planner key; the defaults are those of the roles' argument specs
FLEET_VARS = {
    "gpusplit_mode": ("mode", "none"),
    "gpusplit_split": ("split", None),
    "gpusplit_mig_strategy": ("mig_strategy", "none"),
    "gpusplit_exclude_unhealthy": ("exclude_unhealthy", True),
    "gpusplit_node_name": ("node_name", None),
}


def gpusplit_fleet_input(hostvars, hosts):
    """{host: {facts, mode, split, ...}} for the planner, from each host's variables and facts."""
    out = {}
    for host in hosts:
        hv = hostvars[host]
        facts = hv.get("ansible_facts", {}).get("nvidia_gpus", hv.get("nvidia_gpus"))
        if facts is None:
            raise AnsibleFilterError(
                f"{host}: no GPU facts (nvidia_gpus); run the gpu_discovery role on it first"
            )
        entry = {"facts": facts}
        for var, (key, default) in FLEET_VARS.items():
            value = hv.get(var, default)
            if value is not None:
                entry[key] = value
        out[host] = entry
    return out


def gpusplit_inventory_nodes(hostvars, hosts):
    """The Kubernetes node name of every inventory host (gpusplit_node_name, else the host name)."""
    return [str(hostvars[h].get("gpusplit_node_name") or h) for h in hosts]


def gpusplit_fleet_facts(hostvars, hosts):
    """{host: nvidia_gpus} for the hosts that have GPU facts."""
    out = {}
    for host in hosts:
        hv = hostvars[host]
        facts = hv.get("ansible_facts", {}).get("nvidia_gpus", hv.get("nvidia_gpus"))
        if facts is not None:
            out[host] = facts
    return out


def gpusplit_verify(plan, nodes, pods, facts_by_host):
    """The fleet report (see plugins/module_utils/_split/verify.py)."""
    return verify.verify_fleet(plan, nodes, pods, facts_by_host)


def gpusplit_report_table(report):
    return verify.report_table(report)


def gpusplit_unmanaged_plugins(daemonsets):
    """The device-plugin DaemonSets in the list that gpusplit does not own."""
    return verify.unmanaged_plugin_daemonsets(daemonsets)


class FilterModule:
    def filters(self):
        return {
            "gpusplit_fleet_input": gpusplit_fleet_input,
            "gpusplit_fleet_facts": gpusplit_fleet_facts,
            "gpusplit_inventory_nodes": gpusplit_inventory_nodes,
            "gpusplit_verify": gpusplit_verify,
            "gpusplit_report_table": gpusplit_report_table,
            "gpusplit_unmanaged_plugins": gpusplit_unmanaged_plugins,
        }
