"""Filters for GPU Operator mode (plugins/plugin_utils/gpu_operator.py) and the plugin collision check.

    {{ gpusplit_fleet_plan | gpusplit.k8s.operator_config(mig_configs, clusterpolicies, settings, nodes, daemonsets) }}
    {{ hostvars | gpusplit.k8s.mig_configs(gpusplit_fleet_plan.nodes.keys() | list) }}
    {{ daemonsets | gpusplit.k8s.colliding_plugins(gpusplit_fleet_plan, gpusplit_operator_managed) }}
    {{ pods | gpusplit.k8s.operator_plugin_pods(gpusplit_fleet_plan) }}

Every refusal becomes one AnsibleFilterError listing all messages.
Each filter is documented in plugins/filter/<name>.yml (ansible-doc -t filter gpusplit.k8s.<name>).
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.plugin_utils.filter_errors import filters as wrap_filters
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.lazy import lazy

planner = lazy("module_utils._split.planner")
gpu_operator = lazy("plugin_utils.gpu_operator")
gpu_operator_checks = lazy("plugin_utils.gpu_operator_checks")
render = lazy("plugin_utils.render")


def refusals():
    """The exception types this file's filters refuse with, and their titles."""
    return {
        gpu_operator.OperatorError: "gpusplit GPU Operator mode",
        planner.PlanError: "gpusplit split plan",
        render.RenderError: "gpusplit render",
    }


def operator_config(plan, mig_configs=None, clusterpolicies=None, settings=None, nodes=None, daemonsets=None):
    """What the role gpu_operator applies: ClusterPolicy fields, Helm values, MIG labels, summary."""
    return gpu_operator.operator_config(plan, mig_configs, clusterpolicies, settings, nodes, daemonsets)


def mig_configs(hostvars, hosts):
    """{host: gpusplit_mig_config} for the hosts that set one."""
    out = {}
    for host in hosts:
        if not isinstance(host, str) or host not in hostvars:
            raise gpu_operator.OperatorError(
                f"host {host!r} is not in the inventory (hostvars has no such host)"
            )
        value = hostvars[host].get("gpusplit_mig_config")
        if value not in (None, ""):
            out[host] = value
    return out


def colliding_plugins(daemonsets, plan, operator_managed=False):
    """The device-plugin DaemonSets gpusplit does not own that can still run on a split node."""
    return gpu_operator_checks.colliding_plugin_daemonsets(daemonsets, plan, operator_managed)


def operator_plugin_pods(pods, plan):
    """Pods of the GPU Operator's device plugin that still run on a split node."""
    return gpu_operator_checks.operator_plugin_pods_on_split_nodes(pods, plan)


class FilterModule:
    def filters(self):
        funcs = (
            operator_config,
            mig_configs,
            colliding_plugins,
            operator_plugin_pods,
        )
        return wrap_filters(funcs, refusals)
