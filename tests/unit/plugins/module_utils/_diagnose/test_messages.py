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
