# Copyright: gpusplit contributors
# Apache-2.0
"""GPU Operator mode: the checks over the fleet plan and the plugin collisions. Pure.

- the one MIG strategy of the nodes the operator manages (the mode table's ``operator_managed``);
- the ``nvidia.com/mig.config`` labels the inventory asks for, and whether they can work;
- whether a hardened toolkit would blind the split plugins (modes with ``split_plugin``);
- which device-plugin DaemonSets (and pods) that gpusplit does not own can still land on a split
  node (the operator's own plugin cannot: it is gated by ``nvidia.com/gpu.deploy.device-plugin``).

``gpu_operator.py`` puts these together into what the role gpu_operator does. See docs/gpu-operator.md.
"""

from __future__ import annotations

import re

from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.names import (
    LABEL_MANAGED_BY,
    LABEL_VALUE_RE,
    MANAGED_BY,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.scheduling import requirement_matches
from ansible_collections.gpusplit.k8s.plugins.module_utils._split import verify
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.modes import mode_has, names_where
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import node_plans
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render

PLUGIN_HARDENING_NEEDED = "volume-mounts"
LABEL_DEPLOY_PREFIX = "nvidia.com/gpu.deploy."
LABEL_DEVICE_PLUGIN = render.LABEL_OPERATOR_DEVICE_PLUGIN  # nvidia.com/gpu.deploy.device-plugin
MIG_CONFIG_DISABLED = "all-disabled"
# mig-parted's stock configs that do not give one profile per GPU (mig_strategy single needs one)
MIG_CONFIGS_NOT_SINGLE = ("all-enabled", "all-balanced")
_MIG_CONFIG_ONE_PROFILE = re.compile(r"^all-\d+g\.\d+gb(\+me)?$")


def dig(obj, *path, default=None):
    """``obj[path[0]][path[1]]...``, or ``default`` where a step is missing or not a mapping."""
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return default
        obj = obj[key]
    return obj


def operator_nodes(plan):
    """The node plans whose mode runs under the GPU Operator (the mode table's ``operator_managed``)."""
    return [p for p in node_plans(plan) if mode_has(p["mode"], "operator_managed")]


def fleet_mig_strategy(plan, requested=None):
    """(strategy or None, errors): the one MIG strategy of every gpu_operator node."""
    by_strategy = {}
    for p in operator_nodes(plan):
        by_strategy.setdefault(p["mig_strategy"], []).append(p["host"])
    errors = []
    if len(by_strategy) > 1:
        detail = "; ".join(f"{s}: {', '.join(hosts)}" for s, hosts in sorted(by_strategy.items()))
        errors.append(
            "the GPU Operator has one MIG strategy for the whole cluster (ClusterPolicy "
            f"spec.mig.strategy), but the gpu_operator nodes ask for several ({detail}). Give every "
            "gpu_operator node the same gpusplit_mig_strategy: single also serves nodes without MIG "
            "(whole GPUs), mixed serves several MIG profiles"
        )
        return None, errors
    strategy = next(iter(by_strategy), None)
    if requested is not None and strategy is not None and requested != strategy:
        errors.append(
            f"gpusplit_operator_mig_strategy is {requested}, but the gpu_operator nodes use "
            f"{strategy} ({', '.join(by_strategy[strategy])}); the split plugins and the operator must agree"
        )
        return None, errors
    return (requested if strategy is None else strategy), errors


def mig_config_labels(plan, configs, migmanager_enabled=True):
    """({node: config}, errors, warnings) for ``configs`` = {host: gpusplit_mig_config}."""
    plans = {p["host"]: p for p in node_plans(plan)}
    labels, errors, warnings = {}, [], []
    for host in sorted(configs or {}, key=str):
        config = configs[host]
        if config in (None, ""):
            continue
        p = plans.get(host)
        if p is None:
            continue  # not in this play's plan
        if not isinstance(config, str) or not LABEL_VALUE_RE.match(config) or len(config) > 63:
            errors.append(f"{host}: gpusplit_mig_config {config!r} is not a valid label value")
            continue
        if not mode_has(p["mode"], "operator_managed"):
            operator_modes = " or ".join(names_where(operator_managed=True))
            errors.append(
                f"{host}: gpusplit_mig_config {config!r} needs the GPU Operator's MIG manager, but the "
                f"node is in mode {p['mode']} (set gpusplit_mode {operator_modes}, or configure MIG yourself)"
            )
            continue
        outside = list(p.get("host_uuids") or []) + [e["uuid"] for e in p.get("excluded") or []]
        if outside:
            errors.append(
                f"{host}: gpusplit_mig_config {config!r} is one MIG layout for every GPU of the node: the MIG "
                f"manager would also repartition the GPU(s) the host keeps, {', '.join(outside)}. Declare the "
                "Kubernetes share's layout with gpusplit_mig_geometry instead (gpusplit then gives this node a "
                "mig-parted config that lists only the Kubernetes share's GPUs). Nothing was changed."
            )
            continue
        if p.get("mig_geometry"):
            errors.append(
                f"{host}: gpusplit_mig_config {config!r} and gpusplit_mig_geometry both set the node's MIG "
                "layout; keep gpusplit_mig_geometry"
            )
            continue
        strategy = p["mig_strategy"]
        if strategy == "none" and config != MIG_CONFIG_DISABLED:
            errors.append(
                f"{host}: gpusplit_mig_config {config!r} enables MIG, but gpusplit_mig_strategy is none: "
                "the plugin would advertise the MIG GPUs as whole GPUs. Use single or mixed"
            )
            continue
        if strategy == "single" and config in MIG_CONFIGS_NOT_SINGLE:
            errors.append(
                f"{host}: gpusplit_mig_config {config!r} does not give every GPU one MIG profile, which "
                "mig_strategy single needs; use an all-<profile> config or mig_strategy mixed"
            )
            continue
        if (
            strategy == "single"
            and config != MIG_CONFIG_DISABLED
            and not _MIG_CONFIG_ONE_PROFILE.match(config)
        ):
            warnings.append(
                f"{host}: gpusplit_mig_config {config!r} is not a stock all-<profile> config; with "
                "mig_strategy single it must give every GPU of the Kubernetes share the same profile"
            )
        labels[p["node"]] = config
    if labels and not migmanager_enabled:
        errors.append(
            f"gpusplit_mig_config is set for {', '.join(sorted(labels))}, but the ClusterPolicy has "
            "spec.migManager.enabled false: nothing would apply the nvidia.com/mig.config label. "
            "Enable the MIG manager or remove gpusplit_mig_config"
        )
    return labels, errors, warnings


def check_plugin_hardening(plan, plugin_hardening, toolkit_hardening):
    """Errors when a hardened toolkit would hide the GPUs from the split plugins (docs/hardening.md)."""
    if not toolkit_hardening or plugin_hardening == PLUGIN_HARDENING_NEEDED:
        return []
    hosts = [
        p["host"]
        for p in node_plans(plan)
        if mode_has(p["mode"], "split_plugin") and p["kubernetes_count"] > 0
    ]
    if not hosts:
        return []
    return [
        "gpusplit_operator_toolkit_hardening sets ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED="
        "false in the operator's toolkit, so an unprivileged split plugin no longer gets its own "
        f"NVIDIA_VISIBLE_DEVICES honoured; the split plugins of {', '.join(hosts)} run with hardening "
        f"{plugin_hardening!r} and would advertise 0 GPUs. Set gpusplit_plugin_settings.hardening: "
        "volume-mounts (DEVICE_LIST_STRATEGY=volume-mounts, CAP_SYS_ADMIN, never privileged), or set "
        "gpusplit_operator_toolkit_hardening: false"
    ]


# --------------------------------------------------------------------------------------------
# collisions: unmanaged device plugins that can still land on a split node


def _pod_spec(obj):
    if obj.get("kind") == "DaemonSet" or "template" in (obj.get("spec") or {}):
        return dig(obj, "spec", "template", "spec", default={}) or {}
    return obj.get("spec") or {}


def _term_may_match(term, node, labels):
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches no node
    for expr in exprs:
        if expr.get("key") in labels and not requirement_matches(expr, labels):
            return False
    for field in fields:
        if field.get("key") == "metadata.name" and not requirement_matches(
            {**field, "key": "name"}, {"name": node}
        ):
            return False
    return True


def may_run_on(pod_spec, node, known_labels):
    """False only when the pod spec cannot select ``node`` given the labels gpusplit sets there.

    Labels gpusplit does not set are unknown, so a selector on them may match (conservative).
    """
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if key in known_labels and known_labels[key] != value:
            return False
    required = dig(pod_spec, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
    terms = (required or {}).get("nodeSelectorTerms") or []
    if required and not any(_term_may_match(t, node, known_labels) for t in terms):
        return False
    return True


def _other_operator_operand(pod_spec):
    """The operator gates each operand by its own nvidia.com/gpu.deploy.<operand>=true label.

    GPU feature discovery runs from the k8s-device-plugin image too, but only the device-plugin
    operand advertises GPUs: any other gated operand is not a device plugin.
    """
    gates = {
        k
        for k, v in (pod_spec.get("nodeSelector") or {}).items()
        if k.startswith(LABEL_DEPLOY_PREFIX) and v == "true"
    }
    required = dig(pod_spec, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
    terms = (required or {}).get("nodeSelectorTerms") or []
    if terms:
        per_term = []
        for term in terms:
            per_term.append(
                {
                    e.get("key")
                    for e in term.get("matchExpressions") or []
                    if str(e.get("key", "")).startswith(LABEL_DEPLOY_PREFIX)
                    and e.get("operator") == "In"
                    and e.get("values") == ["true"]
                }
            )
        if all(per_term):
            gates |= set.intersection(*per_term)
    return bool(gates) and LABEL_DEVICE_PLUGIN not in gates


def colliding_plugin_daemonsets(daemonsets, plan, operator_managed=False):
    """The device-plugin DaemonSets gpusplit does not own that can run on a split node.

    A DaemonSet is left out when its pod template cannot select any split node given the labels
    gpusplit sets on them (render.node_labels): the GPU Operator's plugin requires
    nvidia.com/gpu.deploy.device-plugin=true, which is false on every split node in mode
    gpu_operator (and in any mode with operator_managed); a stock plugin already kept off with
    gpusplit.io/split NotIn [true]. Other operator operands (GFD) are no device plugins.
    """
    split = [p for p in node_plans(plan) if p["split"]]
    out = []
    for ds in verify.unmanaged_plugin_daemonsets(daemonsets):
        spec = _pod_spec(ds)
        if _other_operator_operand(spec):
            continue
        if any(may_run_on(spec, p["node"], render.node_labels(p, operator_managed)) for p in split):
            out.append(ds)
    return out


def operator_plugin_pods_on_split_nodes(pods, plan):
    """Pods of the operator's device plugin (gated by the device-plugin label) still on split nodes."""
    split = {p["node"] for p in node_plans(plan) if p["split"]}
    out = []
    for pod in pods or []:
        spec = pod.get("spec") or {}
        if spec.get("nodeName") not in split:
            continue
        if not any(verify.is_device_plugin_container(c) for c in spec.get("containers") or []):
            continue
        if ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_MANAGED_BY) == MANAGED_BY:
            continue
        if (spec.get("nodeSelector") or {}).get(LABEL_DEVICE_PLUGIN) == "true" or not may_run_on(
            spec, spec["nodeName"], {LABEL_DEVICE_PLUGIN: "false"}
        ):
            out.append(pod)
    return out
