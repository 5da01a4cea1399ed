# Copyright: gpusplit contributors
# Apache-2.0
"""Taking a split back (playbooks/unsplit.yml, docs/undo.md): decided on the controller.

``gpusplit_unsplit_to`` says where a node's GPUs go:

- ``kubernetes``: every healthy GPU to Kubernetes, under the device plugin the cluster had before gpusplit (a
  device plugin gpusplit does not own that may run on the node once gpusplit's labels are gone); where there
  is none the run refuses unless ``gpusplit_unsplit_plugin: none``. The hand-over order follows the node's
  kubelet (:func:`handover_order`).
- ``host``: no GPU is left to Kubernetes; the pods holding GPUs are dealt with by the re-split's own role
  (gpu_resplit, ``gpusplit_resplit_policy``) on the plan :func:`unsplit_plan` makes, then the split plugin goes.

Both run the re-split's checks on :func:`unsplit_plan`, a fleet plan in which every healthy GPU of a node has
the target's share: the pods in the way (``host``) and the host processes on GPUs going to Kubernetes
(``kubernetes``) are found and refused, evicted or waited for by the same code as a re-split.
"""

from __future__ import annotations

import copy

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, type_name
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.names import label_value
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.versions import format_version, parse_version
from ansible_collections.gpusplit.k8s.plugins.module_utils._split import verify
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.gpu_operator_checks import may_run_on
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.resplit import PLUGIN_SELECTOR
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.stock_plugin import helm_release

TARGETS = ("kubernetes", "host")
HOST_FILES = ("restore", "keep", "remove")
PLUGINS = ("stock", "none")
# the kubelet release with the fix of kubernetes#121994: a second plugin of one resource registering does not
# take the first one's devices away, so the stock plugin may register before gpusplit's goes
OVERLAP_FIXED = (1, 37, 2)
# what keeps another device plugin off a node whose GPUs are the host's (unsplit to host keeps these labels)
FENCE_LABELS = (render.LABEL_SPLIT, render.LABEL_OPERATOR_DEVICE_PLUGIN)


class UnsplitError(GpusplitError):
    """An unsplit refused: its settings, or what the cluster holds."""

    title = "unsplit"


def check_settings(to=None, host_files="restore", plugin="stock"):
    """Refuse (UnsplitError, every problem at once) settings that say no clear target; before any change."""
    errors = []
    if to in (None, ""):
        errors.append(
            "gpusplit_unsplit_to is required: where the GPUs of the nodes in the play go, "
            "-e gpusplit_unsplit_to=kubernetes (every healthy GPU back to the cluster's own device plugin) or "
            "-e gpusplit_unsplit_to=host (no GPU left to Kubernetes)"
        )
    elif to not in TARGETS:
        errors.append(
            f"gpusplit_unsplit_to: {to!r} ({type_name(to)}) is not one of {', '.join(TARGETS)}; "
            "say where the GPUs go, e.g. -e gpusplit_unsplit_to=kubernetes"
        )
    if host_files not in HOST_FILES:
        errors.append(
            f"gpusplit_unsplit_host_files: {host_files!r} is not one of {', '.join(HOST_FILES)} "
            "(restore puts back the toolkit's config.toml gpusplit backed up, remove takes out only gpusplit's "
            "keys, keep leaves the hardening in place)"
        )
    if plugin not in PLUGINS:
        errors.append(
            f"gpusplit_unsplit_plugin: {plugin!r} is not one of {', '.join(PLUGINS)} (stock: the device plugin "
            "the cluster had before gpusplit; none: leave the node without a device plugin)"
        )
    if errors:
        raise UnsplitError(errors)
    return {"to": to, "host_files": host_files, "plugin": plugin}


def _nodes(plan):
    if not isinstance(plan, dict) or not isinstance(plan.get("nodes"), dict):
        raise UnsplitError(f"the fleet plan: expected a mapping with nodes, got {type_name(plan)}")
    return plan["nodes"]


def healthy_uuids(node_plan):
    """The node's GPUs that are not excluded (lost, unhealthy), in index order."""
    excluded = set(node_plan.get("excluded") or [])
    return [
        g["uuid"]
        for g in sorted(node_plan.get("gpus") or [], key=lambda g: g.get("index", 0))
        if g.get("share") != "excluded" and g.get("uuid") not in excluded
    ]


