# Copyright: gpusplit contributors
# Apache-2.0
"""GPU Operator mode: the MIG geometry of each node's Kubernetes share, through the operator's MIG manager. Pure.

The MIG manager applies, on each node, the entry of a mig-parted config that the node's label
``nvidia.com/mig.config`` names; the config comes from the ConfigMap that the ClusterPolicy names in
``spec.migManager.config.name`` (key ``config.yaml``; the GPU Operator chart's values.yaml,
``migManager.config``). A stock entry such as ``all-1g.10gb`` selects ``devices: all`` and would
repartition the host share's GPUs too, so gpusplit never sets one on a node that keeps a host share
(gpu_operator_checks.mig_config_labels refuses it). Instead each node with a ``gpusplit_mig_geometry``
gets an entry of its own, ``gpusplit-<node>``, whose ``devices`` are only the Kubernetes share's GPUs
(by their index in this run's facts); mig-parted leaves every GPU that no entry selects alone.

One ConfigMap (``gpusplit-mig-parted-config`` in the operator's namespace) holds every node's entry and
the operator's default ``all-disabled`` (the ClusterPolicy's ``migManager.config.default``, applied to
nodes without the label); the one ClusterPolicy names it. See docs/sharing.md.
"""

from __future__ import annotations

import yaml

from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.names import LABEL_MANAGED_BY, MANAGED_BY
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.mig_geometry import (
    LAYOUT_PREFIX,
    layout_name,
    mig_parted_layout,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.modes import mode_has
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import node_plans

CONFIGMAP_NAME = "gpusplit-mig-parted-config"
CONFIG_KEY = "config.yaml"
DEFAULT_LAYOUT = (
    "all-disabled"  # the ClusterPolicy's migManager.config.default (CRD enum: all-disabled or "")
)
LABEL_MIG_CONFIG = "nvidia.com/mig.config"


def node_layouts(plan):
    """{node: (entry name, entries)} for every gpu_operator node whose plan carries a MIG geometry."""
    out = {}
    for p in node_plans(plan):
        if p.get("mig_geometry") and mode_has(p["mode"], "operator_managed"):
            out[p["node"]] = (layout_name(p["node"]), mig_parted_layout(p))
    return out


def config_document(layouts):
    """The mig-parted config (``version: v1``, ``mig-configs``) with every node's entry and ``all-disabled``."""
    configs = {DEFAULT_LAYOUT: [{"devices": "all", "mig-enabled": False}]}
    for _node, (name, entries) in sorted(layouts.items()):
        configs[name] = entries
    return {"version": "v1", "mig-configs": configs}


def render_configmap(namespace, layouts):
    """The ConfigMap the ClusterPolicy's ``spec.migManager.config.name`` names."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": CONFIGMAP_NAME,
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY},
        },
        "data": {
            CONFIG_KEY: yaml.safe_dump(config_document(layouts), sort_keys=False, default_flow_style=False)
        },
    }


def _live_config_name(live_policy):
    spec = (live_policy or {}).get("spec") or {}
    return ((spec.get("migManager") or {}).get("config") or {}).get("name") or None


def check_layouts(layouts, labels, live_policy, nodes, helm_config_name=None):
    """Errors (nothing changed yet) where gpusplit's ConfigMap would take a config away from someone.

    layouts: node_layouts(plan); labels: {node: gpusplit_mig_config} as mig_config_labels keeps them; live_policy: the ClusterPolicy gpusplit
    configures (None before the chart is installed); nodes: live Node objects; helm_config_name: the user's
    chart value ``migManager.config.name`` when the chart is installed by gpusplit.
    """
    if not layouts:
        return []
    errors = []
    for name in (_live_config_name(live_policy), helm_config_name):
        if name and name != CONFIGMAP_NAME:
            errors.append(
                f"gpusplit_mig_geometry on {', '.join(sorted(layouts))} needs the MIG manager to read gpusplit's "
                f"config (ConfigMap {CONFIGMAP_NAME}), but the ClusterPolicy's migManager.config.name is {name!r}, "
                "someone else's. Move its configs to the nodes' gpusplit_mig_geometry, or remove "
                "gpusplit_mig_geometry and partition with your own config. Nothing was changed."
            )
            break
    stock = {node: config for node, config in (labels or {}).items() if config != DEFAULT_LAYOUT}
    for n in nodes or []:
        meta = n.get("metadata") or {}
        node, value = meta.get("name"), (meta.get("labels") or {}).get(LABEL_MIG_CONFIG)
        # a gpusplit-<node> entry left on a node that no longer asks for one is gpusplit's own: reported, not refused
        if value and value != DEFAULT_LAYOUT and not str(value).startswith(LAYOUT_PREFIX):
            if node not in layouts and node not in (labels or {}):
                stock[node] = value
    for node, config in sorted(stock.items(), key=lambda kv: str(kv[0])):
        errors.append(
            f"{node}: {LABEL_MIG_CONFIG}={config} names a config of the MIG manager's own ConfigMap, which "
            f"gpusplit_mig_geometry on {', '.join(sorted(layouts))} replaces with gpusplit's ({CONFIGMAP_NAME}: "
            f"{DEFAULT_LAYOUT} and one gpusplit-<node> entry per node); give {node} a gpusplit_mig_geometry "
            "instead. Nothing was changed."
        )
    return errors


def default_layout_warnings(plan, labels, live_policy, helm_values, nodes, migmanager_enabled=True):
    """Warnings for gpu_operator nodes whose host keeps MIG-enabled GPUs and that carry no ``nvidia.com/mig.config``:
    the MIG manager applies its default config (``migManager.config.default``, ``all-disabled`` unless set to "")
    to every GPU of such a node, the host's too (the ClusterPolicy CRD's description of that field)."""
    if not migmanager_enabled:
        return []
    source = live_policy if live_policy is not None else {"spec": helm_values or {}}
    config = ((source.get("spec") or {}).get("migManager") or {}).get("config") or {}
    default = config.get("default", DEFAULT_LAYOUT)
    if not default:
        return []
    labelled = set(labels or {})
    for n in nodes or []:
        meta = n.get("metadata") or {}
        if (meta.get("labels") or {}).get(LABEL_MIG_CONFIG):
            labelled.add(meta.get("name"))
    out = []
    for p in node_plans(plan):
        if not mode_has(p["mode"], "operator_managed") or p["node"] in labelled:
            continue
        host_migs = [
            g["uuid"] for g in p.get("gpus") or [] if g.get("share") == "host" and g.get("mig_enabled")
        ]
        if host_migs:
            out.append(
                f"{p['node']}: the host keeps MIG-enabled GPU(s) {', '.join(host_migs)}, and the node has no "
                f"{LABEL_MIG_CONFIG} label: the GPU Operator's MIG manager applies its default config ({default}) "
                "to every GPU of such a node, the host's too. Give the node a gpusplit_mig_geometry (its own config "
                "leaves the host's GPUs alone), or set the ClusterPolicy's migManager.config.default to \"\""
            )
    return out
