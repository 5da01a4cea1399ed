# Copyright: gpusplit contributors
# Apache-2.0
"""Why no node matches a pod's node selection: the labels the nodes really carry, per expression.

Private to the collection.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.quantity import quantity_number
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.scheduling import (
    expression_text,
    is_gpu_resource,
    meta_of,
    required_affinity,
    requirement_matches,
    spec_of,
    status_of,
    term_matches,
    term_text,
)

UNSET = "<unset>"
_HINT_VALUES = 8  # label values shown per failing expression
_HINT_NODES = 3  # node names shown per value


def selector_hints(pod, nodes):
    """For each nodeSelector key, which values the nodes really carry (to spot a typo)."""
    hints = []
    for key, want in sorted((spec_of(pod).get("nodeSelector") or {}).items()):
        values = {}
        for n in nodes:
            labels = meta_of(n).get("labels") or {}
            if key in labels:
                values[labels[key]] = values.get(labels[key], 0) + 1
        if want in values:
            hints.append(f"{key}={want} on {values[want]} node(s)")
        elif values:
            seen = ", ".join(f"{v} ({c})" for v, c in sorted(values.items())[:5])
            hints.append(f"no node has {key}={want} (values present: {seen})")
        else:
            hints.append(f"no node has the label {key}")
    return hints


def gpu_nodes(cl, requests, claims):
    """The nodes that could give the pod its GPUs, ignoring its node selection.

    Those advertising a resource the pod requests; for a DRA pod those a published device can
    reach; else those advertising any GPU resource. Empty when the cluster has none.
    """
    if requests:
        found = [n for n in cl.nodes if any(cl.allocatable(n, r) for r in requests)]
        if found:
            return found
    if claims:
        found = [n for n in cl.nodes if any(cl.dra.reachable(d, n) for d in cl.dra.devices)]
        if found:
            return found
    return [
        n
        for n in cl.nodes
        if any(
            is_gpu_resource(r, cl.prefixes) and quantity_number(v)
            for r, v in (status_of(n).get("allocatable") or {}).items()
        )
    ]


def _values_by_node(expr, nodes, field=False):
    """[{value, nodes}] of the expression's key on ``nodes`` (value None: the label is not set)."""
    groups = {}
    for n in nodes:
        name = meta_of(n).get("name")
        if field:
            value = name if expr.get("key") == "metadata.name" else None
        else:
            value = (meta_of(n).get("labels") or {}).get(expr.get("key"))
        groups.setdefault(value, []).append(name)
    order = sorted((v for v in groups if v is not None), key=str) + ([None] if None in groups else [])
    return [{"value": v, "nodes": groups[v]} for v in order]


def _values_text(groups, field=False):
    if field:
        names = [n for g in groups for n in g["nodes"]]
        shown = names[: _HINT_VALUES * _HINT_NODES]
        return ", ".join(shown) + (f", +{len(names) - len(shown)} more" if len(names) > len(shown) else "")
    parts = []
    for g in groups[:_HINT_VALUES]:
        names = g["nodes"][:_HINT_NODES]
        more = len(g["nodes"]) - len(names)
        label = UNSET if g["value"] is None else (g["value"] or '""')
        parts.append(f"{label} ({', '.join(names)}{f', +{more} more' if more > 0 else ''})")
    if len(groups) > _HINT_VALUES:
        parts.append(f"+{len(groups) - _HINT_VALUES} more value(s)")
    return ", ".join(parts)