def unsplit_plan(plan, to):
    """The fleet plan with every healthy GPU of each node in ``to``'s share (the re-split's checks run on it)."""
    check_settings(to)
    out = copy.deepcopy(plan)
    for node_plan in _nodes(out).values():
        keep = healthy_uuids(node_plan)
        share = "kubernetes" if to == "kubernetes" else "host"
        for gpu in node_plan.get("gpus") or []:
            if gpu.get("uuid") in keep:
                gpu["share"] = share
        k8s = keep if to == "kubernetes" else []
        node_plan["kubernetes_uuids"] = list(k8s)
        node_plan["host_uuids"] = [] if to == "kubernetes" else list(keep)
        node_plan["kubernetes_count"] = len(k8s)
        node_plan["host_count"] = len(node_plan["host_uuids"])
        node_plan["kubernetes_mig_uuids"] = []
        node_plan["resources"] = {node_plan.get("resource_name") or "nvidia.com/gpu": len(k8s)}
    return out


# ---------------------------------------------------------------------------------------------
# the cluster as it is


def owned_label_keys(node, field_manager="gpusplit"):
    """The label keys of ``node`` that ``field_manager`` owns (its managedFields, server-side apply)."""
    keys = []
    for entry in ((node or {}).get("metadata") or {}).get("managedFields") or []:
        if entry.get("manager") != field_manager:
            continue
        labels = ((entry.get("fieldsV1") or {}).get("f:metadata") or {}).get("f:labels") or {}
        keys.extend(k[2:] for k in labels if k.startswith("f:"))
    return sorted(set(keys))


