"""Filters that gather fleet-wide inputs from the inventory: planner input, GPU facts, node names.

{{ hostvars | gpusplit.k8s.fleet_input(ansible_play_hosts) }}
{{ hostvars | gpusplit.k8s.fleet_facts(hosts) }}
{{ hostvars | gpusplit.k8s.inventory_nodes(groups['all']) }}
{{ hostvars | gpusplit.k8s.discovery_reports(ansible_play_hosts_all) }}
{{ stat_loop.results | gpusplit.k8s.fleet_outputs_stale }}

Each filter is documented in plugins/filter/<name>.yml (ansible-doc -t filter gpusplit.k8s.<name>).
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.filter_errors import filters as wrap_filters
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.lazy import lazy

fleet_outputs = lazy("plugin_utils.fleet_outputs")


# inventory variable -> planner key; the defaults are those of the roles' argument specs
FLEET_VARS = {
    "gpusplit_mode": ("mode", "none"),
    "gpusplit_split": ("split", None),
    "gpusplit_mig_strategy": ("mig_strategy", "none"),
    "gpusplit_exclude_unhealthy": ("exclude_unhealthy", True),
    "gpusplit_node_name": ("node_name", None),
}


def host_vars(hostvars, host):
    """``hostvars[host]``; a host the inventory does not have is refused, naming it."""
    if not isinstance(host, str) or host not in hostvars:
        raise GpusplitError(f"host {host!r} is not in the inventory (hostvars has no such host)")
    return hostvars[host]


def fleet_input(hostvars, hosts):
    """{host: {facts, mode, split, ...}} for the planner, from each host's variables and facts."""
    out = {}
    for host in hosts:
        hv = host_vars(hostvars, host)
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


def inventory_nodes(hostvars, hosts):
    """The Kubernetes node name of every inventory host (gpusplit_node_name, else the host name)."""
    return [str(host_vars(hostvars, h).get("gpusplit_node_name") or h) for h in hosts]


def fleet_facts(hostvars, hosts):
    """{host: nvidia_gpus} for the hosts that have GPU facts."""
    out = {}
    for host in hosts:
        hv = host_vars(hostvars, host)
        facts = hv.get("ansible_facts", {}).get("nvidia_gpus", hv.get("nvidia_gpus"))
        if facts is not None:
            out[host] = facts
    return out


# what the fleet's GPU report says of a host whose discovery did not finish (failed, unreachable, skipped)
UNFINISHED = {
    "backend": None,
    "driver_version": None,
    "cuda_version": None,
    "msg": "GPU discovery did not finish on this host",
    "gpus": [],
}


def _finished(result):
    return isinstance(result, Mapping) and not any(
        result.get(k) for k in ("failed", "skipped", "unreachable")
    )


def discovery_report(hv):
    """One host's GPU report from this run's discovery result (role gpu_discovery: its last reading, the one after
    the binding's install where that ran), None where it has none."""
    result = hv.get("gpu_discovery_result")
    if not _finished(result):
        return None
    facts = result.get("ansible_facts") or {}
    return {
        "backend": facts.get("nvidia_gpu_backend"),
        "driver_version": facts.get("nvidia_driver_version"),
        "cuda_version": facts.get("nvidia_cuda_driver_version"),
        "msg": result.get("msg"),
        "nvml_binding": result.get("nvml_binding"),
        "gpus": facts.get("nvidia_gpus") or [],
    }


def discovery_reports(hostvars, hosts, known=None):
    """{host: GPU report} of every one of ``hosts``, from each one's discovery result; a host whose
    discovery did not finish gets the UNFINISHED report.

    ``known``: the reports the role made at its end (``gpu_discovery_reports``), for the hosts that finished
    it; taken as they are, and every other host is UNFINISHED (it failed after its first reading, or was
    never reached), without reading any host's variables."""
    out = {}
    for host in hosts:
        if known is not None:
            out[host] = known[host] if host in known else dict(UNFINISHED)
            continue
        report = discovery_report(host_vars(hostvars, host))
        out[host] = dict(UNFINISHED) if report is None else report
    return out


def fleet_outputs_stale(stat_results):
    """Why out/fleet-plan.json and out/fleet-report.json may not be read together ("" when they may)."""
    return fleet_outputs.stale_reason(fleet_outputs.mtimes_of(stat_results))


class FilterModule:
    def filters(self):
        return wrap_filters(
            (fleet_input, fleet_facts, inventory_nodes, discovery_reports, fleet_outputs_stale)
        )
