# Copyright: gpusplit contributors
# Apache-2.0
"""What kube-scheduler decides about one pod and one node, over plain API dicts. Private to the collection.

Object accessors, what a pod asks for (GPU extended resources, DRA claims), taints and
tolerations (core/v1 Toleration.ToleratesTaint) and node selection (nodeName, nodeSelector,
required node affinity), with the texts people write them in. No I/O.
"""

from __future__ import annotations

from fractions import Fraction

from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.quantity import parse_quantity, plain_number

# extended resources that count as "wants a GPU": nvidia.com/gpu, nvidia.com/gpu.shared, ...
# and the MIG resources of the mixed strategy (nvidia.com/mig-1g.10gb, ...)
GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
# gpusplit's node labels of a time-sliced Kubernetes share (gpusplit_sharing, docs/sharing.md): the replicas
# per device, and "true" where the device plugin fails a request of more than one replica
LABEL_TIME_SLICING_REPLICAS = "gpusplit.io/time-slicing-replicas"
LABEL_TIME_SLICING_ONE_PER_POD = "gpusplit.io/time-slicing-fail-requests-greater-than-one"
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")

# --------------------------------------------------------------------------------------------
# objects


def meta_of(obj):
    """``metadata`` of an API object ({} when absent)."""
    return (obj or {}).get("metadata") or {}


def spec_of(obj):
    """``spec`` of an API object ({} when absent)."""
    return (obj or {}).get("spec") or {}


def status_of(obj):
    """``status`` of an API object ({} when absent)."""
    return (obj or {}).get("status") or {}


def pod_key(pod):
    """``namespace/name`` of a namespaced object."""
    meta = meta_of(pod)
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


def int_or_none(text):
    """A base-10 integer from a label or toleration value; None when it is not one."""
    try:
        return int(str(text), 10)
    except (TypeError, ValueError):
        return None


# --------------------------------------------------------------------------------------------
# what a pod asks for


def is_gpu_resource(name, prefixes=GPU_RESOURCE_PREFIXES):
    return any(str(name).startswith(p) for p in prefixes)


def _container_requests(container, prefixes):
    res = container.get("resources") or {}
    requests = dict(res.get("limits") or {})  # extended resources: requests default to limits
    requests.update(res.get("requests") or {})
    return {k: parse_quantity(v) or Fraction(0) for k, v in requests.items() if is_gpu_resource(k, prefixes)}


def pod_gpu_requests(pod, prefixes=GPU_RESOURCE_PREFIXES):
    """{resource: amount} the scheduler counts for the pod (containers, sidecars, init containers)."""
    spec = spec_of(pod)
    total = {}
    for c in spec.get("containers") or []:
        for k, v in _container_requests(c, prefixes).items():
            total[k] = total.get(k, 0) + v
    sidecars = {}
    init_peak = {}
    for c in spec.get("initContainers") or []:
        req = _container_requests(c, prefixes)
        if c.get("restartPolicy") == "Always":  # a sidecar: runs next to the app containers
            for k, v in req.items():
                sidecars[k] = sidecars.get(k, 0) + v
                total[k] = total.get(k, 0) + v
        else:
            for k, v in req.items():
                init_peak[k] = max(init_peak.get(k, 0), v + sidecars.get(k, 0))
    for k, v in init_peak.items():
        total[k] = max(total.get(k, 0), v)
    for k, v in (spec.get("overhead") or {}).items():
        if is_gpu_resource(k, prefixes):
            total[k] = total.get(k, 0) + (parse_quantity(v) or 0)
    return {k: plain_number(v) for k, v in total.items() if v}


def wants_gpu(pod, prefixes=GPU_RESOURCE_PREFIXES):
    """True when the pod asks for a GPU extended resource or for DRA ResourceClaims."""
    return bool(pod_gpu_requests(pod, prefixes)) or bool(spec_of(pod).get("resourceClaims"))


def is_unscheduled_pending(pod):
    """Pending, not bound to a node, not being deleted."""
    return (
        status_of(pod).get("phase", "Pending") == "Pending"
        and not spec_of(pod).get("nodeName")
        and not meta_of(pod).get("deletionTimestamp")
    )


# --------------------------------------------------------------------------------------------
# taints and tolerations (core/v1 Toleration.ToleratesTaint)


