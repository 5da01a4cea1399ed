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
import json

import yaml

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane import api_versions
from ansible_collections.gpusplit.k8s.plugins.module_utils._dra.names import PLAN_RULES_SELECTOR, device_name
from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, type_name
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.names import (
    LABEL_NODE,
    label_value,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.versions import format_version, parse_version
from ansible_collections.gpusplit.k8s.plugins.module_utils._split import verify
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.modes import SHARE_DRA
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._dra import render as dra_render
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._dra.chart import DEFAULT_DRIVER_SETTINGS
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.gpu_operator_checks import may_run_on
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.resplit import PLUGIN_SELECTOR
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.stock_plugin import helm_release

TARGETS = ("kubernetes", "host")
HOST_FILES = ("restore", "keep", "remove")
PLUGINS = ("stock", "none")
# what keeps another device plugin off a node whose GPUs are the host's (unsplit to host keeps these labels)
FENCE_LABELS = (render.LABEL_SPLIT, render.LABEL_OPERATOR_DEVICE_PLUGIN)
# the label gpusplit's DRA driver release runs its kubelet plugin by (mode dra: it stays on the node)
DRIVER_LABEL = (DEFAULT_DRIVER_SETTINGS["node_label"], DEFAULT_DRIVER_SETTINGS["node_label_value"])
# the DeviceTaintRule version the rules are rendered in (the cluster's may be another: cluster_api_versions)
DRA_RULES_VERSION = "resource.k8s.io/v1"
# what gpusplit_unsplit_wait_seconds 0 does: each wait reads the cluster once
WAIT_ZERO = "read the cluster once"


class UnsplitError(GpusplitError):
    """An unsplit refused: its settings, or what the cluster holds."""

    title = "unsplit"


BOOLEANS = {
    "true": True,
    "yes": True,
    "on": True,
    "1": True,
    "false": False,
    "no": False,
    "off": False,
    "0": False,
}


def as_bool(value, name, errors):
    """``value`` as a bool (as Ansible reads a boolean: true/false, yes/no, on/off, 1/0); else an error appended."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (str, int)) and str(value).strip().lower() in BOOLEANS:
        return BOOLEANS[str(value).strip().lower()]
    errors.append(f"{name}: {value!r} ({type_name(value)}) is not a boolean; say true or false")
    return False


def check_settings(
    to=None, host_files="restore", plugin="stock", cluster=False, force=False, releases=False, wait=120
):
    """Refuse (UnsplitError, every problem at once) settings that say no clear target; before any change."""
    errors = []
    try:
        wait = check_seconds(wait, "gpusplit_unsplit_wait_seconds", WAIT_ZERO)
    except UnsplitError as exc:
        errors.extend(exc.errors)
    cluster = as_bool(cluster, "gpusplit_unsplit_cluster", errors)
    force = as_bool(force, "gpusplit_unsplit_force", errors)
    releases = as_bool(releases, "gpusplit_unsplit_releases", errors)
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
    return {
        "to": to,
        "host_files": host_files,
        "plugin": plugin,
        "cluster": cluster,
        "force": force,
        "releases": releases,
        "wait": wait,
    }


def check_seconds(value, name, zero="refuse at once"):
    """``value`` (setting ``name``) as whole seconds from 0 (``zero`` says what 0 does) to 86400; else refused."""
    try:
        seconds = int(str(value).strip()) if not isinstance(value, bool) else None
    except ValueError:
        seconds = None
    if seconds is None or seconds < 0 or seconds > 86400 or not str(value).strip().isascii():
        raise UnsplitError(
            f"{name}: {value!r} ({type_name(value)}) is not a whole number of seconds from 0 ({zero}) to 86400"
        )
    return seconds


def check_helm_wait(value):
    """``gpusplit_unsplit_helm_wait_seconds`` as whole seconds (0: refuse at once); anything else refused."""
    return check_seconds(value, "gpusplit_unsplit_helm_wait_seconds")


def poll_until(read, wait_seconds, delay, sleep, clock):
    """Calls ``read`` (what is still left; empty when done) until it answers nothing or ``wait_seconds`` of wall
    clock (``clock``) have passed since the first call began, sleeping ``delay`` between calls but never past that
    deadline; a read begun before it is the last (so the whole wait ends within ``wait_seconds`` plus one read,
    however long each read takes). ``wait_seconds`` 0 reads once.

    Returns ``(left, seconds)``: the last answer and the seconds the wait took.
    """
    start = clock()
    deadline = start + max(0.0, float(wait_seconds))
    while True:
        left = read()
        now = clock()
        if not left or now >= deadline:
            return left, round(now - start, 1)
        sleep(max(0.0, min(float(delay), deadline - now)))


def plan_nodes(plan):
    if not isinstance(plan, dict) or not isinstance(plan.get("nodes"), dict):
        raise UnsplitError(f"the fleet plan: expected a mapping with nodes, got {type_name(plan)}")
    return plan["nodes"]


def healthy_uuids(node_plan):
    """The node's GPUs that are not excluded (lost, unhealthy), in index order."""
    # the planner lists each excluded GPU as a mapping (uuid, PCI bus id, reason)
    excluded = {e.get("uuid") for e in node_plan.get("excluded") or []}
    return [
        g["uuid"]
        # a GPU the host lost has no index: it sorts last
        for g in sorted(
            node_plan.get("gpus") or [], key=lambda g: (g.get("index") is None, g.get("index") or 0)
        )
        if g.get("share") != "excluded" and g.get("uuid") not in excluded
    ]


def unsplit_plan(plan, to):
    """The fleet plan with every healthy GPU of each node in ``to``'s share (the re-split's checks run on it)."""
    check_settings(to)
    out = copy.deepcopy(plan)
    for node_plan in plan_nodes(out).values():
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
        names = resource_names(node_plan)
        node_plan["resources"] = {names[0]: len(k8s)} if to == "kubernetes" else dict.fromkeys(names, 0)
        if _is_dra(node_plan):  # the DRA driver's names of the host share (what its DeviceTaintRules taint)
            node_plan["resources"] = {"nvidia.com/gpu": 0}
            node_plan["dra_devices"] = [
                device_name(g["minor_number"])
                for g in node_plan.get("gpus") or []
                if g.get("share") == "host" and g.get("minor_number") is not None
            ]
    return out


def resource_names(node_plan):
    """The resources the node's plan advertises, the first the one the unsplit verifies: the planner names one, or a
    list under MIG strategy mixed (nvidia.com/gpu and each nvidia.com/mig-<profile>)."""
    name = node_plan.get("resource_name")
    names = [n for n in name if isinstance(n, str) and n] if isinstance(name, list) else [name]
    return [n for n in names if isinstance(n, str) and n] or ["nvidia.com/gpu"]


def _is_dra(node_plan):
    return render.mode_of(node_plan).kubernetes_share == SHARE_DRA


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
    """``split_first`` on every kubelet, with the kubelet's version: NVIDIA's device plugin serves a resource on one
    fixed socket (``nvidia-gpu.sock`` for nvidia.com/gpu) and removes whatever file is there when it starts, so the
    stock plugin and gpusplit's split plugin cannot both be registered on a node; the fix of kubernetes#121994
    (kubelet 1.37.2) does not change that. The gap until the stock plugin registers is measured and reported."""
    text = (((node or {}).get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion")
    version = parse_version(text) if isinstance(text, str) else None
    return {"order": "split_first", "kubelet": format_version(version) if version else (text or "unknown")}


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


def object_name(obj):
    meta = (obj or {}).get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name"))


def cluster_plan(
    plan,
    to,
    nodes,
    daemonsets,
    plugin="stock",
    field_manager="gpusplit",
    gpu_hosts=None,
    dra_api_version=DRA_RULES_VERSION,
    dra_refusal=None,
    helm_wait=0,
    forced=None,
):
    """What the cluster side of the unsplit does, per node of ``plan``, and what it refuses.

    ``nodes``: the live Node objects (labels, annotations, taints, managedFields, nodeInfo); ``daemonsets``: every
    device-plugin DaemonSet; ``dra_api_version``: the DeviceTaintRule group/version the cluster serves (None: none
    gpusplit writes, ``dra_refusal`` says why); nodes in mode dra get ``dra_rules`` (to host: every healthy device
    tainted) and ``dra_prune`` (gpusplit's other rules of those nodes). A stock plugin of a Helm release whose values
    keep it off a node is refused, or with ``helm_wait`` (seconds) waited for (``helm_waits``: node, daemonset,
    labels_after, release, namespace; :func:`helm_still_off`). ``forced``: ``[{"host", "node"}]`` of the hosts not
    reached that ``gpusplit_unsplit_force`` takes back anyway (:func:`forced_node`).

    Returns ``{"nodes": [...], "refusals": [...], "prune": [...], "node_patches": [...], "taint_nodes": [...],
    "lines": [...], ...}``; ``prune`` removes the split DaemonSets of the planned (and forced) nodes.
    """
    check_settings(to, plugin=plugin)
    planned = plan_nodes(plan)
    live = {((n or {}).get("metadata") or {}).get("name"): n for n in nodes or []}
    out = {
        "nodes": [],
        "refusals": [],
        "node_patches": [],
        "taint_nodes": [],
        "lines": [],
        "dra_nodes": [],
        "helm_waits": [],
        "forced": [],
    }
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
            "resource": resource_names(node_plan)[0],
            **handover_order(node),
        }
        tainted = render.ANNOTATION_GPU_TAINT in (meta.get("annotations") or {}) and render.has_gpu_taint(
            node
        )
        if tainted:
            out["taint_nodes"].append({"name": name, "absent": [dict(render.GPU_TAINT)]})
        if _is_dra(node_plan):
            # mode dra: the DRA driver publishes the node's GPUs; gpusplit's DeviceTaintRules keep the host share
            # from claims. kubernetes: they go (every device to claims); host: every healthy device is tainted
            entry["expected"] = 0  # no device plugin advertises nvidia.com/gpu on such a node
            entry["stock"] = []
            entry["order"] = "dra"
            out["dra_nodes"].append(name)
            keep = {k: labels[k] for k in FENCE_LABELS if k in owned and k in labels} if to == "host" else {}
            driver_key, driver_value = DRIVER_LABEL
            if driver_key in owned and labels.get(driver_key) == driver_value:
                keep[driver_key] = driver_value
            meta_patch = {"name": name, "labels": keep} if keep else {"name": name}
            out["node_patches"].append({"apiVersion": "v1", "kind": "Node", "metadata": meta_patch})
            gone = [k for k in owned if k not in keep]
            out["lines"].append(
                f"{name} (mode dra): "
                + (
                    "gpusplit's DeviceTaintRules of the node removed, the DRA driver's every device goes to claims"
                    if to == "kubernetes"
                    else f"every healthy device ({len(healthy)}) tainted by gpusplit's DeviceTaintRules"
                )
                + f"; gpusplit's labels ({', '.join(gone) or 'none'}) taken off"
                + (
                    f"; {driver_key}={driver_value} kept: the DRA driver's kubelet plugin runs only on nodes with it"
                    if driver_key in keep
                    else ""
                )
                + ("; GPU taint taken off" if tainted else "")
            )
        elif to == "host":
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
            entry["stock"] = [object_name(ds) for ds in may]
            out["node_patches"].append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
            if not may and plugin != "none":
                if helm and helm_wait > 0:
                    # the run says what to change and waits (bounded) until the release lets its plugin on the node
                    entry["stock"] = [object_name(ds) for ds in helm]
                    for ds in helm:
                        out["helm_waits"].append(
                            {
                                "node": name,
                                "daemonset": object_name(ds),
                                "labels_after": after,
                                **helm_release(ds),
                            }
                        )
                        out["lines"].append(
                            f"{name}: {helm_change(ds, node)}; the run waits up to {helm_wait}s for it"
                        )
                elif helm:
                    for ds in helm:
                        out["refusals"].append(
                            f"{name}: {helm_change(ds, node)}, then run this again (or set "
                            "gpusplit_unsplit_helm_wait_seconds for the run to wait while you do). Nothing was changed."
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
    for item in forced or []:
        if forced_node(out, to, item, live.get(item["node"]), field_manager):
            names.append(item["node"])
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
    # mode dra: the rules the node keeps (host: every healthy device; kubernetes: none), and the prune of the others
    dra = sorted(label_value(n) for n in out["dra_nodes"])
    out["dra_rules"], out["dra_prune"] = [], []
    if dra and dra_api_version is None:
        if to == "host":  # (to kubernetes: a cluster that serves no DeviceTaintRule holds none to take back)
            out["refusals"].append(
                f"{', '.join(out['dra_nodes'])} (mode dra): their devices cannot be kept from claims: "
                f"{dra_refusal or 'the cluster serves no DeviceTaintRule version gpusplit writes'}. Nothing was changed."
            )
        return out
    if dra and to == "host":
        target = unsplit_plan(
            {**plan, "nodes": {h: p for h, p in planned.items() if p["node"] in out["dra_nodes"]}}, "host"
        )
        out["dra_rules"] = api_versions.with_version(
            dra_render.host_share_rules(target), "device_taint_rule", dra_api_version
        )
    if dra:
        selector = f"{PLAN_RULES_SELECTOR},{LABEL_NODE} in ({','.join(dra)})"
        out["dra_prune"] = [
            {"api_version": dra_api_version, "kind": "DeviceTaintRule", "label_selector": selector}
        ]
    return out


def forced_node(out, to, item, node, field_manager="gpusplit"):
    """The cluster side of a host that was not reached, taken back anyway (``gpusplit_unsplit_force: true``): its
    split plugin (the caller's prune), gpusplit's labels (to host: but those that keep other plugins off) and the GPU
    taint gpusplit set. Not verified (its GPUs were not discovered); no pod or host process is looked at; its host
    files stay. Adds to ``out``; False where the node is not in the cluster."""
    name = item["node"]
    if node is None:
        out["lines"].append(
            f"{name}: host {item['host']} not reached and no such node in the cluster: nothing taken back"
        )
        return False
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    owned = owned_label_keys(node, field_manager)
    keep = {k: labels[k] for k in FENCE_LABELS if k in owned and k in labels} if to == "host" else {}
    out["node_patches"].append(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, **({"labels": keep} if keep else {})}}
    )
    tainted = render.ANNOTATION_GPU_TAINT in (meta.get("annotations") or {}) and render.has_gpu_taint(node)
    if tainted:
        out["taint_nodes"].append({"name": name, "absent": [dict(render.GPU_TAINT)]})
    out["forced"].append(name)
    out["lines"].append(
        f"{name}: host {item['host']} not reached, taken back anyway (gpusplit_unsplit_force): its split plugin and "
        f"gpusplit's labels ({', '.join(k for k in owned if k not in keep) or 'none'}) removed"
        + ("; GPU taint taken off" if tainted else "")
        + "; not verified (its GPUs were not discovered), no pod or host process looked at, its host files left as "
        "they are"
    )
    return True


def helm_change(ds, node):
    """What to change so that the Helm release of ``ds`` lets its plugin on ``node``: the values line to take out, the
    helm upgrade to run, and the node's split label where someone else than gpusplit keeps it."""
    rel = helm_release(ds) or {}
    line = yaml.safe_dump(
        dict(render.EXCLUSION_EXPRESSION), default_flow_style=True, width=float("inf")
    ).strip()
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    label = (
        f" (or take the label {render.LABEL_SPLIT}={labels[render.LABEL_SPLIT]}, which is not gpusplit's, off the node)"
        if render.LABEL_SPLIT in labels
        else ""
    )
    return (
        f"the device plugin {object_name(ds)} of the Helm release '{rel.get('release')}' (namespace {rel.get('namespace')}) "
        "is kept off this node by its values; gpusplit does not change a release's values. Take the line "
        f"'- {line}' out of affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
        f"[*].matchExpressions in the release's values and run helm upgrade -n {rel.get('namespace')} "
        f"{rel.get('release')}{label}"
    )


def helm_still_off(waits, daemonsets):
    """The entries of ``waits`` (cluster_plan's helm_waits) whose DaemonSet still cannot run on the node."""
    live = {object_name(ds): ds for ds in daemonsets or []}
    return [
        w
        for w in waits or []
        if w["daemonset"] not in live
        or not may_run_on(_pod_spec(live[w["daemonset"]]), w["node"], w["labels_after"])
    ]


def allocatable_of(node, resource="nvidia.com/gpu"):
    """The node's allocatable ``resource`` as an int (0 where absent)."""
    value = (((node or {}).get("status") or {}).get("allocatable") or {}).get(resource, "0")
    try:
        return int(str(value))
    except ValueError:
        return 0


def verify_report(entries, nodes, seconds, lowest, wait_seconds, gap_before=0.0):
    """What the verify of the nodes' allocatable says after its wait (``nodes``: the last read; ``seconds``: how
    long it took; ``lowest``: {node: the lowest allocatable seen}; ``gap_before``: the seconds the split plugins
    took to go, for the nodes whose split plugin went before the stock plugin started).

    Returns ``{"ok", "lines", "summary", "failure"}``: ``lines`` per node; ``summary`` says settled only when every
    node advertises what is expected (with the gap of each split-first node), else that it did not settle;
    ``failure`` names each node left with what it advertises and what was expected (empty when ok).
    """
    ok, lines = verify_nodes(entries, nodes)
    live = {((n or {}).get("metadata") or {}).get("name"): n for n in nodes or []}
    if ok:
        summary = [f"allocatable settled after {seconds}s; lowest seen: {json.dumps(lowest, sort_keys=True)}"]
        first = [e["node"] for e in entries or [] if e.get("order") == "split_first"]
        if first:
            summary.append(
                f"gap on {', '.join(first)} (two device plugins of one resource share one socket on a node: the "
                f"split plugin went first): about {round(float(gap_before or 0) + seconds, 1)}s until the stock "
                "plugin advertised the GPUs"
            )
        return {"ok": True, "lines": lines, "summary": summary, "failure": ""}
    wrong = [
        f"{e['node']} advertises {allocatable_of(live.get(e['node']), e['resource'])} {e['resource']}, "
        f"expected {e['expected']}"
        for e in entries or []
        if allocatable_of(live.get(e["node"]), e["resource"]) != e["expected"]
    ]
    return {
        "ok": False,
        "lines": lines,
        "summary": [
            f"allocatable did not settle within {wait_seconds}s (gpusplit_unsplit_wait_seconds; the wait took "
            f"{seconds}s): {'; '.join(wrong)}; lowest seen: {json.dumps(lowest, sort_keys=True)}"
        ],
        "failure": f"After {seconds}s allocatable did not settle: {'; '.join(wrong)}.",
    }


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
