# Copyright: gpusplit contributors
# Apache-2.0
"""Why is a GPU pod Pending? Pure classification over objects read once from the cluster.

Inputs are plain dicts (as the API returns them): all pods, all nodes, FailedScheduling events,
PodGroups (None when scheduling.k8s.io/v1beta1 is not served) and the DRA objects (None when
resource.k8s.io/v1 is not served). No I/O, no Ansible imports.

Facts this rests on (Kubernetes v1.37.2, checked in the lab and in the Go sources):

* The scheduler's PodScheduled message counts nodes per first failing filter, in filter order
  (NodeUnschedulable, NodeName, TaintToleration, NodeAffinity, NodeResourcesFit, ...,
  DynamicResources): "0/9 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) had
  untolerated taint(s), 6 node(s) didn't match Pod's node affinity/selector. preemption: ...".
  Nodes that do not even match the pod's selector are often counted as "untolerated taint"
  (taints are checked first), and the message never names a taint. So the candidate nodes and
  their blockers are computed here from the objects; the message is the fallback and is quoted.
* DRA failures all read "cannot allocate all claims"; whether a device taint or the lack of a
  matching device is the cause is computed from ResourceSlices, DeviceTaintRules, DeviceClasses
  and ResourceClaims.
* Gang scheduling (GenericWorkload, scheduling.k8s.io/v1beta1): a pod names its group with
  spec.schedulingGroup.podGroupName; while fewer than gang.minCount member pods exist the
  scheduler holds them in PreEnqueue and writes no condition at all. When the quorum exists but
  cannot be placed, members get FailedScheduling events such as "minCount (2) cannot be
  satisfied: 0 scheduled, 1 remaining" and the PodGroup a PodGroupInitiallyScheduled=False
  condition.
"""

from __future__ import annotations

import json
import re
from fractions import Fraction

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError

# classes, in the order they are preferred when several apply equally
TAINT = "untolerated_taint"
SHORTAGE = "insufficient_gpu"
DRA_TAINT = "dra_device_taint"
DRA_NO_DEVICE = "dra_no_device"
GANG = "gang_quorum"
SELECTOR = "node_selector_mismatch"
GATED = "scheduling_gated"
UNKNOWN = "unknown"
CLASSES = (TAINT, SHORTAGE, DRA_TAINT, DRA_NO_DEVICE, GANG, SELECTOR, GATED, UNKNOWN)

# extended resources that count as "wants a GPU": nvidia.com/gpu, nvidia.com/gpu.shared, ...
# and the MIG resources of the mixed strategy (nvidia.com/mig-1g.10gb, ...)
GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
TERMINAL_PHASES = ("Succeeded", "Failed")

_NODES_MSG = re.compile(r"^0/(\d+) nodes are available: (.*?)(?:\.\s+preemption:\s*(.*))?\.?\s*$", re.S)
_REASON_ITEM = re.compile(r"^(\d+) (.+)$")
_GANG_MSG = re.compile(
    r"minCount \((\d+)\) (cannot be|is not yet) satisfied: (\d+) scheduled, (\d+) remaining"
)
_GANG_WAIT = re.compile(r"waiting for (?:minCount pods from a gang|pods's pod group \"([^\"]*)\")")


# --------------------------------------------------------------------------------------------
# small helpers


def _meta(obj):
    return (obj or {}).get("metadata") or {}


def _spec(obj):
    return (obj or {}).get("spec") or {}


def _status(obj):
    return (obj or {}).get("status") or {}


def pod_key(pod):
    meta = _meta(pod)
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


_SUFFIX = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
_QUANTITY = re.compile(
    r"^([+-]?)(\d+(?:\.\d*)?|\.\d+)(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)$"
)


def parse_quantity(value):
    """A Kubernetes quantity ("2", 2, "500m", "1Gi", "1e3") as a Fraction; None when invalid."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(value).limit_denominator(10**9)
    m = _QUANTITY.match(str(value).strip())
    if not m:
        return None
    sign, number, exponent, suffix = m.groups()
    amount = Fraction(number)
    if exponent:
        amount *= Fraction(10) ** int(exponent[1:])
    else:
        amount *= _SUFFIX[suffix or ""]
    return -amount if sign == "-" else amount


def _qty_int(value):
    q = parse_quantity(value)
    if q is None:
        return 0
    return int(q) if q.denominator == 1 else float(q)


def is_gpu_resource(name, prefixes=GPU_RESOURCE_PREFIXES):
    return any(str(name).startswith(p) for p in prefixes)


# --------------------------------------------------------------------------------------------
# what a pod asks for


def _container_requests(container, prefixes):
    res = container.get("resources") or {}
    requests = dict(res.get("limits") or {})  # extended resources: requests default to limits
    requests.update(res.get("requests") or {})
    return {k: parse_quantity(v) or Fraction(0) for k, v in requests.items() if is_gpu_resource(k, prefixes)}


def pod_gpu_requests(pod, prefixes=GPU_RESOURCE_PREFIXES):
    """{resource: amount} the scheduler counts for the pod (containers, sidecars, init containers)."""
    spec = _spec(pod)
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
    return {k: (int(v) if Fraction(v).denominator == 1 else float(v)) for k, v in total.items() if v}


def wants_gpu(pod, prefixes=GPU_RESOURCE_PREFIXES):
    """True when the pod asks for a GPU extended resource or for DRA ResourceClaims."""
    return bool(pod_gpu_requests(pod, prefixes)) or bool(_spec(pod).get("resourceClaims"))


def is_unscheduled_pending(pod):
    """Pending, not bound to a node, not being deleted."""
    return (
        _status(pod).get("phase", "Pending") == "Pending"
        and not _spec(pod).get("nodeName")
        and not _meta(pod).get("deletionTimestamp")
    )


# --------------------------------------------------------------------------------------------
# taints and tolerations (core/v1 Toleration.ToleratesTaint)


def _int_or_none(text):
    try:
        return int(str(text), 10)
    except (TypeError, ValueError):
        return None


def tolerates(toleration, taint):
    """Whether one toleration matches one taint, as kube-scheduler decides it."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    op = toleration.get("operator") or "Equal"
    if op == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    if op == "Exists":
        return True
    if op in ("Lt", "Gt"):
        tol, val = _int_or_none(toleration.get("value")), _int_or_none(taint.get("value"))
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
    taints = list(_spec(node).get("taints") or [])
    if _spec(node).get("unschedulable") and not any(t.get("key") == UNSCHEDULABLE_TAINT for t in taints):
        taints.append({"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"})
    return taints


