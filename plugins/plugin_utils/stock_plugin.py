"""Taking split nodes over from a device plugin that gpusplit does not own (a stock plugin, the operator's). Pure.

- A stock plugin installed by Helm is never patched: a server-side-apply patch of its affinity
  collides with the field manager ``helm``, so the site's next ``helm upgrade`` fails, or takes the
  exclusion back with ``--force-conflicts`` (measured on the lab, docs/split.md). ``helm_managed``
  names the release of each such DaemonSet and the values that keep it off split nodes.
- The take-over order: the split plugin starts on a node only once no other device plugin's pod is
  left there (NVIDIA's plugin serves a resource on one fixed socket, so two of them on a node take
  each other's socket away; older kubelets also lose the node's capacity, kubernetes/kubernetes#121994). ``pod_queries`` says how to list the pods of every
  unmanaged plugin DaemonSet, ``pods_on_split_nodes`` which of them still hold a split node.
"""

from __future__ import annotations

import json

import yaml

from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.names import (
    APP_NAME,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    MANAGED_BY,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._split import verify
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import node_plans
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render

HELM_MANAGED_BY = "Helm"  # app.kubernetes.io/managed-by of every object the charts' helpers label
ANNOTATION_RELEASE_NAME = "meta.helm.sh/release-name"  # helm stamps both on what it installs
ANNOTATION_RELEASE_NAMESPACE = "meta.helm.sh/release-namespace"
LABEL_INSTANCE = "app.kubernetes.io/instance"  # the release name, in the charts' own labels
LABEL_CHART = "helm.sh/chart"


def _meta(obj):
    return (obj or {}).get("metadata") or {}


def _key(ds):
    meta = _meta(ds)
    return f"{meta.get('namespace')}/{meta.get('name')}"


def helm_release(daemonset):
    """{"release", "namespace", "chart"} of the Helm release a DaemonSet belongs to, or None.

    Helm-managed means ``app.kubernetes.io/managed-by: Helm`` or helm's release annotation. The
    release name is the annotation's, else the chart's ``app.kubernetes.io/instance`` label.
    """
    meta = _meta(daemonset)
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    if labels.get(LABEL_MANAGED_BY) != HELM_MANAGED_BY and ANNOTATION_RELEASE_NAME not in annotations:
        return None
    return {
        "release": annotations.get(ANNOTATION_RELEASE_NAME) or labels.get(LABEL_INSTANCE) or "(unnamed)",
        "namespace": annotations.get(ANNOTATION_RELEASE_NAMESPACE) or meta.get("namespace"),
        "chart": labels.get(LABEL_CHART) or "",
    }


def helm_values(daemonset):
    """The ``affinity`` value that keeps the DaemonSet's pods off nodes labelled gpusplit.io/split=true.

    The nvidia-device-plugin chart renders ``.Values.affinity`` into the pod template as it is, so
    the live affinity is the release's: the same, with ``gpusplit.io/split NotIn [true]`` in every
    required term (render.exclusion_terms). Helm merges maps and replaces lists, so these values
    replace the chart's terms and keep the rest of its affinity.
    """
    spec = (((daemonset or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
    # a plain copy: what Ansible passes in may be its own (tagged) mapping and list types
    affinity = json.loads(json.dumps(spec.get("affinity") or {}))
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    required["nodeSelectorTerms"] = json.loads(json.dumps(render.exclusion_terms(daemonset)))
    return {"affinity": affinity}


def helm_managed(daemonsets):
    """The Helm-managed ones among ``daemonsets`` (the colliding plugins), by release, with what the site must do.

    One entry per release and values: {"daemonsets": ["<namespace>/<name>", ...], "release",
    "namespace", "chart", "values": the values (dict), "values_yaml": the same in one line of YAML
    (flow style), ready to go into the release's values file}. The chart renders one ``affinity``
    value into each of its DaemonSets (the device plugin's and the MPS control daemon's), so they
    share one entry.
    """
    out = {}
    for ds in daemonsets or []:
        release = helm_release(ds)
        if release is None:
            continue
        values = helm_values(ds)
        text = yaml.safe_dump(values, default_flow_style=True, sort_keys=False, width=float("inf")).strip()
        entry = out.setdefault(
            (release["namespace"], release["release"], text),
            {"daemonsets": [], **release, "values": values, "values_yaml": text},
        )
        entry["daemonsets"].append(_key(ds))
    return list(out.values())


def pod_queries(daemonsets):
    """How to list the pods of each device-plugin DaemonSet gpusplit does not own: one per DaemonSet.

    {"daemonset": "<namespace>/<name>", "namespace", "label_selectors": ["key=value", ...]} from the
    DaemonSet's ``spec.selector.matchLabels`` (its pods carry them); pods_on_split_nodes then keeps
    the device-plugin pods that are not gpusplit's.
    """
    out = []
    for ds in verify.unmanaged_plugin_daemonsets(daemonsets):
        match = (((ds.get("spec") or {}).get("selector") or {}).get("matchLabels")) or {}
        out.append(
            {
                "daemonset": _key(ds),
                "namespace": _meta(ds).get("namespace"),
                "label_selectors": [f"{k}={v}" for k, v in sorted(match.items())],
            }
        )
    return out


def pods_on_split_nodes(pods, plan):
    """Device-plugin pods that are not gpusplit's and are still bound to a split node of ``plan``.

    A terminating pod counts: its containers may still run, and its plugin be registered, until
    the kubelet has stopped them and the pod object is gone.
    """
    split = {p["node"] for p in node_plans(plan) if p["split"]}
    out = []
    for pod in pods or []:
        spec = pod.get("spec") or {}
        if spec.get("nodeName") not in split:
            continue
        labels = _meta(pod).get("labels") or {}
        if labels.get(LABEL_MANAGED_BY) == MANAGED_BY or labels.get(LABEL_NAME) == APP_NAME:
            continue
        if any(verify.is_device_plugin_container(c) for c in spec.get("containers") or []):
            out.append(pod)
    return out
