"""The rule table: adding one entry adds a Pending class, found and told in its priority position."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose import rules
from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.classify import classify_message
from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.report import diagnose, report_table
from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.rules import (
    DRA_NO_DEVICE,
    DRA_TAINT,
    GANG,
    GATED,
    RULES,
    SELECTOR,
    SHORTAGE,
    TAINT,
    UNKNOWN,
    Rule,
    checked,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError
from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._diagnose.diagnose_scene import (
    GPU_TAINT,
    node,
    only,
    pod,
)

CORDONED = "node_cordoned"


def _cordoned(case, node):
    if not (node.get("spec") or {}).get("unschedulable"):
        return []
    return [(0, {"node": node["metadata"]["name"]})]


def _summarise_cordoned(details):
    names = [d["node"] for d in details]
    return f"cordoned: {', '.join(names)}", f"kubectl uncordon {' '.join(names)}", {"cordoned": names}


# a throwaway rule: the NodeUnschedulable filter (it runs before TaintToleration)
THROWAWAY = Rule(
    CORDONED,
    stage="filter",
    filter="NodeUnschedulable",
    blocks=_cordoned,
    summarise=_summarise_cordoned,
    reason=lambda text: "were unschedulable" in text,
)


def with_rule(rule, before):
    """The table with ``rule`` put in just before the entry named ``before``."""
    table = list(RULES)
    table.insert([r.name for r in table].index(before), rule)
    return checked(table)


def fleet():
    """n1 cordoned, n2 behind the GPU taint; both in pool x."""
    return [
        node("n1", 2, {"pool": "x"}, unschedulable=True),
        node("n2", 2, {"pool": "x"}, [GPU_TAINT]),
    ]


def pods():
    return [
        pod("both", selector={"pool": "x"}, tolerations=[]),  # one node of each: a tie
        pod("on-n1", selector={"kubernetes.io/hostname": "n1"}, tolerations=[]),
        pod("on-n2", selector={"kubernetes.io/hostname": "n2"}, tolerations=[]),
    ]


TIE = "0/2 nodes are available: 1 node(s) were unschedulable, 1 node(s) had untolerated taint(s)."


def test_the_table_is_the_priority_order():
    assert [r.name for r in RULES] == [
        TAINT,
        SHORTAGE,
        DRA_TAINT,
        DRA_NO_DEVICE,
        GANG,
        SELECTOR,
        GATED,
        UNKNOWN,
    ]


def test_without_the_rule_a_cordon_is_a_taint():
    report = diagnose(pods(), fleet())
    assert report["counts"] == {TAINT: 3}
    assert "uncordon n1" in only(report, "both")["next"]
    assert classify_message(TIE) == TAINT


def test_a_throwaway_rule_first_in_the_table_wins_the_tie(monkeypatch):
    monkeypatch.setattr(rules, "RULES", with_rule(THROWAWAY, before=TAINT))
    report = diagnose(pods(), fleet())
    e = only(report, "both")
    assert e["class"] == CORDONED
    assert e["summary"] == "cordoned: n1; other candidate node(s): 1 untolerated_taint"
    assert e["next"] == "kubectl uncordon n1"
    assert e["cordoned"] == ["n1"]
    assert e["blocked_by"] == {CORDONED: 1, TAINT: 1}
    # the node's findings in the scheduler's filter order: NodeUnschedulable, then TaintToleration
    assert [b["class"] for b in e["nodes"]["n1"]] == [CORDONED, TAINT]
    assert only(report, "on-n1")["class"] == CORDONED
    assert only(report, "on-n2")["class"] == TAINT
    # counts, and the table's count line, in table order
    assert list(report["counts"].items()) == [(CORDONED, 2), (TAINT, 1)]
    table = report_table(report)
    assert table.splitlines()[1].split()[:3] == ["diag/both", CORDONED, "cordoned:"]
    assert table.splitlines()[1].endswith("-> kubectl uncordon n1")
    assert table.splitlines()[-1] == "3 Pending GPU pod(s): 2 node_cordoned, 1 untolerated_taint"
    # the scheduler's words alone: the rule's reason matcher, ties to the earlier entry
    assert classify_message(TIE) == CORDONED


def test_a_throwaway_rule_after_the_taint_rule_loses_the_tie(monkeypatch):
    monkeypatch.setattr(rules, "RULES", with_rule(THROWAWAY, before=SHORTAGE))
    report = diagnose(pods(), fleet())
    e = only(report, "both")
    assert e["class"] == TAINT
    assert e["summary"].endswith("; other candidate node(s): 1 node_cordoned")
    assert only(report, "on-n1")["class"] == CORDONED  # its only node is cordoned first
    assert list(report["counts"].items()) == [(TAINT, 2), (CORDONED, 1)]
    assert classify_message(TIE) == TAINT


def test_a_stage_before_the_nodes_beats_table_order(monkeypatch):
    """A rule of the "gate" stage is found before any node is looked at, even last in the table."""

    def paused(case):
        if (case.pod["metadata"].get("annotations") or {}).get("example.com/paused") != "true":
            return None
        return "paused by example.com/paused", "remove the annotation"

    monkeypatch.setattr(rules, "RULES", checked((*RULES, Rule("paused", stage="gate", check=paused))))
    p = pod("p", selector={"pool": "nowhere"})
    p["metadata"]["annotations"] = {"example.com/paused": "true"}
    report = diagnose([p, pod("q", selector={"pool": "nowhere"})], fleet())
    assert only(report, "p")["class"] == "paused"
    assert only(report, "p")["next"] == "remove the annotation"
    assert only(report, "q")["class"] == SELECTOR
    assert list(report["counts"]) == [SELECTOR, "paused"]


def test_entries_that_cannot_work_are_refused():
    broken = (
        Rule(TAINT),
        Rule(TAINT),
        Rule("no-summary", stage="filter", filter="NodeResourcesFit", blocks=_cordoned),
        Rule("bad-filter", stage="filter", filter="NoSuchFilter", blocks=_cordoned, summarise=len),
        Rule("late-check", stage="filter", check=lambda case: None),
        Rule("bad-stage", stage="later"),
    )
    with pytest.raises(GpusplitError) as exc:
        checked(broken)
    text = "\n".join(exc.value.errors)
    for name in ("'untolerated_taint'", "'no-summary'", "'bad-filter'", "'late-check'", "'bad-stage'"):
        assert name in text
    assert "'unknown' (what no rule explains) is missing" in text
