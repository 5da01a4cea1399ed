"""Filters exposing DRA mode (plugins/plugin_utils/_dra/, rendered by plugins/plugin_utils/_dra/render.py)
to the roles dra_driver, dra_split and the playbooks dra.yml and isolate_gpu.yml.

    {{ gpusplit_fleet_plan | gpusplit.k8s.dra_host_rules }}
    {{ gpusplit_dra_driver_settings | gpusplit.k8s.dra_chart_values }}
    {{ cluster | gpusplit.k8s.dra_preflight(hosts, pods, skip) }}
    {{ fleet_input | gpusplit.k8s.dra_locate_gpu(uuid) }}

Every refusal becomes one AnsibleFilterError listing all messages.
Each filter is documented in plugins/filter/<name>.yml (ansible-doc -t filter gpusplit.k8s.<name>).
"""

from __future__ import annotations

import base64

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import type_name
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.filter_errors import filters as wrap_filters
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.lazy import lazy

_names = lazy("module_utils._dra.names")
planner = lazy("module_utils._split.planner")
render = lazy("plugin_utils.render")
_chart = lazy("plugin_utils._dra.chart")
_claims = lazy("plugin_utils._dra.claims")
_isolation = lazy("plugin_utils._dra.isolation")
_preflight = lazy("plugin_utils._dra.preflight")
_published = lazy("plugin_utils._dra.published")
_dra_render = lazy("plugin_utils._dra.render")
_rules = lazy("plugin_utils._dra.rules")


def refusals():
    """The exception types this file's filters refuse with, and their titles."""
    return {
        _names.DraError: "gpusplit DRA",
        planner.PlanError: "gpusplit split plan",
        render.RenderError: "gpusplit render",
    }


def dra_nodes(plan):
    """The node plans in mode dra."""
    return _names.dra_node_plans(plan)


def dra_node_patches(plan, operator_managed=False):
    """Node objects with gpusplit's labels for the nodes in mode dra (the kubelet plugin selects on them)."""
    return [render.render_node_patch(p, operator_managed) for p in _names.dra_node_plans(plan)]


def dra_host_rules(plan, effect="NoSchedule", slices=None):
    """One DeviceTaintRule per host-share and excluded device of every node in mode dra.

    ``slices``: the live ResourceSlices, so that the MIG devices of a reserved MIG-enabled GPU get rules too.
    """
    return _dra_render.host_share_rules(plan, effect, slices)


def dra_rules_table(rules):
    return _rules.rules_table(rules)


def dra_chart_values(settings=None):
    """The dra-driver-nvidia-gpu chart values for a gpusplit fleet."""
    return _chart.chart_values(settings)


def dra_containerd_imports(config_text, config_path="/etc/containerd/config.toml"):
    """The absolute import globs of a containerd config."""
    for field, value in (("config_text", config_text), ("config_path", config_path)):
        if not isinstance(value, str):
            raise _names.DraError(
                f"{field}: expected a string (containerd's config.toml and its path), got {type_name(value)}"
            )
    return _preflight.containerd_imports(config_text, config_path)


def dra_slurped_files(results):
    """[{path, text}] from the results of a looped ansible.builtin.slurp (skipped items are left out)."""
    out = []
    for result in results or []:
        if result.get("skipped") or "content" not in result:
            continue
        text = base64.b64decode(result["content"]).decode("utf-8", errors="replace")
        out.append({"path": result.get("source") or result.get("item"), "text": text})
    return out


def dra_host_inputs(plan, hostvars):
    """{host: {node, driver_version, containerd}} of the hosts in mode dra, for the preflight."""
    out = {}
    for node_plan in _names.dra_node_plans(plan):
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