def affinity_hints(pod, scope_nodes, scope):
    """Why the required node affinity matches none of ``scope_nodes`` (called ``scope`` in the text).

    ([hint text], {scope, nodes, terms: [{term, text, met_by, failing: [...]}]}): per term, each
    expression (or field) that fails on at least one of the nodes, on how many, and the value of
    its key on every one of them. A term met by some of the nodes is named too (then something
    else, the nodeSelector, rules those nodes out). None when the pod has no required affinity.
    """
    required = required_affinity(pod)
    if not required:
        return [], None
    terms = required.get("nodeSelectorTerms") or []
    names = [meta_of(n).get("name") for n in scope_nodes]
    detail = {"scope": scope, "nodes": names, "terms": []}
    if not terms:
        return ["required nodeAffinity has no nodeSelectorTerms: it matches no node"], detail
    hints = []
    for i, term in enumerate(terms, 1):
        label = f"nodeAffinity term {i}" if len(terms) > 1 else "nodeAffinity"
        entry = {"term": i, "text": term_text(term), "met_by": [], "failing": []}
        detail["terms"].append(entry)
        exprs = [(e, False) for e in term.get("matchExpressions") or []]
        exprs += [(f, True) for f in term.get("matchFields") or []]
        if not exprs:
            hints.append(f"{label} is empty: an empty term matches no node")
            continue
        entry["met_by"] = [meta_of(n).get("name") for n in scope_nodes if term_matches(term, n)]
        if entry["met_by"]:
            shown = ", ".join(entry["met_by"][:_HINT_NODES])
            more = len(entry["met_by"]) - _HINT_NODES
            hints.append(
                f"{label} ({entry['text']}) is met by {scope} {shown}{f', +{more} more' if more > 0 else ''}"
            )
        for expr, field in exprs:
            if field:
                failing = [
                    meta_of(n).get("name")
                    for n in scope_nodes
                    if not requirement_matches(expr, {"metadata.name": meta_of(n).get("name")})
                ]
            else:
                failing = [
                    meta_of(n).get("name")
                    for n in scope_nodes
                    if not requirement_matches(expr, meta_of(n).get("labels") or {})
                ]
            if not failing:
                continue
            groups = _values_by_node(expr, scope_nodes, field)
            what = f"field {expression_text(expr)}" if field else expression_text(expr)
            entry["failing"].append(
                {
                    "expression": what,
                    "field": field,
                    "key": expr.get("key"),
                    "operator": expr.get("operator"),
                    "values": list(expr.get("values") or []),
                    "fails_on": failing,
                    "node_values": groups,
                }
            )
            count = (
                f"not met on any of the {len(names)} {scope}"
                if len(failing) == len(names)
                else f"not met on {len(failing)} of the {len(names)} {scope}"
            )
            have = "are" if field else f"have {expr.get('key')}"
            hints.append(f"{label} wants {what} ({count}); {scope} {have}: {_values_text(groups, field)}")
    return hints, detail


def selection_scope(cl, pod, requests, claims):
    """(nodes, words) the affinity hint explains itself over: the GPU nodes, narrowed to those
    the nodeSelector admits when it admits some; all nodes when none advertises a GPU."""
    nodes, words = gpu_nodes(cl, requests, claims), "GPU nodes"
    if not nodes:
        nodes, words = list(cl.nodes), "nodes"
    selector = spec_of(pod).get("nodeSelector") or {}
    if selector:
        admitted = [
            n for n in nodes if all((meta_of(n).get("labels") or {}).get(k) == v for k, v in selector.items())
        ]
        if admitted:
            nodes, words = admitted, f"{words} matching the nodeSelector"
    return nodes, words


def selection_next(pod, affinity):
    """The next place to look for a node selection nobody matches: the labels it selects on."""
    keys = sorted(spec_of(pod).get("nodeSelector") or {})
    for term in (affinity or {}).get("terms") or []:
        for f in term["failing"]:
            if not f["field"] and f["key"] not in keys:
                keys.append(f["key"])
    look = f"kubectl get nodes -L {','.join(keys)}" if keys else "kubectl get nodes --show-labels"
    what = []
    if spec_of(pod).get("nodeSelector"):
        what.append("spec.nodeSelector")
    if required_affinity(pod) is not None:
        what.append("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution")
    return f"{look}; fix the pod's {' / '.join(what) or 'node selection'} or label the GPU nodes"
