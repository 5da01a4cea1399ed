"""Filters for workloads on DRA nodes: where a GPU is, a claim for an isolated GPU, and the tolerations of
gpusplit's device taints (plugins/plugin_utils/_dra/, rendered by plugins/plugin_utils/_dra/render.py).

    {{ fleet_input | gpusplit.k8s.dra_locate_gpu(uuid) }}
    {{ located | gpusplit.k8s.dra_diagnostic_claim('diag', 'ops') }}
    {{ 'NoSchedule' | gpusplit.k8s.dra_host_share_toleration }}
    {{ none | gpusplit.k8s.dra_isolation_toleration }}

What the roles dra_driver and dra_split and the playbook isolate_gpu.yml work out they do in their own steps on
the controller (plugins/plugin_utils/role_steps.py). Every refusal becomes one AnsibleFilterError listing all
messages. Each filter is documented in plugins/filter/<name>.yml (ansible-doc -t filter gpusplit.k8s.<name>).
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.plugin_utils.filter_errors import filters as wrap_filters
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.lazy import lazy

_names = lazy("module_utils._dra.names")
planner = lazy("module_utils._split.planner")
render = lazy("plugin_utils.split_render")
_claims = lazy("plugin_utils._dra.claims")
_isolation = lazy("plugin_utils._dra.isolation")
_dra_render = lazy("plugin_utils._dra.render")


def refusals():
    """The exception types this file's filters refuse with, and their titles."""
    return {
        _names.DraError: "gpusplit DRA",
        planner.PlanError: "gpusplit split plan",
        render.RenderError: "gpusplit render",
    }


def dra_locate_gpu(fleet_input, uuid):
    """{host, node, mode, uuid, minor_number, device, ...} of one GPU UUID in the planner input."""
    return _isolation.locate_gpu(fleet_input, uuid)


def dra_isolation_toleration(effect=None):
    """A DeviceToleration for gpusplit's isolation taint (every effect when none is given)."""
    return _claims.isolation_toleration(effect)


def dra_diagnostic_claim(located, name, namespace, kind="ResourceClaim"):
    """A claim for exactly one isolated GPU (by UUID), tolerating its isolation taint."""
    return _dra_render.diagnostic_claim(name, namespace, located, kind)


def dra_host_share_toleration(effect="NoSchedule"):
    """A DeviceToleration for gpusplit's host-share taint."""
    return _claims.host_share_toleration(effect)


class FilterModule:
    def filters(self):
        funcs = (
            dra_locate_gpu,
            dra_isolation_toleration,
            dra_diagnostic_claim,
            dra_host_share_toleration,
        )
        return wrap_filters(funcs, refusals)