def dra_preflight(cluster_info, hosts, pods=None, skip=None, need_taint_rules=True):
    """The preflight report from k8s_cluster_info's result, the DRA hosts' inputs and their pods."""
    if not isinstance(cluster_info or {}, dict):
        raise _names.DraError(
            f"cluster_info: expected the result of kubernetes.core.k8s_cluster_info, got {type_name(cluster_info)}"
        )
    items = hosts.items() if isinstance(hosts, dict) else ()
    bad = sorted((h for h, v in items if not isinstance(v or {}, dict)), key=str)
    if not isinstance(hosts or {}, dict) or bad:
        what = f"hosts.{bad[0]}: got {type_name(hosts[bad[0]])}" if bad else f"hosts: got {type_name(hosts)}"
        raise _names.DraError(
            f"{what}; expected a mapping of host to its inputs (gpusplit.k8s.dra_host_inputs)"
        )
    info = cluster_info or {}
    server = ((info.get("version") or {}).get("server") or {}).get("kubernetes") or {}
    cluster = {"git_version": server.get("gitVersion"), "apis": info.get("apis") or {}}
    return _preflight.preflight(cluster, hosts, pods, skip or (), need_taint_rules)


def dra_preflight_table(report):
    return _preflight.preflight_table(report)


def dra_check_published(plan, slices):
    """Published ResourceSlices against the plan: errors when gpu-<minor> is another GPU."""
    return _published.check_published(plan, slices)


def dra_locate_gpu(fleet_input, uuid):
    """{host, node, mode, uuid, minor_number, device, ...} of one GPU UUID in the planner input."""
    return _isolation.locate_gpu(fleet_input, uuid)


def dra_isolation_rule(located, effect="None", reason=None):
    """The DeviceTaintRule isolating a located GPU."""
    return _dra_render.isolation_rule(located, effect, reason)


def dra_isolation_rules(located, effect="None", reason=None, slices=None):
    """Every DeviceTaintRule isolating a located GPU (its MIG devices too, from the live ResourceSlices)."""
    return _dra_render.isolation_rules(located, effect, reason, slices)


def dra_rules_of_gpu(rules, uuid, purpose="isolate"):
    """Names of the live gpusplit DeviceTaintRules of a purpose that name one GPU UUID."""
    return _rules.rules_of_gpu(rules, uuid, purpose)


def dra_isolation_targets(fleet_input, uuid=None, unhealthy=False):
    """The GPUs an isolate_gpu run acts on: the one UUID, or every GPU whose facts say it is unhealthy."""
    return _isolation.isolation_targets(fleet_input, uuid, unhealthy)


def dra_isolation_toleration(effect=None):
    """A DeviceToleration for gpusplit's isolation taint (every effect when none is given)."""
    return _claims.isolation_toleration(effect)


def dra_diagnostic_claim(located, name, namespace, kind="ResourceClaim"):
    """A claim for exactly one isolated GPU (by UUID), tolerating its isolation taint."""
    return _dra_render.diagnostic_claim(name, namespace, located, kind)


def dra_isolation_input(fleet_input, host, uuid, reason=None):
    """The planner input of one host with the GPU marked lost (the planner then excludes it)."""
    return _isolation.isolation_fleet_input(fleet_input, host, uuid, reason)


def dra_host_share_toleration(effect="NoSchedule"):
    """A DeviceToleration for gpusplit's host-share taint."""
    return _claims.host_share_toleration(effect)


class FilterModule:
    def filters(self):
        funcs = (
            dra_nodes,
            dra_node_patches,
            dra_host_rules,
            dra_rules_table,
            dra_chart_values,
            dra_containerd_imports,
            dra_slurped_files,
            dra_host_inputs,
            dra_preflight,
            dra_preflight_table,
            dra_check_published,
            dra_locate_gpu,
            dra_isolation_rule,
            dra_isolation_input,
            dra_isolation_rules,
            dra_isolation_targets,
            dra_rules_of_gpu,
            dra_isolation_toleration,
            dra_diagnostic_claim,
            dra_host_share_toleration,
        )
        return wrap_filters(funcs, refusals)
