# Copyright: gpusplit contributors
# Apache-2.0
"""Taking gpusplit off the whole cluster (``gpusplit_unsplit_cluster: true`` on the last unsplit; docs/undo.md, "The
whole cluster"): what goes besides the play's nodes, what is refused, and which of gpusplit's namespaces may be
deleted. Ownership is proven by gpusplit's label (objects) or field manager (node labels); anything else is listed.
"""

from __future__ import annotations

import json

from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.names import (
    APP_NAME,
    LABEL_MANAGED_BY,
    LABEL_MODE,
    LABEL_NAME,
    LABEL_NODE,
    MANAGED_BY,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.sharing import DRA_CLASS_SELECTOR
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import gpu_operator as operator
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.resplit import PLUGIN_SELECTOR
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.unsplit import (
    object_name,
    owned_label_keys,
    plan_nodes,
)

# gpusplit's admission policies and bindings (playbooks/guard.yml labels them so, whatever the guard's name)
GUARD_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY},gpusplit.io/guard"
# what may be in a namespace, looked at before gpusplit's own namespace is deleted
NAMESPACE_KINDS = (
    ("v1", "Pod"),
    ("apps/v1", "DaemonSet"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"),
    ("batch/v1", "Job"),
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("v1", "Service"),
    ("v1", "ServiceAccount"),
    ("v1", "PersistentVolumeClaim"),
)
NAMESPACE_FIELDS = ["metadata.namespace", "metadata.name", "metadata.labels"]
# what Kubernetes puts in every namespace itself
NAMESPACE_DEFAULTS = {("ConfigMap", "kube-root-ca.crt"), ("ServiceAccount", "default")}
# the field manager that holds the ClusterPolicy values the unsplit puts back, so that gpusplit's own manager can let
# go of every field it set (server-side apply removes a field only its leaving manager owned)
RESTORE_MANAGER = "before-gpusplit"
# the kubelet plugin selector in the values gpusplit gives the DRA driver's release (plugin_utils/_dra/chart.py)
DRA_SELECTOR = {LABEL_MODE: "dra"}
# namespaces gpusplit never deletes, whatever their labels say
KEEP_NAMESPACES = {"default", "kube-system", "kube-public", "kube-node-lease"}


def _labels(obj):
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


def _gpusplits(obj):
    return _labels(obj).get(LABEL_MANAGED_BY) == MANAGED_BY


def _split_plugin_node(ds):
    """The node a split plugin DaemonSet of gpusplit's serves (None for any other DaemonSet)."""
    if not _gpusplits(ds) or _labels(ds).get(LABEL_NAME) != APP_NAME:
        return None
    meta = (ds or {}).get("metadata") or {}
    return (meta.get("annotations") or {}).get(render.ANNOTATION_NODE_NAME) or _labels(ds).get(LABEL_NODE)


def still_split(plan, nodes, daemonsets, field_manager="gpusplit", covered=()):
    """``{node: [what of gpusplit's it still has]}`` for the nodes outside ``plan`` that gpusplit has not taken
    back: labels its field manager owns, or a split device plugin of gpusplit's."""
    planned = {np.get("node") for np in plan_nodes(plan).values()} | set(covered or ())
    out = {}
    for node in nodes or []:
        name = ((node or {}).get("metadata") or {}).get("name")
        owned = owned_label_keys(node, field_manager)
        if name not in planned and owned:
            out.setdefault(name, []).append(f"gpusplit's labels {', '.join(owned)}")
    for ds in daemonsets or []:
        name = _split_plugin_node(ds)
        if name is not None and name not in planned:
            out.setdefault(name, []).append(f"its split device plugin {object_name(ds)}")
    return out


def cluster_wide_plan(
    plan, nodes, daemonsets, policies=(), bindings=(), namespaces=(), field_manager="gpusplit", covered=()
):
    """What ``gpusplit_unsplit_cluster: true`` removes besides the nodes of ``plan``, and what it refuses.

    Refused (before any change) while a node outside the play is still split: the admission guard and the split
    plugin's namespace are what such a node relies on. Removed: gpusplit's admission policies and bindings (its
    label), gpusplit's DeviceClasses of time-sliced shares (mode dra), every split device plugin and its config file
    left (the nodes gone from the inventory), and gpusplit's
    namespaces (its label) once nothing but gpusplit's own objects is left in them (:func:`namespaces_to_delete`,
    after the nodes are taken back). Objects that only look like gpusplit's (a name with ``gpusplit`` in it, but
    not its label) are listed and left.

    Returns ``{"refusals", "prune", "namespaces", "namespace_queries", "listed", "lines"}``.
    """
    left = still_split(plan, nodes, daemonsets, field_manager, covered)
    refusals = []
    if left:
        refusals.append(
            "gpusplit_unsplit_cluster=true takes away what every split node relies on (the admission guard, the "
            "split plugin's namespace), but these nodes outside the play are still split: "
            + "; ".join(f"{name} ({', '.join(what)})" for name, what in sorted(left.items()))
            + ". Take them back in the same run (add them to gpusplit_hosts), or run without "
            "gpusplit_unsplit_cluster. Nothing was changed."
        )
    owned_policies = sorted(object_name(p) for p in list(policies or []) if _gpusplits(p))
    owned_bindings = sorted(object_name(b) for b in list(bindings or []) if _gpusplits(b))
    listed = sorted(
        f"{obj.get('kind') or kind} {object_name(obj)}"
        for kind, objs in (
            ("ValidatingAdmissionPolicy", policies),
            ("ValidatingAdmissionPolicyBinding", bindings),
        )
        for obj in objs or []
        if not _gpusplits(obj) and "gpusplit" in str(((obj or {}).get("metadata") or {}).get("name"))
    )
    owned_ns = sorted(
        object_name(ns)
        for ns in namespaces or []
        if _gpusplits(ns) and object_name(ns) not in KEEP_NAMESPACES
    )
    leftovers = sorted(
        object_name(ds)
        for ds in daemonsets or []
        if _split_plugin_node(ds) is not None
        and _split_plugin_node(ds)
        not in {np.get("node") for np in plan_nodes(plan).values()} | set(covered or ())
    )
    prune = (
        [
            {"api_version": "admissionregistration.k8s.io/v1", "kind": kind, "label_selector": GUARD_SELECTOR}
            for kind in ("ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy")
        ]
        + [
            {"api_version": api_version, "kind": kind, "label_selector": PLUGIN_SELECTOR}
            for api_version, kind in (("apps/v1", "DaemonSet"), ("v1", "ConfigMap"))
        ]
        + [{"api_version": "resource.k8s.io/v1", "kind": "DeviceClass", "label_selector": DRA_CLASS_SELECTOR}]
    )
    queries = {
        f"{ns}/{kind}": {
            "api_version": api_version,
            "kind": kind,
            "namespace": ns,
            "fields": NAMESPACE_FIELDS,
        }
        for ns in owned_ns
        for api_version, kind in NAMESPACE_KINDS
    }
    lines = [
        "whole cluster: admission policies "
        + (", ".join(owned_policies) or "none")
        + "; their bindings "
        + (", ".join(owned_bindings) or "none")
        + " removed",
        "whole cluster: gpusplit's DeviceClasses of time-sliced shares (mode dra) removed",
        "whole cluster: every split device plugin and its config file removed"
        + (f" (also {', '.join(leftovers)}, of nodes no longer in the inventory)" if leftovers else ""),
        "whole cluster: gpusplit's namespace(s) "
        + (", ".join(owned_ns) or "none")
        + " deleted once nothing but gpusplit's own objects is left in them",
        "whole cluster: feature gates are not changed here: run playbooks/feature_gates.yml with each gate "
        "gpusplit set as absent (docs/feature-gates.md)",
    ] + [
        f"whole cluster: not gpusplit's (no {LABEL_MANAGED_BY}={MANAGED_BY} label), left: {x}" for x in listed
    ]
    return {
        "refusals": refusals,
        "still_split": sorted(left),
        "prune": prune,
        "namespaces": owned_ns,
        "namespace_queries": queries,
        "listed": listed,
        "lines": lines,
    }


def namespaces_to_delete(namespaces, found):
    """``(delete, kept_lines)``: gpusplit's ``namespaces`` in which nothing is left but what Kubernetes puts in
    every namespace and gpusplit's own objects (its label: the split plugin's pods carry it too); the others kept, each with what is left.

    ``found``: ``{"<namespace>/<Kind>": [objects]}`` (cluster_wide_plan's namespace_queries, read).
    """
    delete, kept = [], []
    for ns in namespaces or []:
        left = []
        for _api_version, kind in NAMESPACE_KINDS:
            for obj in (found or {}).get(f"{ns}/{kind}") or []:
                meta = (obj or {}).get("metadata") or {}
                if (kind, meta.get("name")) in NAMESPACE_DEFAULTS or _gpusplits(obj):
                    continue
                left.append(f"{kind} {meta.get('name')}")
        if left:
            kept.append(
                f"namespace {ns} kept: not only gpusplit's objects are left in it ({', '.join(left)})"
            )
        else:
            delete.append(ns)
    return delete, kept


def _without_gpusplits_env(live, before, pairs):
    """``(list, names)``: the live env list with gpusplit's entries (its names with its values) taken out, an entry of
    the same name in ``before`` put back in its place; ``names``: the entries taken out or put back."""
    ours = dict(pairs)
    old = {e.get("name"): e for e in before or [] if isinstance(e, dict)}
    out, names = [], []
    for entry in live or []:
        name = entry.get("name") if isinstance(entry, dict) else None
        if name in ours and entry.get("value") == ours[name] and set(entry) <= {"name", "value"}:
            names.append(name)
            if name in old:
                out.append(old[name])
            continue
        out.append(entry)
    return out, names


def clusterpolicy_plan(clusterpolicies, field_manager="gpusplit"):
    """What ``gpusplit_unsplit_cluster: true`` does to each ClusterPolicy gpusplit set fields of (mode gpu_operator).

    A field still as gpusplit wrote it goes back to what it held before (gpu_operator.original_record's
    annotation): its value, or no value. A field changed since, or set before gpusplit kept a record: an env list
    loses only gpusplit's entries (said which), any other field is left as it is (said so). ``restore`` holds
    the values that stay, applied by :data:`RESTORE_MANAGER`; ``release`` the bare objects gpusplit's manager then
    applies, which takes out every field only gpusplit still owns (those with no value before, the record).

    Returns ``{"restore", "release", "manager", "lines"}`` (``manager``: :data:`RESTORE_MANAGER`).
    """
    restore, release, lines = [], [], []
    for cp in clusterpolicies or []:
        name = object_name(cp)
        record, problem = operator.read_original(cp)
        owned = operator.owned_field_paths(cp, field_manager)
        has_note = operator.ANNOTATION_ORIGINAL in (
            ((cp or {}).get("metadata") or {}).get("annotations") or {}
        )
        installed = operator.recorded_install(record)
        fields = [
            path
            for path, _env in operator.OWNED_FIELDS
            if ".".join(path) in record or ("spec", *path) in owned
        ]
        if (not has_note and not owned) or (installed and not fields and not problem):
            # nothing of gpusplit's, or only the mark of its install (it stays, for gpusplit_unsplit_releases)
            continue
        if problem:
            lines.append(
                f"ClusterPolicy {name}: {problem}; gpusplit's entries are taken out, nothing put back"
            )
        spec, said = {}, []
        for path, pairs in operator.OWNED_FIELDS:
            key = ".".join(path)
            entry = record.get(key)
            if entry is None and ("spec", *path) not in owned:
                continue
            entry = entry or {"unknown": True}
            live = operator.dig(cp, "spec", *path)
            before = None if entry.get("unknown") else entry.get("before")
            if not entry.get("unknown") and "wrote" in entry and live == entry["wrote"]:
                keep = before
                said.append(f"spec.{key} put back to {_shown(before)}")
            elif pairs is not None:
                keep, names = _without_gpusplits_env(live, before, pairs)
                why = (
                    "changed since gpusplit wrote it"
                    if not entry.get("unknown")
                    else "no record of it before"
                )
                said.append(
                    f"spec.{key} {why}: only gpusplit's entries taken out ({', '.join(names) or 'none left'})"
                )
            else:
                keep = live
                why = (
                    "changed since gpusplit wrote it"
                    if not entry.get("unknown")
                    else "no record of it before"
                )
                said.append(f"spec.{key} {why}: left as it is ({_shown(live)})")
            if keep is not None:
                node = spec
                for step in path[:-1]:
                    node = node.setdefault(step, {})
                node[path[-1]] = keep
        if spec:
            restore.append(_clusterpolicy(name, spec=spec))
        if installed:
            # the mark of gpusplit's install stays until its release goes (with the ClusterPolicy)
            mark = {operator.RECORD_INSTALLED: {"namespace": installed[0], "release": installed[1]}}
            note = json.dumps(mark, sort_keys=True, separators=(",", ":"))
            release.append(
                _clusterpolicy(
                    name, metadata={"name": name, "annotations": {operator.ANNOTATION_ORIGINAL: note}}
                )
            )
            gone = (
                f"; annotation {operator.ANNOTATION_ORIGINAL} keeps only the Helm release gpusplit installed "
                f"({installed[0]}/{installed[1]}), gpusplit's field manager only that"
            )
        else:
            release.append(_clusterpolicy(name))
            gone = f"; annotation {operator.ANNOTATION_ORIGINAL} and gpusplit's field manager removed"
        lines.append(
            f"whole cluster: ClusterPolicy {name}: "
            + "; ".join(said or ["no field of gpusplit's left"])
            + gone
        )
    return {"restore": restore, "release": release, "manager": RESTORE_MANAGER, "lines": lines}


def _clusterpolicy(name, **fields):
    return {"apiVersion": operator.API_VERSION, "kind": operator.KIND, "metadata": {"name": name}, **fields}


def _shown(value):
    return "no value" if value is None else repr(value)


def _dig_dict(value, *keys):
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _release_values(info):
    status = (info or {}).get("status") or {}
    values = status.get("release_values")
    return values if values is not None else status.get("values")


def releases_plan(releases, uninstall=False, clusterpolicies=()):
    """Which Helm releases ``gpusplit_unsplit_cluster: true`` uninstalls (``uninstall``: gpusplit_unsplit_releases,
    checked by unsplit.check_settings), and what is said of each.

    ``releases``: kubernetes.core.helm_info's results, each with the ``item`` it read (``{"chart": "dra" |
    "operator", "namespace", "name"}``). A DRA driver release is gpusplit's when its values select the kubelet plugin by
    ``gpusplit.io/mode=dra`` (the values gpusplit installs it with); a GPU Operator release when a ClusterPolicy's
    record (``clusterpolicies``, gpu_operator.RECORD_INSTALLED) names it, written where the role gpu_operator
    installed the chart itself. A release not proven gpusplit's is listed and left; one not installed is not said.

    Returns ``{"uninstall": [{"namespace", "name"}], "lines"}``.
    """
    marked = {operator.recorded_install(operator.read_original(cp)[0]) for cp in clusterpolicies or []}
    out, lines = [], []
    for rel in releases or []:
        info = rel or {}
        item = info.get("item") or {}
        ns, name = item.get("namespace"), item.get("name")
        if info.get("skipped"):
            continue
        where = f"whole cluster: helm release {ns}/{name}"
        if not info.get("status"):
            if info.get("failed") or info.get("msg"):
                lines.append(f"{where}: could not be read ({info.get('msg') or 'no reason given'}), left")
            continue
        if item.get("chart") != "dra":
            kind = "GPU Operator"
            if (ns, name) not in marked:
                lines.append(
                    f"{where} ({kind}): not proven gpusplit's (no ClusterPolicy's annotation "
                    f"{operator.ANNOTATION_ORIGINAL} names it as installed by gpusplit), "
                    f"left: helm uninstall -n {ns} {name} if it is no longer wanted"
                )
                continue
        else:
            kind = "DRA driver"
            selector = _dig_dict(_release_values(info), "kubeletPlugin", "nodeSelector")
            if not isinstance(selector, dict) or any(selector.get(k) != v for k, v in DRA_SELECTOR.items()):
                lines.append(
                    f"{where} ({kind}): not proven gpusplit's (its values do not select the kubelet plugin by "
                    f"{LABEL_MODE}=dra), left"
                )
                continue
        if uninstall:
            out.append({"namespace": ns, "name": name})
            lines.append(f"{where} ({kind}, gpusplit's): uninstalled once the nodes are verified")
        else:
            lines.append(
                f"{where} ({kind}, gpusplit's): left: helm uninstall -n {ns} {name}, "
                "or run again with gpusplit_unsplit_releases=true"
            )
    return {"uninstall": out, "lines": lines}