def key_and_effect_match(toleration, taint):
    """The part every toleration check shares: an empty effect or key in the toleration matches any."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    return not key or key == taint.get("key")


def tolerates(toleration, taint):
    """Whether one toleration matches one taint, as kube-scheduler decides it."""
    if not key_and_effect_match(toleration, taint):
        return False
    op = toleration.get("operator") or "Equal"
    if op == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    if op == "Exists":
        return True
    if op in ("Lt", "Gt"):
        tol, val = int_or_none(toleration.get("value")), int_or_none(taint.get("value"))
        if tol is None or val is None:
            return False
        return val < tol if op == "Lt" else val > tol
    return False


def untolerated_taints(tolerations, taints, effects=BLOCKING_EFFECTS):
    return [
        t
        for t in taints or []
        if t.get("effect") in effects and not any(tolerates(x, t) for x in tolerations or [])
    ]


def node_taints(node):
    """The node's taints, plus the cordon taint when spec.unschedulable is set without it."""
    taints = list(spec_of(node).get("taints") or [])
    if spec_of(node).get("unschedulable") and not any(t.get("key") == UNSCHEDULABLE_TAINT for t in taints):
        taints.append({"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"})
    return taints


def toleration_for(taint):
    """The narrowest toleration that matches ``taint`` (a pod's or a DRA request's: same shape)."""
    tol = {"key": taint.get("key"), "effect": taint.get("effect")}
    if taint.get("value"):
        tol.update(operator="Equal", value=taint["value"])
    else:
        tol["operator"] = "Exists"
    return {k: tol[k] for k in ("key", "operator", "value", "effect") if k in tol}


def taint_text(taint):
    """``key=value:Effect``, the way kubectl writes a taint."""
    value = taint.get("value")
    return f"{taint.get('key')}{'=' + value if value else ''}:{taint.get('effect')}"


# --------------------------------------------------------------------------------------------
# node selection (nodeSelector, required node affinity, nodeName)


def requirement_matches(expr, labels):
    """One NodeSelectorRequirement (In, NotIn, Exists, DoesNotExist, Gt, Lt) against a label map."""
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):
        have, want = int_or_none(labels.get(key)), int_or_none(values[0] if values else None)
        if have is None or want is None:
            return False
        return have > want if op == "Gt" else have < want
    return False


def term_matches(term, node):
    """One NodeSelectorTerm (its expressions and fields ANDed) against one node."""
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches no node
    labels = meta_of(node).get("labels") or {}
    if not all(requirement_matches(e, labels) for e in exprs):
        return False
    name_fields = {"metadata.name": meta_of(node).get("name")}
    return all(requirement_matches(f, name_fields) for f in fields)


def node_selector_matches(selector, node):
    """A core/v1 NodeSelector (terms are ORed)."""
    return any(term_matches(t, node) for t in (selector or {}).get("nodeSelectorTerms") or [])


def required_affinity(pod):
    """The pod's required node affinity (a NodeSelector), or None."""
    return ((spec_of(pod).get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )


def matches_node(pod, node):
    """nodeName, nodeSelector and required node affinity of the pod against one node."""
    spec = spec_of(pod)
    if spec.get("nodeName") and spec["nodeName"] != meta_of(node).get("name"):
        return False
    labels = meta_of(node).get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = required_affinity(pod)
    if required and not node_selector_matches(required, node):
        return False
    return True


def expression_text(expr):
    """One NodeSelectorRequirement as people write it: ``key In [a, b]``, ``key Exists``, ``key Gt 4``."""
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    if op in ("Exists", "DoesNotExist"):
        return f"{key} {op}"
    if op in ("Gt", "Lt"):
        return f"{key} {op} {values[0] if values else '(no value)'}"
    return f"{key} {op} [{', '.join(str(v) for v in values)}]"


def term_text(term):
    """One NodeSelectorTerm: its expressions and fields joined by AND."""
    exprs = [expression_text(e) for e in term.get("matchExpressions") or []]
    exprs += [f"field {expression_text(f)}" for f in term.get("matchFields") or []]
    return " AND ".join(exprs) or "(empty term)"


def selector_text(pod):
    """The pod's whole node selection in one line: nodeSelector, required nodeAffinity, nodeName."""
    spec = spec_of(pod)
    parts = [f"{k}={v}" for k, v in sorted((spec.get("nodeSelector") or {}).items())]
    required = required_affinity(pod)
    if required:
        terms = required.get("nodeSelectorTerms") or []
        texts = [term_text(t) for t in terms]
        if len(texts) > 1:
            texts = [f"({t})" for t in texts]
        parts.append("required nodeAffinity: " + (" OR ".join(texts) or "no terms"))
    if spec.get("nodeName"):
        parts.append(f"nodeName={spec['nodeName']}")
    return ", ".join(parts) or "(none)"