def toleration_for(taint):
    """The narrowest pod toleration that matches ``taint``."""
    tol = {"key": taint.get("key"), "effect": taint.get("effect")}
    if taint.get("value"):
        tol.update(operator="Equal", value=taint["value"])
    else:
        tol["operator"] = "Exists"
    return {k: tol[k] for k in ("key", "operator", "value", "effect") if k in tol}


def taint_text(taint):
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
        have, want = _int_or_none(labels.get(key)), _int_or_none(values[0] if values else None)
        if have is None or want is None:
            return False
        return have > want if op == "Gt" else have < want
    return False


def _term_matches(term, node):
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches no node
    labels = _meta(node).get("labels") or {}
    if not all(requirement_matches(e, labels) for e in exprs):
        return False
    name_fields = {"metadata.name": _meta(node).get("name")}
    return all(requirement_matches(f, name_fields) for f in fields)


def node_selector_matches(selector, node):
    """A core/v1 NodeSelector (terms are ORed)."""
    return any(_term_matches(t, node) for t in (selector or {}).get("nodeSelectorTerms") or [])


def matches_node(pod, node):
    """nodeName, nodeSelector and required node affinity of the pod against one node."""
    spec = _spec(pod)
    if spec.get("nodeName") and spec["nodeName"] != _meta(node).get("name"):
        return False
    labels = _meta(node).get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required and not node_selector_matches(required, node):
        return False
    return True


def _required_affinity(pod):
    """The pod's required node affinity (a NodeSelector), or None."""
    return ((_spec(pod).get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )


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
    spec = _spec(pod)
    parts = [f"{k}={v}" for k, v in sorted((spec.get("nodeSelector") or {}).items())]
    required = _required_affinity(pod)
    if required:
        terms = required.get("nodeSelectorTerms") or []
        texts = [term_text(t) for t in terms]
        if len(texts) > 1:
            texts = [f"({t})" for t in texts]
        parts.append("required nodeAffinity: " + (" OR ".join(texts) or "no terms"))
    if spec.get("nodeName"):
        parts.append(f"nodeName={spec['nodeName']}")
    return ", ".join(parts) or "(none)"


def _selector_hints(pod, nodes):
    """For each nodeSelector key, which values the nodes really carry (to spot a typo)."""
    hints = []
    for key, want in sorted((_spec(pod).get("nodeSelector") or {}).items()):
        values = {}
        for n in nodes:
            labels = _meta(n).get("labels") or {}
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


UNSET = "<unset>"
_HINT_VALUES = 8  # label values shown per failing expression
_HINT_NODES = 3  # node names shown per value


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
            is_gpu_resource(r, cl.prefixes) and _qty_int(v)
            for r, v in (_status(n).get("allocatable") or {}).items()
        )
    ]