def handover_order(node):
    """``stock_first`` where the node's kubelet has the fix of kubernetes#121994 (two plugins of one resource
    may overlap), else ``split_first``; with the kubelet's version."""
    text = (((node or {}).get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion")
    version = parse_version(text) if isinstance(text, str) else None
    if version is None:
        return {"order": "split_first", "kubelet": text or "unknown"}
    return {
        "order": "stock_first" if version >= OVERLAP_FIXED else "split_first",
        "kubelet": format_version(version),
    }


def _pod_spec(ds):
    return (((ds or {}).get("spec") or {}).get("template") or {}).get("spec") or {}


def stock_plugins(daemonsets, node, labels_after):
    """The device-plugin DaemonSets gpusplit does not own that may run on ``node`` with ``labels_after``
    (the node's labels once gpusplit's are gone): ``(may_run, excluded_by_helm)``."""
    may, helm = [], []
    for ds in verify.unmanaged_plugin_daemonsets(daemonsets):
        if may_run_on(_pod_spec(ds), node, labels_after):
            may.append(ds)
        elif helm_release(ds) is not None:
            helm.append(ds)
    return may, helm


def _name(obj):
    meta = (obj or {}).get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name"))


def cluster_plan(plan, to, nodes, daemonsets, plugin="stock", field_manager="gpusplit", gpu_hosts=None):
    """What the cluster side of the unsplit does, per node of ``plan``, and what it refuses.

    ``nodes``: the live Node objects (labels, annotations, taints, managedFields, nodeInfo); ``daemonsets``: every
    device-plugin DaemonSet. Returns ``{"nodes": [...], "refusals": [...], "prune": [...], "node_patches": [...],
    "taint_nodes": [...], "lines": [...]}``; ``prune`` removes the split DaemonSets of the planned nodes.
    """
    check_settings(to, plugin=plugin)
    planned = _nodes(plan)
    live = {((n or {}).get("metadata") or {}).get("name"): n for n in nodes or []}
    out = {"nodes": [], "refusals": [], "node_patches": [], "taint_nodes": [], "lines": []}
    names = []
    for host in sorted(planned):
        node_plan = planned[host]
        name = node_plan["node"]
        node = live.get(name)
        if node is None:
            out["refusals"].append(f"{name}: no such node in the cluster (host {host}); nothing was changed")
            continue
        names.append(name)
        meta = node.get("metadata") or {}
        labels = dict(meta.get("labels") or {})
        owned = owned_label_keys(node, field_manager)
        after = {k: v for k, v in labels.items() if k not in owned}
        healthy = healthy_uuids(node_plan)
        entry = {
            "host": host,
            "node": name,
            "owned_labels": owned,
            "expected": len(healthy) if to == "kubernetes" else 0,
            "resource": node_plan.get("resource_name") or "nvidia.com/gpu",
            **handover_order(node),
        }
        tainted = render.ANNOTATION_GPU_TAINT in (meta.get("annotations") or {}) and render.has_gpu_taint(
            node
        )
        if tainted:
            out["taint_nodes"].append({"name": name, "absent": [dict(render.GPU_TAINT)]})
        if to == "host":
            keep = {k: labels[k] for k in FENCE_LABELS if k in owned and k in labels}
            out["node_patches"].append(
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": keep}}
            )
            entry["stock"] = []
            entry["order"] = "split_only"
            out["lines"].append(
                f"{name}: split plugin removed, the node advertises 0 GPUs; gpusplit's labels but "
                f"{', '.join(keep) or 'none'} taken off{'; GPU taint taken off' if tainted else ''}"
            )
        else:
            may, helm = stock_plugins(daemonsets, name, after)
            entry["stock"] = [_name(ds) for ds in may]
            out["node_patches"].append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
            if not may and plugin != "none":
                if helm:
                    for ds in helm:
                        rel = helm_release(ds)
                        out["refusals"].append(
                            f"{name}: the device plugin {_name(ds)} of the Helm release '{rel['release']}' (namespace "
                            f"{rel['namespace']}) is kept off this node by its values (the affinity on "
                            f"{render.LABEL_SPLIT}); gpusplit does not change a release's values. Take the "
                            f"'{render.LABEL_SPLIT} NotIn [true]' expression out of the release's affinity value, "
                            f"run helm upgrade -n {rel['namespace']} {rel['release']}, then run this again. "
                            "Nothing was changed."
                        )
                else:
                    out["refusals"].append(
                        f"{name}: no device plugin but gpusplit's would run on this node once gpusplit's labels are "
                        "gone, so its GPUs would go to no one. Install the cluster's device plugin (the NVIDIA device "
                        "plugin's chart or the GPU Operator) first, or set gpusplit_unsplit_plugin=none to leave the "
                        "node without one. Nothing was changed."
                    )
            if plugin == "none" and not may:
                entry["expected"] = 0
                entry["order"] = "split_only"
            out["lines"].append(
                f"{name}: every healthy GPU ({len(healthy)}) back to "
                f"{', '.join(entry['stock']) or 'no device plugin (gpusplit_unsplit_plugin=none)'}; "
                f"kubelet {entry['kubelet']}: "
                + {
                    "stock_first": "the stock plugin registers before the split plugin goes (no gap)",
                    "split_first": "the split plugin goes first, the gap until the stock plugin registers is measured",
                    "split_only": "the split plugin goes",
                }[entry["order"]]
                + f"; gpusplit's labels ({', '.join(owned) or 'none'}) taken off"
                + ("; GPU taint taken off" if tainted else "")
            )
        out["nodes"].append(entry)
    values = ",".join(sorted(label_value(n) for n in names))
    # the split DaemonSets, and the config files of those that share their GPUs (docs/sharing.md)
    out["prune"] = (
        [
            {
                "api_version": api_version,
                "kind": kind,
                "label_selector": f"{PLUGIN_SELECTOR},{render.LABEL_NODE} in ({values})",
            }
            for api_version, kind in (("apps/v1", "DaemonSet"), ("v1", "ConfigMap"))
        ]
        if names
        else []
    )
    out["stock_first"] = [n["node"] for n in out["nodes"] if n["order"] == "stock_first"]
    return out


def allocatable_of(node, resource="nvidia.com/gpu"):
    """The node's allocatable ``resource`` as an int (0 where absent)."""
    value = (((node or {}).get("status") or {}).get("allocatable") or {}).get(resource, "0")
    try:
        return int(str(value))
    except ValueError:
        return 0


def verify_nodes(entries, nodes):
    """``(ok, lines)``: each node's allocatable against what the unsplit leaves (``expected``)."""
    live = {((n or {}).get("metadata") or {}).get("name"): n for n in nodes or []}
    ok, lines = True, []
    for entry in entries or []:
        have = allocatable_of(live.get(entry["node"]), entry["resource"])
        good = have == entry["expected"]
        ok = ok and good
        lines.append(
            f"{entry['node']}: {entry['resource']} allocatable {have}, expected {entry['expected']}"
            + ("" if good else " (NOT as expected)")
        )
    return ok, lines
