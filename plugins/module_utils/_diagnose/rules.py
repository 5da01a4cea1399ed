# Copyright: gpusplit contributors
# Apache-2.0
"""The diagnose rule table: one entry per Pending class, in priority order.

Private to the collection.

A :class:`Rule` names its class and says at which ``stage`` kube-scheduler stops the pod, how
the diagnosis finds that, and how it tells it (a summary and the next place to look):

* ``check(case)``, for the stages before any node is looked at ("gate": spec.schedulingGates;
  "queue": the gang's PreEnqueue wait for its quorum; "selection": no node passes the pod's node
  selection): ``(summary, next step)`` when the rule applies, else None. The stages run in
  :data:`STAGES` order, the rules of one stage in table order; the first hit is the pod's class.
* ``blocks(case, node)``, for the "filter" stage: ``[(step, detail)]`` for one node that passes
  the node selection. One node's findings are ordered as the scheduler runs its filters
  (``filter``, in :data:`FILTERS` order), then by ``step`` (e.g. the claim's position in the pod).
  When every candidate node is blocked, the class that blocks most nodes first wins (ties: table
  order) and ``summarise(details)`` tells it: ``(summary, next step, {extra entry fields})``.
* ``reason(text)`` matches one item of "0/N nodes are available: ..." (lower case), ``message``
  a whole scheduler message (checked first); ``sole_reason``: that reason counts only when no
  other class is named. Used when by the objects the pod fits somewhere: the scheduler's own
  words then decide (:func:`classify.classify_message`).
* ``override(case, outcome)`` may claim the filter stage's outcome for this class (a gang member
  that cannot be placed holds its whole group): ``(summary, next step)`` or None.

``case`` is the pod being diagnosed (:class:`classify.PodCase`): ``pod``, ``cl`` (the
:class:`snapshot.Cluster`), ``requests``, ``claims``, ``quoted`` (the scheduler's message),
``gang``, ``candidates``, ``claim_blockers(node)`` and ``extra`` (fields added to the entry).

Adding a rule is adding one entry to :data:`RULES` (and its functions, next to the others here).
"""

from __future__ import annotations

import json
from collections import namedtuple

