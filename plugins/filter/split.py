"""Filters exposing the split planner and the split renderers to playbooks.

    {{ gpusplit_gpus | gpusplit.k8s.node_plan(inventory_hostname, 'device_plugin', {'count': 2}) }}
    {{ fleet_input | gpusplit.k8s.fleet_plan }}
    {{ fleet_plan | gpusplit.k8s.render_daemonsets(settings) }}
    {{ fleet_plan | gpusplit.k8s.plan_table }}
    {{ fleet_plan | gpusplit.k8s.prune_scope(base_selector, hostvars | gpusplit.k8s.inventory_nodes(groups['all'])) }}

Every refusal of the planner becomes one AnsibleFilterError listing all messages.
Each filter is documented in plugins/filter/<name>.yml (ansible-doc -t filter gpusplit.k8s.<name>).
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.plugin_utils.filter_errors import filters as wrap_filters
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.lazy import lazy

planner = lazy("module_utils._split.planner")
render = lazy("plugin_utils.render")
_split_table = lazy("plugin_utils.split_table")
_compare = lazy("module_utils._k8s.compare")


def refusals():
    """The exception types this file's filters refuse with, and their titles."""
    return {planner.PlanError: "gpusplit split plan", render.RenderError: "gpusplit render"}


def node_plan(facts, host, mode, split=None, mig_strategy="none", exclude_unhealthy=True, node_name=None):
    """The split plan of one host from its GPU facts."""
    return planner.plan_node(host, facts, mode, split, mig_strategy, exclude_unhealthy, node_name)


def fleet_plan(hosts):
    """The split plan of every host: {host: {facts, mode, split, ...}} -> {nodes, summary, warnings}."""
    return planner.plan_fleet(hosts)


def plan_table(plan):
    """A fixed-width table of a fleet plan (or node plan)."""
    return _split_table.fleet_table(plan)


def render_daemonsets(plan, settings=None):
    """The per-node split device plugin DaemonSets of a fleet plan (or node plan / list)."""
    return render.render_daemonsets(plan, settings)


def prune_scope(plan, base_selector, inventory_nodes, scope="inventory"):
    """{selector, kept}: prune only nodes this run planned (or, scope inventory, that left the inventory)."""
    return render.prune_scope(base_selector, plan, inventory_nodes, scope)


def departed_nodes(live_nodes, plan, inventory_nodes, scope="inventory"):
    """Live nodes with gpusplit's labels whose host is gone from the inventory (none with scope plan)."""
    return render.departed_nodes(live_nodes, plan, inventory_nodes, scope)


def release_patches(names):
    """Node objects that, applied, take gpusplit's labels off those nodes."""
    return render.render_release_patches(names)


def render_fleet(plan, settings=None):
    """Namespace (when not kube-system) + the DaemonSets, in apply order."""
    return render.render_fleet(plan, settings)


def node_taints(node_plan, taint_enabled=False):
    """[nvidia.com/gpu=present:NoSchedule] when enabled and the node has Kubernetes GPUs."""
    return render.node_taints(node_plan, taint_enabled)


def node_patches(plan, operator_managed=False, gpu_taint=False):
    """Node objects carrying gpusplit's labels (and the GPU taint mark), one per node plan."""
    return render.render_node_patches(plan, operator_managed, gpu_taint)


def apply_needed(objects, live, field_manager="gpusplit"):
    """Names of the objects that a server-side apply by ``field_manager`` would create or change, judged from
    ``live`` (a cluster_read of them that kept the manager's managedFields); [] when it would change nothing."""
    compare = _compare
    return [
        compare.key_text(compare.object_key(obj))
        for obj in compare.needing_apply(objects, live, field_manager)
    ]


def gpu_taint_removals(live_nodes, plan, taint_enabled, inventory_nodes, scope="inventory"):
    """Live nodes whose GPU taint gpusplit set and now takes off."""
    return render.gpu_taint_removals(live_nodes, plan, taint_enabled, inventory_nodes, scope)


def gpu_taint_nodes(live_nodes, plan, taint_enabled, inventory_nodes, scope="inventory"):
    """The nodes argument of gpusplit.k8s.node_taints for the GPU taint: set where planned, off where it goes."""
    return render.gpu_taint_nodes(live_nodes, plan, taint_enabled, inventory_nodes, scope)


def stock_plugin_exclusion(existing=None, settings=None):
    """The patch keeping a stock cluster-wide plugin DaemonSet off split nodes."""
    return render.render_stock_plugin_exclusion(settings, existing)


def split_daemonset_name(node):
    """gpusplit-dp-<node> as a DNS-1123 label (<= 63 characters)."""
    return render.daemonset_name(node)


def resolve_plugin_settings(settings=None):
    """The split plugin's settings with every default filled in (render.py holds the defaults)."""
    return render.resolve_settings(settings)


class FilterModule:
    def filters(self):
        funcs = (
            node_plan,
            fleet_plan,
            plan_table,
            render_daemonsets,
            render_fleet,
            prune_scope,
            departed_nodes,
            release_patches,
            node_taints,
            node_patches,
            apply_needed,
            gpu_taint_removals,
            gpu_taint_nodes,
            stock_plugin_exclusion,
            split_daemonset_name,
            resolve_plugin_settings,
        )
        return wrap_filters(funcs, refusals)
