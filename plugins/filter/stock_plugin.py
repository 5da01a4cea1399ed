"""Filters for taking split nodes over from a device plugin gpusplit does not own (plugins/plugin_utils/stock_plugin.py).

    {{ colliding | gpusplit.k8s.stock_plugin_helm_releases }}
    {{ daemonsets | gpusplit.k8s.stock_plugin_pod_queries }}
    {{ pods | gpusplit.k8s.stock_plugin_pods(gpusplit_fleet_plan) }}

Every refusal becomes one AnsibleFilterError listing all messages.
Each filter is documented in plugins/filter/<name>.yml (ansible-doc -t filter gpusplit.k8s.<name>).
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.plugin_utils.filter_errors import filters as wrap_filters
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.lazy import lazy

planner = lazy("module_utils._split.planner")
render = lazy("plugin_utils.render")
stock_plugin = lazy("plugin_utils.stock_plugin")


def refusals():
    """The exception types this file's filters refuse with, and their titles."""
    return {planner.PlanError: "gpusplit split plan", render.RenderError: "gpusplit render"}


def stock_plugin_helm_releases(daemonsets):
    """The Helm-managed DaemonSets among these, each with its release and the values that exclude split nodes."""
    return stock_plugin.helm_managed(daemonsets)


def stock_plugin_pod_queries(daemonsets):
    """How to list the pods of every device-plugin DaemonSet gpusplit does not own."""
    return stock_plugin.pod_queries(daemonsets)


def stock_plugin_pods(pods, plan):
    """Device-plugin pods that are not gpusplit's and are still on a split node."""
    return stock_plugin.pods_on_split_nodes(pods, plan)


class FilterModule:
    def filters(self):
        return wrap_filters(
            (stock_plugin_helm_releases, stock_plugin_pod_queries, stock_plugin_pods), refusals
        )