from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.dra_index import TAINTED, UNAVAILABLE
from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.messages import parse_gang_message
from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.selection import (
    affinity_hints,
    selection_next,
    selection_scope,
    selector_hints,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.scheduling import (
    LABEL_TIME_SLICING_ONE_PER_POD,
    LABEL_TIME_SLICING_REPLICAS,
    UNSCHEDULABLE_TAINT,
    meta_of,
    node_taints,
    selector_text,
    spec_of,
    taint_text,
    toleration_for,
    untolerated_taints,
)

# where kube-scheduler stops a pod, in the order it gets there
STAGES = ("gate", "queue", "selection", "filter")
# the filters that find a node unfit, in the order kube-scheduler runs them
FILTERS = (
    "NodeUnschedulable",
    "NodeName",
    "TaintToleration",
    "NodeAffinity",
    "NodeResourcesFit",
    "DynamicResources",
)

MIG_RESOURCE_PREFIX = "nvidia.com/mig-"  # the device plugin's MIG resources under mig_strategy mixed

# the classes of the rules below
TAINT = "untolerated_taint"
SHORTAGE = "insufficient_gpu"
DRA_TAINT = "dra_device_taint"
DRA_NO_DEVICE = "dra_no_device"
GANG = "gang_quorum"
SELECTOR = "node_selector_mismatch"
GATED = "scheduling_gated"
UNKNOWN = "unknown"


Rule = namedtuple(
    "Rule",
    (
        "name",  # the class reported for the pod
        "stage",  # STAGES: where the scheduler stops the pod; None for UNKNOWN
        "check",  # (case) -> (summary, next step) or None; stages before "filter"
        "filter",  # FILTERS: the scheduler filter whose failure ``blocks`` finds
        "blocks",  # (case, node) -> [(step, detail)]; stage "filter"
        "summarise",  # ([detail of each node this class blocks first]) -> (summary, next step, {extra})
        "reason",  # (lower-case item of "0/N nodes are available: ...") -> bool
        "sole_reason",  # the reason points at this class only when no other class is named
        "message",  # (whole scheduler message) -> truthy when it is this class's
        "override",  # (case, Outcome of the filter stage) -> (summary, next step) or None
    ),
    defaults=(None, None, None, None, None, None, False, None, None),
)


def checked(table):
    """The table as a tuple, or GpusplitError naming every entry that cannot work."""
    table = tuple(table)
    errors, seen = [], set()
    for rule in table:
        where = f"diagnose rule {rule.name!r}"
        if not rule.name or rule.name in seen:
            errors.append(f"{where}: the name is empty or used twice")
        seen.add(rule.name)
        if rule.stage is not None and rule.stage not in STAGES:
            errors.append(f"{where}: stage must be one of {', '.join(STAGES)}")
        if rule.check and rule.stage not in STAGES[:-1]:
            errors.append(f"{where}: check needs a stage before 'filter'")
        if rule.blocks and (rule.stage != "filter" or rule.filter not in FILTERS or not rule.summarise):
            errors.append(f"{where}: blocks needs stage 'filter', a filter from FILTERS and summarise")
    if UNKNOWN not in seen:
        errors.append(f"diagnose rules: {UNKNOWN!r} (what no rule explains) is missing")
    if errors:
        raise GpusplitError(errors)
    return table


# --------------------------------------------------------------------------------------------
# before any node is looked at


def _gated(case):
    gates = [g.get("name") for g in spec_of(case.pod).get("schedulingGates") or []]
    if not gates:
        return None
    return (
        f"held by scheduling gate(s) {', '.join(gates)}; the scheduler does not look at it yet",
        "whoever owns the gate removes it (kubectl get pod -o jsonpath='{.spec.schedulingGates}')",
    )


def _podgroup_yaml(gang):
    ns, name = gang["group"].split("/")[0], gang["group"].split("/")[1]
    return f"kubectl get podgroup -n {ns} {name} -o yaml"


def _gang_waits(case):
    """The PodGroup is missing or its quorum is not there yet (PreEnqueue holds the pod)."""
    gang = case.gang
    if gang is None:
        group = (spec_of(case.pod).get("schedulingGroup") or {}).get("podGroupName")
        if group and not case.cl.podgroups_served:
            case.extra["gang"] = {"group": group, "api_served": False}
        return None
    case.extra["gang"] = gang
    if not gang["exists"]:
        return (
            f"PodGroup {gang['group']} does not exist; the scheduler holds the pod until it does",
            f"create PodGroup {gang['group']} (scheduling.k8s.io/v1beta1) or fix spec.schedulingGroup.podGroupName",
        )
    if gang.get("policy") == "gang" and gang["min_count"] and gang["present"] < gang["min_count"]:
        missing = gang["min_count"] - gang["present"]
        return (
            f"gang {gang['group']}: {gang['present']} of minCount {gang['min_count']} pods present "
            f"({gang['bound']} bound); the scheduler waits for the quorum",
            f"create the {missing} missing member pod(s) or lower minCount ({_podgroup_yaml(gang)})",
        )
    return None


def _gang_cannot_be_placed(case, outcome):
    """A gang member whose group the scheduler cannot place: the gang is the class."""
    gang = case.gang
    if not gang or gang.get("policy") != "gang":
        return None
    said = (gang.get("gang_messages") or [None])[-1]
    if outcome.open_nodes:
        # by the objects the pod fits somewhere: trust the scheduler's own words
        text = case.quoted if parse_gang_message(case.quoted) else said
        if not text:
            return None
        return (
            f"gang {gang['group']}: {gang['present']} pods present, minCount {gang['min_count']}, "
            f"{gang['bound']} bound; the scheduler says: {text}",
            f"{_podgroup_yaml(gang)} (status.conditions); "
            "kubectl get events --field-selector reason=FailedScheduling",
        )
    if not gang.get("min_count"):
        return None
    case.extra["cause"] = outcome.cls
    return (
        f"gang {gang['group']}: {gang['present']} pods present (minCount {gang['min_count']}), "
        f"{gang['bound']} bound, the group cannot be placed"
        + (f" ({said})" if said else "")
        + f": {outcome.summary}",
        outcome.next,
    )


def _no_node_selected(case):
    if case.candidates:
        return None
    hints = selector_hints(case.pod, case.cl.nodes)
    scope_nodes, scope = selection_scope(case.cl, case.pod, case.requests, case.claims)
    more, affinity = affinity_hints(case.pod, scope_nodes, scope)
    hints += more
    if affinity is not None:
        case.extra["affinity"] = affinity
    return (
        f"no node matches the pod's node selection ({selector_text(case.pod)})"
        + (": " + "; ".join(hints) if hints else ""),
        selection_next(case.pod, affinity),
    )


# --------------------------------------------------------------------------------------------
# on each node that passes the node selection


def _untolerated(case, node):
    taints = untolerated_taints(spec_of(case.pod).get("tolerations"), node_taints(node))
    if not taints:
        return []
    name = meta_of(node).get("name")
    return [(0, {"node": name, "taints": [taint_text(t) for t in taints], "raw": taints})]


def _short_of_gpus(case, node):
    short = {}
    for r, want in sorted(case.requests.items()):
        usage = case.cl.node_usage(node, r)
        if usage["free"] < want:
            short[r] = dict(usage, wanted=want)
    if not short:
        return []
    detail = {"node": meta_of(node).get("name"), "resources": short, "time_slicing": _time_slicing(node)}
    missing = _mig_profiles_nobody_offers(case.cl, short)
    if missing:
        detail["mig_offered"] = missing
    return [(0, detail)]


def _mig_profiles_nobody_offers(cl, short):
    """{MIG resource the pod wants that no node of the cluster advertises: [the MIG resources nodes do]}."""
    wanted = [r for r in short if r.startswith(MIG_RESOURCE_PREFIX)]
    if not wanted:
        return {}
    offered = sorted(
        {
            r
            for n in cl.nodes
            for r in ((n.get("status") or {}).get("allocatable") or {})
            if r.startswith(MIG_RESOURCE_PREFIX) and cl.allocatable(n, r)
        }
    )
    return {r: offered for r in wanted if r not in offered}


def _time_slicing(node):
    """(replicas per GPU, fails requests over one) of a node whose Kubernetes share gpusplit time-slices, from
    its labels; None for any other node."""
    labels = meta_of(node).get("labels") or {}
    replicas = labels.get(LABEL_TIME_SLICING_REPLICAS)
    if not replicas or not replicas.isdigit() or not replicas.isascii() or int(replicas) < 1:
        return None
    return int(replicas), labels.get(LABEL_TIME_SLICING_ONE_PER_POD) == "true"


def _time_slicing_words(details):
    """What a shortage on time-sliced nodes means: (words for the summary, the next step), or None."""
    sliced = [d for d in details if d.get("time_slicing")]
    if not sliced:
        return None
    parts, too_many = [], []
    for d in sliced:
        replicas, one_per_pod = d["time_slicing"]
        for r, u in sorted(d["resources"].items()):
            gpus = u["allocatable"] / replicas
            parts.append(f"{d['node']}: {r} is {gpus:g} GPU(s) time-sliced x{replicas}")
            if u["wanted"] > u["allocatable"]:
                too_many.append(f"the pod asks for {u['wanted']:g} {r}, more replicas than {d['node']} has")
            if one_per_pod and u["wanted"] > 1:
                too_many.append(
                    f"{d['node']} fails a container asking for more than one replica "
                    "(failRequestsGreaterThanOne), even once it fits"
                )
    summary = "; ".join(parts + too_many)
    nxt = (
        "ask for 1 replica per container (more replicas do not add compute on a time-sliced GPU), "
        "free replicas, or raise gpusplit_sharing.time_slicing.replicas (docs/sharing.md)"
    )
    return summary, nxt


def _claims_blocked(why):
    """The pod's claims that ``why`` (TAINTED or UNAVAILABLE) blocks on the node; step: the claim's place."""

    def blocks(case, node):
        return [(i, detail) for i, (kind, detail) in enumerate(case.claim_blockers(node)) if kind == why]

    return blocks


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
    return summary, "; ".join(nxt), {"suggested_tolerations": tolerations}


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
    missing = {r: o for d in details for r, o in (d.get("mig_offered") or {}).items()}
    for r, offered in sorted(missing.items()):
        summary += (
            f"; no node offers MIG profile {r} (the nodes offer: {', '.join(offered) or 'no MIG device'})"
        )
    sliced = _time_slicing_words(details)
    if sliced:
        summary += f"; time-sliced: {sliced[0]}"
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
    if sliced:
        nxt += f"; {sliced[1]}"
    if missing:
        nxt += (
            "; ask for a profile a node offers, or give a node's Kubernetes share that geometry "
            "(gpusplit_mig_geometry with gpusplit_mig_strategy mixed, docs/split.md)"
        )
    return summary, nxt, {}


def _summarise_device_taint(details):
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
    return summary, nxt, ({"suggested_device_tolerations": tolerations} if tolerations else {})


def _summarise_no_device(details):
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
    return summary, nxt, {}


def _insufficient_gpu(text):
    return text.startswith("insufficient nvidia.com/gpu") or text.startswith("insufficient nvidia.com/mig-")


# --------------------------------------------------------------------------------------------
# the table: priority order (ties between classes go to the earlier entry)

RULES = checked(
    (
        Rule(
            TAINT,
            stage="filter",
            filter="TaintToleration",
            blocks=_untolerated,
            summarise=_summarise_taint,
            reason=lambda text: "untolerated taint" in text or "were unschedulable" in text,
        ),
        Rule(
            SHORTAGE,
            stage="filter",
            filter="NodeResourcesFit",
            blocks=_short_of_gpus,
            summarise=_summarise_shortage,
            reason=_insufficient_gpu,
        ),
        Rule(
            DRA_TAINT,
            stage="filter",
            filter="DynamicResources",
            blocks=_claims_blocked(TAINTED),
            summarise=_summarise_device_taint,
        ),
        Rule(
            DRA_NO_DEVICE,
            stage="filter",
            filter="DynamicResources",
            blocks=_claims_blocked(UNAVAILABLE),
            summarise=_summarise_no_device,
            reason=lambda text: "claim" in text,
        ),
        Rule(
            GANG,
            stage="queue",
            check=_gang_waits,
            message=parse_gang_message,
            override=_gang_cannot_be_placed,
        ),
        Rule(
            SELECTOR,
            stage="selection",
            check=_no_node_selected,
            # only when it is the whole story; otherwise the nodes that did match matter
            reason=lambda text: "node affinity/selector" in text,
            sole_reason=True,
        ),
        Rule(GATED, stage="gate", check=_gated),
        Rule(UNKNOWN),  # what no rule explains: the scheduler's words are quoted
    )
)
