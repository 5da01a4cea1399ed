"""Filters exposing the split planner, its table and the split renderers to playbooks.

    {{ gpusplit_gpus | gpusplit.k8s.node_plan(inventory_hostname, 'device_plugin', {'count': 2}) }}
    {{ fleet_input | gpusplit.k8s.fleet_plan }}
    {{ fleet_plan | gpusplit.k8s.render_daemonsets(settings) }}
    {{ fleet_plan | gpusplit.k8s.plan_table }}

Every refusal of the planner becomes one AnsibleFilterError listing all messages.
Each filter is documented in plugins/filter/<name>.yml (ansible-doc -t filter gpusplit.k8s.<name>).
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpusplit.k8s.plugins.plugin_utils.filter_errors import filters as wrap_filters
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.lazy import lazy

planner = lazy("module_utils._split.planner")
render = lazy("plugin_utils.split_render")
_split_table = lazy("plugin_utils.split_table")


def refusals():
    """The exception types this file's filters refuse with, and their titles."""
    return {planner.PlanError: "gpusplit split plan", render.RenderError: "gpusplit render"}


def node_plan(facts, host, mode, split=None, mig_strategy="none", exclude_unhealthy=True, node_name=None):
    """The split plan of one host from its GPU facts."""
    return planner.plan_node(host, facts, mode, split, mig_strategy, exclude_unhealthy, node_name)


def fleet_plan(hosts, distinct_gpus=True):
    """The split plan of every host: {host: {facts, mode, split, ...}} -> {nodes, summary, warnings}. Hosts that
    report the same GPU UUID (one machine in the inventory twice) are refused with the rest, unless
    ``distinct_gpus`` is false (a simulated fleet whose hosts share GPU fixtures)."""
    if not isinstance(distinct_gpus, bool):
        raise AnsibleFilterError(f"fleet_plan: distinct_gpus must be true or false, got {distinct_gpus!r}")
    return planner.plan_fleet(hosts, distinct_gpus=distinct_gpus)


def plan_table(plan):
    """A fixed-width table of a fleet plan (or node plan)."""
    return _split_table.fleet_table(plan)


def render_daemonsets(plan, settings=None):
    """The per-node split device plugin DaemonSets of a fleet plan (or node plan / list)."""
    return render.render_daemonsets(plan, settings)


def render_fleet(plan, settings=None):
    """Namespace (when not kube-system) + the DaemonSets, in apply order."""
    return render.render_fleet(plan, settings)


class FilterModule:
    def filters(self):
        funcs = (
            node_plan,
            fleet_plan,
            plan_table,
            render_daemonsets,
            render_fleet,
        )
        return wrap_filters(funcs, refusals)
