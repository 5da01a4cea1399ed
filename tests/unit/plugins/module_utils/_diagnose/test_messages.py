"""The scheduler's messages, captured from the lab, taken apart and classified on their own."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.classify import classify_message
from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.messages import parse_message
from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.rules import (
    DRA_NO_DEVICE,
    SELECTOR,
    TAINT,
    UNKNOWN,
)
from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._diagnose.diagnose_scene import fixture


@pytest.mark.parametrize(
    "name",
    [
        "untolerated-taint",
        "insufficient-gpu",
        "selector-mismatch",
        "dra-device-taint",
        "dra-no-device",
        "insufficient-cpu",
    ],
)
def test_captured_messages_parse(name):
    text = fixture(name)
    parsed = parse_message(text)
    assert parsed, text
    assert sum(parsed["reasons"].values()) == parsed["total"]
    assert parsed["preemption"].startswith(f"0/{parsed['total']} nodes are available")


def test_messages_count_nodes_but_name_no_taint_and_no_device():
    # why the classifier reads the objects: the words do not carry the facts
    taint = parse_message(fixture("untolerated-taint"))
    assert "node(s) had untolerated taint(s)" in taint["reasons"]
    assert "nvidia.com/gpu" not in fixture("untolerated-taint")
    # a device taint and a missing device read exactly the same
    assert parse_message(fixture("dra-device-taint"))["reasons"].keys() == {
        "cannot allocate all claims",
        "node(s) didn't match Pod's node affinity/selector",
    }
    assert (
        parse_message(fixture("dra-no-device"))["reasons"]
        == parse_message(fixture("dra-device-taint"))["reasons"]
    )
    # and a shortage message counts a tainted non-candidate node as a taint
    assert set(parse_message(fixture("insufficient-gpu"))["reasons"]) >= {
        "Insufficient nvidia.com/gpu",
        "node(s) had untolerated taint(s)",
    }


def test_message_only_classes():
    assert classify_message(fixture("untolerated-taint")) == TAINT
    assert classify_message(fixture("dra-no-device")) == DRA_NO_DEVICE
    assert classify_message(fixture("insufficient-cpu")) == UNKNOWN
    assert (
        classify_message("0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector.")
        == SELECTOR
    )
    assert classify_message("something else entirely") == UNKNOWN
    assert parse_message("not a scheduler message") is None


# kube-scheduler 1.35 and 1.36 (FitError.Error): every PostFilter plugin's words follow the reasons' full stop,
# joined by ", "; DynamicResources says "no new claims to deallocate" whether the pod has claims or not
POST_FILTER_136 = (  # read off the lab's kube-scheduler 1.36.3
    "0/7 nodes are available: 1 node(s) had untolerated taint(s), 6 node(s) didn't match Pod's node "
    "affinity/selector. no new claims to deallocate, preemption: 0/7 nodes are available: 7 Preemption is not "
    "helpful for scheduling."
)


def test_other_post_filter_words_before_preemption_stay_out_of_the_reasons():
    parsed = parse_message(POST_FILTER_136)
    assert parsed["reasons"] == {
        "node(s) had untolerated taint(s)": 1,
        "node(s) didn't match Pod's node affinity/selector": 6,
    }
    assert parsed["post_filter"] == ["no new claims to deallocate"]
    assert parsed["preemption"] == "0/7 nodes are available: 7 Preemption is not helpful for scheduling."
    assert classify_message(POST_FILTER_136) == TAINT  # the selector counts only when nothing else is named


def test_a_cpu_shortage_is_not_a_claim_because_a_post_filter_speaks_of_claims():
    text = (
        "0/3 nodes are available: 3 Insufficient cpu. no new claims to deallocate, preemption: 0/3 nodes are "
        "available: 3 No preemption victims found for incoming pod."
    )
    assert parse_message(text)["reasons"] == {"Insufficient cpu": 3}
    assert classify_message(text) == UNKNOWN


def test_a_message_without_preemption_or_full_stop():
    assert parse_message("0/3 nodes are available: 3 Insufficient nvidia.com/gpu") == {
        "total": 3,
        "reasons": {"Insufficient nvidia.com/gpu": 3},
        "preemption": None,
        "post_filter": [],
    }
    parsed = parse_message(
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: not eligible."
    )
    assert parsed["reasons"] == {"Insufficient nvidia.com/gpu": 2}
    assert (parsed["preemption"], parsed["post_filter"]) == ("not eligible.", [])
