# Copyright: gpusplit contributors
# Apache-2.0
"""Classify one unscheduled GPU pod by walking the rule table (``rules.RULES``).

Private to the collection.

The table is read where it is used (``rules.RULES``), so that a test can put a rule into it.
"""

from __future__ import annotations

from collections import namedtuple

from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose import rules
from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.dra_index import claim_on_node
from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.messages import parse_message
from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.snapshot import gang_state
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.scheduling import (
    matches_node,
    meta_of,
    pod_gpu_requests,
    pod_key,
    spec_of,
)

# what the filter stage concluded: the class, its words, and the nodes the pod fits by the objects
Outcome = namedtuple("Outcome", ("cls", "summary", "next", "open_nodes"))

_UNSET = object()


class PodCase:
    """One unscheduled GPU pod as the rules see it (computed once, on first use)."""

    def __init__(self, cl, pod):
        self.cl, self.pod = cl, pod
        self.message, self.events = cl.pod_messages(pod)
        self.quoted = self.message or (self.events[-1] if self.events else None)
        self.requests = pod_gpu_requests(pod, cl.prefixes)
        self.claims = cl.dra.pod_claims(pod) if spec_of(pod).get("resourceClaims") else []
        self.extra = {"wants": {"resources": self.requests, "claims": [c[0] for c in self.claims]}}
        self._gang = _UNSET
        self._candidates = None
        self._claim_blockers = {}

    @property
    def gang(self):
        """None, or the state of the pod's PodGroup (``snapshot.gang_state``)."""
        if self._gang is _UNSET:
            self._gang = gang_state(self.cl, self.pod)
        return self._gang

    @property
    def candidates(self):
        """The nodes that pass the pod's node selection (recorded in the entry as ``candidates``)."""
        if self._candidates is None:
            self._candidates = [n for n in self.cl.nodes if matches_node(self.pod, n)]
            self.extra["candidates"] = [meta_of(n).get("name") for n in self._candidates]
        return self._candidates

    def claim_blockers(self, node):
        """[(TAINTED, UNAVAILABLE or None, detail)] for each of the pod's claims on ``node``."""
        name = meta_of(node).get("name")
        if name not in self._claim_blockers:
            out = []
            for claim_name, claim_spec, claim_obj, where in self.claims:
                why, detail = claim_on_node(self.cl.dra, claim_name, claim_spec, claim_obj, node)
                out.append((why, dict(detail, node=name, where=where)))
            self._claim_blockers[name] = out
        return self._claim_blockers[name]

    def result(self, cls, summary, next_step):
        """The diagnosis entry of the pod."""
        entry = {
            "namespace": meta_of(self.pod).get("namespace") or "default",
            "name": meta_of(self.pod).get("name"),
            "pod": pod_key(self.pod),
            "class": cls,
            "summary": summary,
            "next": next_step,
            "message": self.quoted,
            "events": self.events[-3:],
        }
        entry.update(self.extra)
        return entry


def _rank(table):
    names = [r.name for r in table]
    return names.index


def classify_message(message):
    """The class a scheduler message points at on its own (no objects), for the fallback."""
    table = rules.RULES
    for rule in table:
        if rule.message and rule.message(message):
            return rule.name
    parsed = parse_message(message)
    if not parsed:
        return rules.UNKNOWN
    counts = {}
    for text, count in parsed["reasons"].items():
        low = text.lower()
        cls = next((r.name for r in table if r.reason and r.reason(low)), rules.UNKNOWN)
        counts[cls] = counts.get(cls, 0) + count
    rank = _rank(table)
    sole = {r.name for r in table if r.sole_reason}
    real = {k: v for k, v in counts.items() if k not in sole}
    if not real:
        real = counts
    if not real:
        return rules.UNKNOWN
    return sorted(real, key=lambda k: (-real[k], rank(k)))[0]


def _node_blockers(case, node, table):
    """[(class, detail)] for one candidate node, in the scheduler's filter order."""
    found = []
    for rule in table:
        if rule.blocks:
            position = rules.FILTERS.index(rule.filter)
            found.extend((position, step, rule.name, detail) for step, detail in rule.blocks(case, node))
    found.sort(key=lambda f: (f[0], f[1]))
    return [(name, detail) for _unused, _unused2, name, detail in found]


def _fallback(case, open_nodes):
    """By the objects the pod fits somewhere: the scheduler's own words decide."""
    quoted = case.quoted
    cls = classify_message(quoted) if quoted else rules.UNKNOWN
    if quoted is None:
        summary = f"no scheduling attempt recorded yet; by the objects it fits on {', '.join(open_nodes[:3])}"
    elif cls == rules.UNKNOWN:
        summary = f"the scheduler says: {quoted!r}"
    else:
        summary = (
            f"the scheduler says: {quoted!r}; by the objects it would fit on {', '.join(open_nodes[:3])}"
        )
    meta = meta_of(case.pod)
    nxt = (
        f"kubectl describe pod -n {meta.get('namespace') or 'default'} {meta.get('name')} (Events); "
        "re-run the diagnosis (the message may be from an older attempt)"
    )
    return Outcome(cls, summary, nxt, open_nodes)


def _filter_stage(case, table):
    """Every candidate node's blockers; the class that blocks most nodes first is the outcome."""
    per_node = {meta_of(n).get("name"): _node_blockers(case, n, table) for n in case.candidates}
    case.extra["nodes"] = {
        name: [{"class": c, **{k: v for k, v in d.items() if k != "raw"}} for c, d in blockers]
        for name, blockers in per_node.items()
    }
    open_nodes = [name for name, blockers in per_node.items() if not blockers]
    if open_nodes:
        return _fallback(case, open_nodes)

    rank = _rank(table)
    first = {name: blockers[0][0] for name, blockers in per_node.items()}
    counts = {}
    for cls in first.values():
        counts[cls] = counts.get(cls, 0) + 1
    primary = sorted(counts, key=lambda c: (-counts[c], rank(c)))[0]
    details = [
        d for name, blockers in per_node.items() for c, d in blockers if c == primary and first[name] == c
    ]
    rule = table[rank(primary)]
    summary, nxt, extra = rule.summarise(details)
    case.extra.update(extra)
    others = sorted((c for c in counts if c != primary), key=rank)
    if others:
        summary += "; other candidate node(s): " + ", ".join(f"{counts[c]} {c}" for c in others)
    case.extra["blocked_by"] = counts
    return Outcome(primary, summary, nxt, [])


def classify_pod(cl, pod):
    """One diagnosis entry for one unscheduled GPU pod.

    The stages before any node is looked at, in order (each rule of the stage in table order),
    then the filter stage over the candidate nodes, which a rule's ``override`` may claim.
    """
    table = rules.RULES
    case = PodCase(cl, pod)
    for stage in rules.STAGES:
        for rule in table:
            if rule.stage == stage and rule.check:
                found = rule.check(case)
                if found:
                    return case.result(rule.name, *found)
    outcome = _filter_stage(case, table)
    for rule in table:
        if rule.override:
            found = rule.override(case, outcome)
            if found:
                return case.result(rule.name, *found)
    return case.result(outcome.cls, outcome.summary, outcome.next)
