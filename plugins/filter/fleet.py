"""Filter that gathers the planner's input from the inventory.

    {{ hostvars | gpusplit.k8s.fleet_input(ansible_play_hosts) }}

What the roles read of the inventory otherwise (node names, GPU facts, discovery reports) they read in their own steps
on the controller (plugins/plugin_utils/role_steps.py, plugin_utils/inventory_vars.py).
Documented in plugins/filter/fleet_input.yml (ansible-doc -t filter gpusplit.k8s.fleet_input).
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpusplit.k8s.plugins.plugin_utils.filter_errors import filters as wrap_filters
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.lazy import lazy

inventory_vars = lazy("plugin_utils.inventory_vars")

# inventory variable -> planner key; the defaults are those of the roles' argument specs
FLEET_VARS = {
    "gpusplit_mode": ("mode", "none"),
    "gpusplit_split": ("split", None),
    "gpusplit_mig_strategy": ("mig_strategy", "none"),
    "gpusplit_exclude_unhealthy": ("exclude_unhealthy", True),
    "gpusplit_node_name": ("node_name", None),
    "gpusplit_sharing": ("sharing", None),
    "gpusplit_mig_geometry": ("mig_geometry", None),
}


def fleet_input(hostvars, hosts):
    """{host: {facts, mode, split, ...}} for the planner, from each host's variables and facts."""
    out = {}
    for host in hosts:
        hv = inventory_vars.host_vars(hostvars, host)
        facts = inventory_vars.gpu_facts(hv)
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


class FilterModule:
    def filters(self):
        return wrap_filters((fleet_input,))