def _values_by_node(expr, nodes, field=False):
    """[{value, nodes}] of the expression's key on ``nodes`` (value None: the label is not set)."""
    groups = {}
    for n in nodes:
        name = _meta(n).get("name")
        if field:
            value = name if expr.get("key") == "metadata.name" else None
        else:
            value = (_meta(n).get("labels") or {}).get(expr.get("key"))
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
    required = _required_affinity(pod)
    if not required:
        return [], None
    terms = required.get("nodeSelectorTerms") or []
    names = [_meta(n).get("name") for n in scope_nodes]
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
        entry["met_by"] = [_meta(n).get("name") for n in scope_nodes if _term_matches(term, n)]
        if entry["met_by"]:
            shown = ", ".join(entry["met_by"][:_HINT_NODES])
            more = len(entry["met_by"]) - _HINT_NODES
            hints.append(
                f"{label} ({entry['text']}) is met by {scope} {shown}{f', +{more} more' if more > 0 else ''}"
            )
        for expr, field in exprs:
            if field:
                failing = [
                    _meta(n).get("name")
                    for n in scope_nodes
                    if not requirement_matches(expr, {"metadata.name": _meta(n).get("name")})
                ]
            else:
                failing = [
                    _meta(n).get("name")
                    for n in scope_nodes
                    if not requirement_matches(expr, _meta(n).get("labels") or {})
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


def _selection_scope(cl, pod, requests, claims):
    """(nodes, words) the affinity hint explains itself over: the GPU nodes, narrowed to those
    the nodeSelector admits when it admits some; all nodes when none advertises a GPU."""
    nodes, words = gpu_nodes(cl, requests, claims), "GPU nodes"
    if not nodes:
        nodes, words = list(cl.nodes), "nodes"
    selector = _spec(pod).get("nodeSelector") or {}
    if selector:
        admitted = [
            n for n in nodes if all((_meta(n).get("labels") or {}).get(k) == v for k, v in selector.items())
        ]
        if admitted:
            nodes, words = admitted, f"{words} matching the nodeSelector"
    return nodes, words


def selection_next(pod, affinity):
    """The next place to look for a node selection nobody matches: the labels it selects on."""
    keys = sorted(_spec(pod).get("nodeSelector") or {})
    for term in (affinity or {}).get("terms") or []:
        for f in term["failing"]:
            if not f["field"] and f["key"] not in keys:
                keys.append(f["key"])
    look = f"kubectl get nodes -L {','.join(keys)}" if keys else "kubectl get nodes --show-labels"
    what = []
    if _spec(pod).get("nodeSelector"):
        what.append("spec.nodeSelector")
    if _required_affinity(pod) is not None:
        what.append("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution")
    return f"{look}; fix the pod's {' / '.join(what) or 'node selection'} or label the GPU nodes"


# --------------------------------------------------------------------------------------------
# the scheduler's message


def parse_message(message):
    """{total, reasons: {text: count}, preemption} of "0/N nodes are available: ..."; None if not that shape."""
    if not message:
        return None
    m = _NODES_MSG.match(message.strip())
    if not m:
        return None
    reasons = {}
    for item in re.split(r", (?=\d+ )", m.group(2)):
        im = _REASON_ITEM.match(item.strip())
        if im:
            reasons[im.group(2).strip()] = reasons.get(im.group(2).strip(), 0) + int(im.group(1))
    return {"total": int(m.group(1)), "reasons": reasons, "preemption": m.group(3)}


def parse_gang_message(message):
    """The gang plugin's own wording, as a dict; None for other messages."""
    if not message:
        return None
    m = _GANG_MSG.search(message)
    if m:
        return {
            "min_count": int(m.group(1)),
            "final": m.group(2) == "cannot be",
            "scheduled": int(m.group(3)),
            "remaining": int(m.group(4)),
        }
    m = _GANG_WAIT.search(message)
    if m:
        return {"waiting_for": "group" if m.group(1) is not None else "quorum", "group": m.group(1)}
    return None


def classify_message(message):
    """The class a scheduler message points at on its own (no objects), for the fallback."""
    if parse_gang_message(message):
        return GANG
    parsed = parse_message(message)
    if not parsed:
        return UNKNOWN
    counts = {}
    for text, count in parsed["reasons"].items():
        low = text.lower()
        if low.startswith("insufficient nvidia.com/gpu") or low.startswith("insufficient nvidia.com/mig-"):
            cls = SHORTAGE
        elif "untolerated taint" in low or "were unschedulable" in low:
            cls = TAINT
        elif "claim" in low:
            cls = DRA_NO_DEVICE
        elif "node affinity/selector" in low:
            cls = SELECTOR
        else:
            cls = UNKNOWN
        counts[cls] = counts.get(cls, 0) + count
    # selector mismatch only when it is the whole story; otherwise the nodes that did match matter
    real = {k: v for k, v in counts.items() if k != SELECTOR}
    if not real:
        return SELECTOR if counts else UNKNOWN
    return sorted(real, key=lambda k: (-real[k], CLASSES.index(k)))[0]


def _event_time(event):
    return (
        event.get("lastTimestamp")
        or event.get("eventTime")
        or ((event.get("series") or {}).get("lastObservedTime"))
        or _meta(event).get("creationTimestamp")
        or ""
    )


def _scheduled_condition(pod):
    for cond in _status(pod).get("conditions") or []:
        if cond.get("type") == "PodScheduled":
            return cond
    return None


# --------------------------------------------------------------------------------------------
# DRA: a small CEL evaluator for device selectors


class CelUnsupported(GpusplitError):
    """The expression uses CEL beyond the subset evaluated here."""


class _NoSuchKey:
    """CEL's runtime error for a missing attribute: it propagates like an error value."""

    def __repr__(self):
        return "<no such key>"


NO_SUCH_KEY = _NoSuchKey()

_CEL_TOKEN = re.compile(
    r"\s*(?:(?P<str>\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*')|(?P<num>-?\d+)|"
    r"(?P<op>==|!=|<=|>=|&&|\|\||[<>!()\[\].,])|(?P<id>[A-Za-z_][A-Za-z0-9_]*))"
)
_CEL_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'"}


def _cel_string(token):
    body, out, i = token[1:-1], [], 0
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            nxt = body[i + 1 : i + 2]
            if nxt not in _CEL_ESCAPES:
                raise CelUnsupported(f"escape \\{nxt} is not evaluated here")
            out.append(_CEL_ESCAPES[nxt])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _cel_tokens(text):
    pos, out = 0, []
    text = text.strip()
    while pos < len(text):
        m = _CEL_TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise CelUnsupported(f"cannot read CEL at {text[pos : pos + 20]!r}")
        pos = m.end()
        if m.group("str") is not None:
            out.append(("lit", _cel_string(m.group("str"))))
        elif m.group("num") is not None:
            out.append(("lit", int(m.group("num"))))
        elif m.group("op") is not None:
            out.append(("op", m.group("op")))
        else:
            word = m.group("id")
            if word in ("true", "false"):
                out.append(("lit", word == "true"))
            elif word == "in":
                out.append(("op", "in"))
            else:
                out.append(("id", word))
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


class _AttrMap(dict):
    """device.attributes["domain"]: a missing name is a CEL runtime error."""


class _CelParser:
    """Recursive descent over the token list, evaluating as it goes."""

    def __init__(self, tokens, device):
        self.tokens, self.pos, self.device = tokens, 0, device

    def peek(self):
        return self.tokens[self.pos] if self.pos < len(self.tokens) else (None, None)

    def take(self, value=None):
        tok = self.peek()
        if tok[0] is None or (value is not None and tok[1] != value):
            raise CelUnsupported(f"expected {value or 'a token'}, got {tok[1]!r}")
        self.pos += 1
        return tok

    def parse(self):
        value = self.expr_or()
        if self.pos != len(self.tokens):
            raise CelUnsupported(f"unexpected {self.peek()[1]!r}")
        return value

    # errors behave like CEL's: `false && error` is false, `true || error` is true
    def expr_or(self):
        left = self.expr_and()
        while self.peek() == ("op", "||"):
            self.take()
            left = self._combine(left, self.expr_and(), True)
        return left

    def expr_and(self):
        left = self.unary()
        while self.peek() == ("op", "&&"):
            self.take()
            left = self._combine(left, self.unary(), False)
        return left

    @staticmethod
    def _combine(left, right, is_or):
        short = is_or  # True decides ||, False decides &&
        if left is short or right is short:
            return short
        if left is NO_SUCH_KEY or right is NO_SUCH_KEY:
            return NO_SUCH_KEY
        if not isinstance(left, bool) or not isinstance(right, bool):
            raise CelUnsupported("&& and || need booleans")
        return left or right if is_or else left and right

    def unary(self):
        if self.peek() == ("op", "!"):
            self.take()
            value = self.unary()
            if value is NO_SUCH_KEY:
                return value
            if not isinstance(value, bool):
                raise CelUnsupported("! needs a boolean")
            return not value
        return self.comparison()

    def comparison(self):
        left = self.primary()
        kind, op = self.peek()
        if kind != "op" or op not in ("==", "!=", "<", "<=", ">", ">=", "in"):
            return left
        self.take()
        right = self.primary()
        if left is NO_SUCH_KEY or right is NO_SUCH_KEY:
            return NO_SUCH_KEY
        if op == "==":
            return left == right
        if op == "!=":
            return left != right
        if op == "in":
            if isinstance(right, (list, dict)):
                return left in right
            raise CelUnsupported("`in` needs a list or a map")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (left, right)):
            raise CelUnsupported(f"{op} is evaluated for integers only")
        return {"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right}[op]

    def primary(self):
        kind, value = self.peek()
        if kind == "lit":
            self.take()
            return value
        if (kind, value) == ("op", "("):
            self.take()
            inner = self.expr_or()
            self.take(")")
            return inner
        if (kind, value) == ("op", "["):
            self.take()
            items = []
            while self.peek() != ("op", "]"):
                items.append(self.primary())
                if self.peek() == ("op", ","):
                    self.take()
            self.take("]")
            return items
        if (kind, value) == ("id", "device"):
            self.take()
            return self.path()
        raise CelUnsupported(f"unsupported CEL term {value!r}")

    def path(self):
        current = ("device",)
        while True:
            kind, value = self.peek()
            if (kind, value) == ("op", "."):
                self.take()
                name = self.take()[1]
                if self.peek() == ("op", "("):
                    raise CelUnsupported(f"CEL function {name}() is not evaluated here")
                current = self._step(current, name)
            elif (kind, value) == ("op", "["):
                self.take()
                key = self.take()
                if key[0] != "lit":
                    raise CelUnsupported("only literal map keys are evaluated")
                self.take("]")
                current = self._step(current, key[1])
            else:
                break
        if isinstance(current, tuple):
            raise CelUnsupported(f"device.{'.'.join(current[1:])} is not a value")
        return current

    def _step(self, current, name):
        if current is NO_SUCH_KEY:
            return current
        if current == ("device",):
            if name == "driver":
                return self.device["driver"]
            if name in ("attributes", "capacity"):
                return ("device", name)
            raise CelUnsupported(f"device.{name} is not evaluated here")
        if isinstance(current, tuple) and len(current) == 2:
            return _AttrMap(self.device[current[1]].get(name) or {})
        if isinstance(current, _AttrMap):
            return current[name] if name in current else NO_SUCH_KEY
        raise CelUnsupported(f"cannot select {name!r}")


def _attribute_value(attr):
    for key in ("string", "int", "bool", "version"):
        if key in (attr or {}):
            return attr[key]
    return None


def device_view(driver, device):
    """{driver, attributes: {domain: {name: value}}, capacity: {...}} for the CEL evaluator."""
    view = {"driver": driver, "attributes": {}, "capacity": {}}
    for name, attr in (device.get("attributes") or {}).items():
        domain, _, short = name.rpartition("/")
        view["attributes"].setdefault(domain or driver, {})[short] = _attribute_value(attr)
    for name, cap in (device.get("capacity") or {}).items():
        domain, _, short = name.rpartition("/")
        view["capacity"].setdefault(domain or driver, {})[short] = (cap or {}).get("value")
    return view


def cel_matches(expression, view):
    """True/False for the device; raises CelUnsupported beyond the subset.

    Subset: device.driver, device.attributes["domain"].name (or ["name"]), string/int/bool
    literals, lists, == != < <= > >= in, && || !, parentheses. A missing attribute is a
    non-match (CEL reports "no such key" and the device is not selected).
    """
    result = _CelParser(_cel_tokens(expression), view).parse()
    if result is NO_SUCH_KEY:
        return False
    if not isinstance(result, bool):
        raise CelUnsupported("the expression is not a boolean")
    return result


# --------------------------------------------------------------------------------------------
# DRA: devices, taints, claims


def _device_taint_rule_matches(rule, driver, pool, device_name):
    selector = _spec(rule).get("deviceSelector")
    if selector is None:
        return False  # without a selector a rule selects nothing
    return (
        (not selector.get("driver") or selector["driver"] == driver)
        and (not selector.get("pool") or selector["pool"] == pool)
        and (not selector.get("device") or selector["device"] == device_name)
    )


def device_tolerates(toleration, taint):
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    if (toleration.get("operator") or "Equal") == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def device_toleration_for(taint):
    tol = {
        "key": taint.get("key"),
        "operator": "Equal",
        "value": taint.get("value") or "",
        "effect": taint.get("effect"),
    }
    if not taint.get("value"):
        tol = {"key": taint.get("key"), "operator": "Exists", "effect": taint.get("effect")}
    return tol


class DraIndex:
    """Every published device with its node access and taints, and what is already allocated."""

    def __init__(self, resource):
        resource = resource or {}
        self.classes = {_meta(c).get("name"): c for c in resource.get("classes") or []}
        self.claims = {
            (_meta(c).get("namespace"), _meta(c).get("name")): c for c in resource.get("claims") or []
        }
        self.templates = {
            (_meta(t).get("namespace"), _meta(t).get("name")): t for t in resource.get("templates") or []
        }
        self.rules = list(resource.get("rules") or [])
        self.devices = []
        for s in resource.get("slices") or []:
            spec = _spec(s)
            driver = spec.get("driver")
            pool = (spec.get("pool") or {}).get("name")
            for d in spec.get("devices") or []:
                taints = [
                    dict(t, source=f"ResourceSlice {_meta(s).get('name')}") for t in d.get("taints") or []
                ]
                for r in self.rules:
                    if _device_taint_rule_matches(r, driver, pool, d.get("name")):
                        taint = dict(_spec(r).get("taint") or {})
                        taints.append(dict(taint, source=f"DeviceTaintRule {_meta(r).get('name')}"))
                self.devices.append(
                    {
                        "driver": driver,
                        "pool": pool,
                        "name": d.get("name"),
                        "slice": _meta(s).get("name"),
                        "access": self._access(spec, d),
                        "taints": taints,
                        "view": device_view(driver, d),
                    }
                )
        self.allocated = {}
        for c in resource.get("claims") or []:
            alloc = (_status(c).get("allocation") or {}).get("devices") or {}
            for r in alloc.get("results") or []:
                self.allocated[(r.get("driver"), r.get("pool"), r.get("device"))] = pod_key(c)

    @staticmethod
    def _access(slice_spec, device):
        if slice_spec.get("perDeviceNodeSelection"):
            src = device
        else:
            src = slice_spec
        if src.get("nodeName"):
            return ("name", src["nodeName"])
        if src.get("allNodes"):
            return ("all", None)
        if src.get("nodeSelector"):
            return ("selector", src["nodeSelector"])
        return ("none", None)

    @staticmethod
    def reachable(device, node):
        kind, value = device["access"]
        if kind == "name":
            return value == _meta(node).get("name")
        if kind == "all":
            return True
        if kind == "selector":
            return node_selector_matches(value, node)
        return False

    def pod_claims(self, pod):
        """[(pod claim name, claim spec or None, claim object or None, where)] for the pod."""
        ns = _meta(pod).get("namespace") or "default"
        generated = {
            s.get("name"): s.get("resourceClaimName") for s in _status(pod).get("resourceClaimStatuses") or []
        }
        out = []
        for ref in _spec(pod).get("resourceClaims") or []:
            name = ref.get("name")
            claim_name = ref.get("resourceClaimName") or generated.get(name)
            if claim_name:
                claim = self.claims.get((ns, claim_name))
                out.append((name, _spec(claim) if claim else None, claim, f"ResourceClaim {ns}/{claim_name}"))
            elif ref.get("resourceClaimTemplateName"):
                tmpl = self.templates.get((ns, ref["resourceClaimTemplateName"]))
                spec = _spec(_spec(tmpl)) if tmpl else None
                out.append(
                    (name, spec, None, f"ResourceClaimTemplate {ns}/{ref['resourceClaimTemplateName']}")
                )
            else:
                out.append((name, None, None, "(no claim named)"))
        return out

    def request_variants(self, request):
        """The alternatives of one claim request: [exactly] or its firstAvailable subrequests."""
        if request.get("exactly"):
            return [dict(request["exactly"], name=request.get("name"))]
        return [
            dict(s, name=f"{request.get('name')}/{s.get('name')}")
            for s in request.get("firstAvailable") or []
        ]

    def selected(self, variant):
        """(devices matching class + request selectors, [unevaluated selector texts])."""
        cls = self.classes.get(variant.get("deviceClassName"))
        exprs = [
            (sel.get("cel") or {}).get("expression")
            for sel in ((_spec(cls).get("selectors") or []) if cls else []) + (variant.get("selectors") or [])
        ]
        exprs = [e for e in exprs if e]
        unevaluated = []
        out = []
        for dev in self.devices:
            ok = True
            for expr in exprs:
                try:
                    if not cel_matches(expr, dev["view"]):
                        ok = False
                        break
                except CelUnsupported:
                    if expr not in unevaluated:
                        unevaluated.append(expr)
            if ok:
                out.append(dev)
        return out, unevaluated

    def evaluate_variant(self, variant, node, own_claim_key):
        """{matching, untainted, free, needed, taints, unevaluated} of one request variant on one node."""
        devices, unevaluated = self.selected(variant)
        devices = [d for d in devices if self.reachable(d, node)]
        tolerations = variant.get("tolerations") or []
        untainted, taint_hits = [], []
        for d in devices:
            blocking = [
                t
                for t in d["taints"]
                if t.get("effect") in BLOCKING_EFFECTS
                and not any(device_tolerates(x, t) for x in tolerations)
            ]
            if blocking:
                taint_hits.append((d, blocking))
            else:
                untainted.append(d)
        free = [
            d
            for d in untainted
            if self.allocated.get((d["driver"], d["pool"], d["name"])) in (None, own_claim_key)
        ]
        if variant.get("allocationMode") == "All":
            needed = max(1, len(devices))
            ok = bool(devices) and len(free) == len(devices)
        else:
            needed = int(variant.get("count") or 1)
            ok = len(free) >= needed
        return {
            "ok": ok,
            "needed": needed,
            "matching": len(devices),
            "untainted": len(untainted),
            "free": len(free),
            "taints": taint_hits,
            "unevaluated": unevaluated,
        }


def _claim_on_node(dra, claim_name, claim_spec, claim_obj, node):
    """(blocker class or None, details) for one unallocated claim on one node."""
    if claim_obj is not None and (_status(claim_obj).get("allocation")):
        alloc_nodes = (_status(claim_obj)["allocation"]).get("nodeSelector")
        if alloc_nodes and not node_selector_matches(alloc_nodes, node):
            return DRA_NO_DEVICE, {"claim": claim_name, "why": "the claim is allocated on another node"}
        return None, {"claim": claim_name, "why": "already allocated"}
    if claim_spec is None:
        return DRA_NO_DEVICE, {"claim": claim_name, "why": "the claim does not exist (yet)"}
    own = pod_key(claim_obj) if claim_obj else None
    worst = None
    for request in (claim_spec.get("devices") or {}).get("requests") or []:
        results = [(v, dra.evaluate_variant(v, node, own)) for v in dra.request_variants(request)]
        if any(r["ok"] for _, r in results):
            continue
        variant, res = results[0] if results else ({"name": request.get("name")}, None)
        if res is None:
            return DRA_NO_DEVICE, {
                "claim": claim_name,
                "request": request.get("name"),
                "why": "empty request",
            }
        detail = {
            "claim": claim_name,
            "request": variant.get("name"),
            "device_class": variant.get("deviceClassName"),
            "needed": res["needed"],
            "matching": res["matching"],
            "untainted": res["untainted"],
            "free": res["free"],
            "unevaluated_selectors": res["unevaluated"],
        }
        if res["matching"] >= res["needed"] and res["untainted"] < res["needed"]:
            taints = []
            for dev, blocking in res["taints"]:
                for t in blocking:
                    taints.append(
                        {
                            "device": f"{dev['driver']}/{dev['pool']}/{dev['name']}",
                            "taint": taint_text(t),
                            "source": t.get("source"),
                            "toleration": device_toleration_for(t),
                        }
                    )
            detail["device_taints"] = taints
            return DRA_TAINT, detail
        if res["matching"] == 0:
            detail["why"] = "no published device matches the class and selectors on this node"
        elif res["untainted"] >= res["needed"]:
            detail["why"] = f"{res['untainted'] - res['free']} matching device(s) already allocated"
        else:
            detail["why"] = f"{res['matching']} matching device(s), {res['needed']} needed"
        worst = worst or (DRA_NO_DEVICE, detail)
    return worst or (None, {"claim": claim_name})


# --------------------------------------------------------------------------------------------
# the cluster picture shared by all pods of one diagnosis


class Cluster:
    def __init__(
        self, pods, nodes, events=None, podgroups=None, resource=None, prefixes=GPU_RESOURCE_PREFIXES
    ):
        self.prefixes = tuple(prefixes)
        self.pods = list(pods or [])
        self.nodes = sorted(nodes or [], key=lambda n: _meta(n).get("name") or "")
        self.podgroups_served = podgroups is not None
        self.podgroups = {(_meta(g).get("namespace"), _meta(g).get("name")): g for g in podgroups or []}
        self.dra_served = resource is not None
        self.dra = DraIndex(resource)
        self.used = {}
        self.holders = {}
        self.members = {}
        for p in self.pods:
            spec, phase = _spec(p), _status(p).get("phase")
            if phase in TERMINAL_PHASES:
                continue
            node = spec.get("nodeName")
            if node:
                for r, amount in pod_gpu_requests(p, self.prefixes).items():
                    self.used.setdefault(node, {})[r] = self.used.get(node, {}).get(r, 0) + amount
                    self.holders.setdefault((node, r), []).append((pod_key(p), amount))
            group = (spec.get("schedulingGroup") or {}).get("podGroupName")
            if group:
                self.members.setdefault((_meta(p).get("namespace") or "default", group), []).append(p)
        self.events = {}
        for e in sorted(events or [], key=_event_time):
            obj = e.get("involvedObject") or e.get("regarding") or {}
            if obj.get("kind") not in (None, "Pod"):
                continue
            key = f"{obj.get('namespace') or 'default'}/{obj.get('name')}"
            self.events.setdefault(key, []).append(e)

    def allocatable(self, node, resource):
        return _qty_int((_status(node).get("allocatable") or {}).get(resource))

    def node_usage(self, node, resource):
        name = _meta(node).get("name")
        alloc = self.allocatable(node, resource)
        used = self.used.get(name, {}).get(resource, 0)
        used = int(used) if Fraction(used).denominator == 1 else float(used)
        holders = sorted(self.holders.get((name, resource), []))
        return {
            "allocatable": alloc,
            "requested": used,
            "free": alloc - used,
            "holders": [f"{k} ({v:g})" for k, v in holders[:5]] + (["..."] if len(holders) > 5 else []),
        }

    def pod_messages(self, pod):
        """(PodScheduled message or None, the pod's FailedScheduling event messages, newest last)."""
        cond = _scheduled_condition(pod)
        message = cond.get("message") if cond and cond.get("status") == "False" else None
        events = [e.get("message") or e.get("note") or "" for e in self.events.get(pod_key(pod), [])]
        return message, events


# --------------------------------------------------------------------------------------------
# classification of one pod


def _node_blockers(cl, pod, node, requests, claims):
    """[(class, detail)] for one candidate node, in the scheduler's filter order."""
    name = _meta(node).get("name")
    out = []
    taints = untolerated_taints(_spec(pod).get("tolerations"), node_taints(node))
    if taints:
        out.append((TAINT, {"node": name, "taints": [taint_text(t) for t in taints], "raw": taints}))
    short = {}
    for r, want in sorted(requests.items()):
        usage = cl.node_usage(node, r)
        if usage["free"] < want:
            short[r] = dict(usage, wanted=want)
    if short:
        out.append((SHORTAGE, {"node": name, "resources": short}))
    for claim_name, claim_spec, claim_obj, where in claims:
        cls, detail = _claim_on_node(cl.dra, claim_name, claim_spec, claim_obj, node)
        if cls:
            out.append((cls, dict(detail, node=name, where=where)))
    return out


def _result(pod, cls, summary, next_step, message, events, **extra):
    entry = {
        "namespace": _meta(pod).get("namespace") or "default",
        "name": _meta(pod).get("name"),
        "pod": pod_key(pod),
        "class": cls,
        "summary": summary,
        "next": next_step,
        "message": message,
        "events": events[-3:],
    }
    entry.update(extra)
    return entry


def _summarise_taint(details):
    by_taint = {}
    for d in details:
        for t in d["taints"]:
            by_taint.setdefault(t, []).append(d["node"])
    parts = [f"{t} on {', '.join(nodes)}" for t, nodes in sorted(by_taint.items())]
    tolerations = []
    for d in details:
        for raw in d["raw"]:
            if raw.get("key") == UNSCHEDULABLE_TAINT:
                continue
            tol = toleration_for(raw)
            if tol not in tolerations:
                tolerations.append(tol)
    cordoned = sorted(
        {d["node"] for d in details for raw in d["raw"] if raw.get("key") == UNSCHEDULABLE_TAINT}
    )
    summary = "untolerated taint(s): " + "; ".join(parts)
    nxt = []
    if tolerations:
        nxt.append("add to the pod's tolerations: " + json.dumps(tolerations, separators=(",", ":")))
    if cordoned:
        nxt.append(f"or uncordon {', '.join(cordoned)} (kubectl uncordon) if the cordon is over")
    nxt.append(f"kubectl describe node {details[0]['node']} | grep -A3 Taints")
    return summary, "; ".join(nxt), tolerations


def _summarise_shortage(details):
    parts, zero = [], []
    for d in details:
        for r, u in sorted(d["resources"].items()):
            parts.append(
                f"{d['node']}: {r} allocatable {u['allocatable']:g}, requested {u['requested']:g}, "
                f"free {u['free']:g}, pod wants {u['wanted']:g}"
            )
            if not u["allocatable"]:
                zero.append(d["node"])
    summary = "Insufficient GPUs on every candidate node (" + "; ".join(parts) + ")"
    if zero and len(zero) == len(details):
        nxt = (
            f"{', '.join(sorted(set(zero)))} advertise(s) no GPUs: is the device plugin running there? "
            "run playbooks/verify.yml and read out/fleet-report.json"
        )
    else:
        first = details[0]
        holders = []
        for u in first["resources"].values():
            holders.extend(u["holders"])
        nxt = f"kubectl describe node {first['node']} (Allocated resources)"
        if holders:
            nxt += "; GPUs held by " + ", ".join(holders)
        nxt += "; free GPUs or grow the Kubernetes share (out/fleet-report.json)"
    return summary, nxt


def _summarise_dra(cls, details):
    if cls == DRA_TAINT:
        seen, parts, tolerations = set(), [], []
        for d in details:
            for t in d.get("device_taints") or []:
                key = (t["device"], t["taint"], t["source"])
                if key not in seen:
                    seen.add(key)
                    parts.append(f"{t['device']} {t['taint']} ({t['source']})")
                if t["toleration"] not in tolerations:
                    tolerations.append(t["toleration"])
        d0 = details[0]
        summary = (
            f"claim {d0['claim']} request {d0.get('request')}: every matching device is tainted: "
            + "; ".join(parts[:6])
            + (" ..." if len(parts) > 6 else "")
        )
        sources = sorted({t["source"] for d in details for t in d.get("device_taints") or []})
        nxt = (
            f"kubectl get {sources[0].split(' ')[0].lower()} {sources[0].split(' ', 1)[1]} -o yaml"
            if sources
            else ""
        )
        nxt += "; if the pod may use those devices, add to the claim request's tolerations: " + json.dumps(
            tolerations, separators=(",", ":")
        )
        return summary, nxt, tolerations
    d0 = details[0]
    parts = sorted({f"{d['node']}: {d.get('why')}" for d in details})
    summary = (
        f"claim {d0['claim']}"
        + (f" request {d0['request']}" if d0.get("request") else "")
        + ": cannot allocate ("
    )
    summary += "; ".join(parts[:4]) + ("; ..." if len(parts) > 4 else "") + ")"
    uneval = sorted({e for d in details for e in d.get("unevaluated_selectors") or []})
    if uneval:
        summary += f"; selector(s) not evaluated here: {'; '.join(uneval)}"
    nxt = "kubectl get resourceslices -o yaml (driver, pool, attributes)"
    if d0.get("device_class"):
        nxt += f"; kubectl get deviceclass {d0['device_class']} -o yaml (selectors)"
    nxt += f"; {d0.get('where', 'the claim')}"
    return summary, nxt, []


def _gang_state(cl, pod):
    """None, or {group, policy, min_count, present, bound, exists} for a pod in a PodGroup."""
    group = (_spec(pod).get("schedulingGroup") or {}).get("podGroupName")
    if not group or not cl.podgroups_served:
        return None
    ns = _meta(pod).get("namespace") or "default"
    pg = cl.podgroups.get((ns, group))
    members = cl.members.get((ns, group), [])
    state = {
        "group": f"{ns}/{group}",
        "exists": pg is not None,
        "present": len(members),
        "bound": sum(1 for m in members if _spec(m).get("nodeName")),
    }
    if pg is None:
        return state
    policy = _spec(pg).get("schedulingPolicy") or {}
    state["policy"] = "gang" if policy.get("gang") is not None else "basic"
    state["min_count"] = int((policy.get("gang") or {}).get("minCount") or 0) or None
    for cond in _status(pg).get("conditions") or []:
        if cond.get("type") == "PodGroupInitiallyScheduled":
            state["condition"] = {k: cond.get(k) for k in ("status", "reason", "message")}
    gang_events = []
    for m in members:
        for e in cl.events.get(pod_key(m), []):
            msg = e.get("message") or e.get("note") or ""
            if parse_gang_message(msg) and msg not in gang_events:
                gang_events.append(msg)
    cond = state.get("condition") or {}
    if cond.get("status") == "False" and cond.get("message") and cond["message"] not in gang_events:
        gang_events.append(cond["message"])  # the scheduler's verdict on the whole group
    state["gang_messages"] = gang_events[-3:]
    return state


def classify_pod(cl, pod):
    """One diagnosis entry for one unscheduled GPU pod."""
    message, events = cl.pod_messages(pod)
    quoted = message or (events[-1] if events else None)
    spec = _spec(pod)
    requests = pod_gpu_requests(pod, cl.prefixes)
    claims = cl.dra.pod_claims(pod) if spec.get("resourceClaims") else []
    extra = {"wants": {"resources": requests, "claims": [c[0] for c in claims]}}

    gates = [g.get("name") for g in spec.get("schedulingGates") or []]
    if gates:
        return _result(
            pod,
            GATED,
            f"held by scheduling gate(s) {', '.join(gates)}; the scheduler does not look at it yet",
            "whoever owns the gate removes it (kubectl get pod -o jsonpath='{.spec.schedulingGates}')",
            quoted,
            events,
            **extra,
        )

    gang = _gang_state(cl, pod)
    if gang is not None:
        extra["gang"] = gang
        if not gang["exists"]:
            return _result(
                pod,
                GANG,
                f"PodGroup {gang['group']} does not exist; the scheduler holds the pod until it does",
                f"create PodGroup {gang['group']} (scheduling.k8s.io/v1beta1) or fix spec.schedulingGroup.podGroupName",
                quoted,
                events,
                **extra,
            )
        if gang.get("policy") == "gang" and gang["min_count"] and gang["present"] < gang["min_count"]:
            missing = gang["min_count"] - gang["present"]
            return _result(
                pod,
                GANG,
                f"gang {gang['group']}: {gang['present']} of minCount {gang['min_count']} pods present "
                f"({gang['bound']} bound); the scheduler waits for the quorum",
                f"create the {missing} missing member pod(s) or lower minCount "
                f"(kubectl get podgroup -n {gang['group'].split('/')[0]} {gang['group'].split('/')[1]} -o yaml)",
                quoted,
                events,
                **extra,
            )
    elif (spec.get("schedulingGroup") or {}).get("podGroupName") and not cl.podgroups_served:
        extra["gang"] = {"group": spec["schedulingGroup"]["podGroupName"], "api_served": False}

    candidates = [n for n in cl.nodes if matches_node(pod, n)]
    extra["candidates"] = [_meta(n).get("name") for n in candidates]
    if not candidates:
        hints = _selector_hints(pod, cl.nodes)
        scope_nodes, scope = _selection_scope(cl, pod, requests, claims)
        more, affinity = affinity_hints(pod, scope_nodes, scope)
        hints += more
        if affinity is not None:
            extra["affinity"] = affinity
        return _result(
            pod,
            SELECTOR,
            f"no node matches the pod's node selection ({selector_text(pod)})"
            + (": " + "; ".join(hints) if hints else ""),
            selection_next(pod, affinity),
            quoted,
            events,
            **extra,
        )

    per_node = {}
    for node in candidates:
        per_node[_meta(node).get("name")] = _node_blockers(cl, pod, node, requests, claims)
    extra["nodes"] = {
        name: [{"class": c, **{k: v for k, v in d.items() if k != "raw"}} for c, d in blockers]
        for name, blockers in per_node.items()
    }
    open_nodes = [name for name, blockers in per_node.items() if not blockers]

    if open_nodes:
        # by the objects the pod fits somewhere: trust the scheduler's own words
        gang_msgs = (gang or {}).get("gang_messages") or []
        if gang and gang.get("policy") == "gang" and (parse_gang_message(quoted) or gang_msgs):
            text = parse_gang_message(quoted) and quoted or gang_msgs[-1]
            return _result(
                pod,
                GANG,
                f"gang {gang['group']}: {gang['present']} pods present, minCount {gang['min_count']}, "
                f"{gang['bound']} bound; the scheduler says: {text}",
                f"kubectl get podgroup -n {gang['group'].split('/')[0]} {gang['group'].split('/')[1]} -o yaml "
                "(status.conditions); kubectl get events --field-selector reason=FailedScheduling",
                quoted,
                events,
                **extra,
            )
        cls = classify_message(quoted) if quoted else UNKNOWN
        if quoted is None:
            summary = (
                f"no scheduling attempt recorded yet; by the objects it fits on {', '.join(open_nodes[:3])}"
            )
        else:
            summary = (
                f"the scheduler says: {quoted!r}; by the objects it would fit on {', '.join(open_nodes[:3])}"
            )
            if cls == UNKNOWN:
                summary = f"the scheduler says: {quoted!r}"
        return _result(
            pod,
            cls,
            summary,
            f"kubectl describe pod -n {_meta(pod).get('namespace') or 'default'} {_meta(pod).get('name')} (Events); "
            "re-run the diagnosis (the message may be from an older attempt)",
            quoted,
            events,
            **extra,
        )

    # every candidate node is blocked: the most common first blocker wins
    first = {name: blockers[0][0] for name, blockers in per_node.items()}
    counts = {}
    for cls in first.values():
        counts[cls] = counts.get(cls, 0) + 1
    primary = sorted(counts, key=lambda c: (-counts[c], CLASSES.index(c)))[0]
    details = [
        d for name, blockers in per_node.items() for c, d in blockers if c == primary and first[name] == c
    ]
    tolerations = []
    if primary == TAINT:
        summary, nxt, tolerations = _summarise_taint(details)
        extra["suggested_tolerations"] = tolerations
    elif primary == SHORTAGE:
        summary, nxt = _summarise_shortage(details)
    else:
        summary, nxt, tolerations = _summarise_dra(primary, details)
        if tolerations:
            extra["suggested_device_tolerations"] = tolerations
    others = sorted((c for c in counts if c != primary), key=CLASSES.index)
    if others:
        summary += "; other candidate node(s): " + ", ".join(f"{counts[c]} {c}" for c in others)
    extra["blocked_by"] = counts

    if gang and gang.get("policy") == "gang" and gang.get("min_count"):
        extra["cause"] = primary
        said = (gang.get("gang_messages") or [None])[-1]
        return _result(
            pod,
            GANG,
            f"gang {gang['group']}: {gang['present']} pods present (minCount {gang['min_count']}), "
            f"{gang['bound']} bound, the group cannot be placed"
            + (f" ({said})" if said else "")
            + f": {summary}",
            nxt,
            quoted,
            events,
            **extra,
        )
    return _result(pod, primary, summary, nxt, quoted, events, **extra)


# --------------------------------------------------------------------------------------------
# the whole diagnosis


def diagnose(
    pods, nodes, events=None, podgroups=None, resource=None, namespaces=None, prefixes=GPU_RESOURCE_PREFIXES
):
    """{pods: [one entry per unscheduled GPU pod], counts: {class: n}, apis: {...}}.

    ``podgroups``/``resource``: None when the API is not served (the entries then say so).
    ``namespaces``: only diagnose pods there (all pods still count for node usage).
    """
    cl = Cluster(pods, nodes, events, podgroups, resource, prefixes)
    wanted = set(namespaces or [])
    entries = []
    for pod in sorted(cl.pods, key=pod_key):
        if wanted and (_meta(pod).get("namespace") or "default") not in wanted:
            continue
        if not is_unscheduled_pending(pod) or not wants_gpu(pod, cl.prefixes):
            continue
        entries.append(classify_pod(cl, pod))
    counts = {c: 0 for c in CLASSES}
    for e in entries:
        counts[e["class"]] += 1
    return {
        "pods": entries,
        "counts": {k: v for k, v in counts.items() if v},
        "apis": {"podgroups": cl.podgroups_served, "dra": cl.dra_served},
    }


def report_table(report, width=None):
    """One line per pod: POD, CLASS, REASON, NEXT."""
    header = ("POD", "CLASS", "REASON", "NEXT")
    rows = [(e["pod"], e["class"], e["summary"], e["next"]) for e in report["pods"]]
    if not rows:
        return "no Pending GPU pods"
    w0 = max(len(r[0]) for r in [header, *rows])
    w1 = max(len(r[1]) for r in [header, *rows])
    lines = []
    for r in [header, *rows]:
        reason, nxt = r[2], r[3]
        if width:
            reason = reason if len(reason) <= width else reason[: width - 3] + "..."
        lines.append(f"{r[0].ljust(w0)}  {r[1].ljust(w1)}  {reason}  -> {nxt}")
    counts = ", ".join(f"{v} {k}" for k, v in report["counts"].items())
    lines.append(f"{len(rows)} Pending GPU pod(s): {counts}")
    return "\n".join(lines)


def dumps(report):
    return json.dumps(report, indent=2, sort_keys=True, default=str)
