"""The controller's report on a DeviceTaintRule (plugins/module_utils/_dra/report.py)."""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._dra.report import (
    parse_eviction_message,
    rule_report,
    rule_settled,
)
from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._dra.dra_testdata import NONE_MESSAGE


def test_parse_the_controllers_none_message():
    impact = parse_eviction_message(NONE_MESSAGE)
    assert impact == {
        "published_devices": 3,
        "allocated_devices": 1,
        "pods_would_be_evicted": 1,
        "pods_pending_eviction": None,
        "namespaces": 1,
        "pods_evicted": None,
        "final": True,
    }
    plural = parse_eviction_message(
        "1 published device selected. 0 allocated devices selected. 0 pods would be evicted in 0 different namespaces "
        "if the effect was NoExecute. This information will not be updated again."
    )
    assert (
        plural["published_devices"],
        plural["allocated_devices"],
        plural["pods_would_be_evicted"],
        plural["namespaces"],
    ) == (1, 0, 0, 0)


def test_parse_the_controllers_noexecute_messages():
    pending = parse_eviction_message(
        "2 pods need to be evicted in 2 different namespaces. 1 pod evicted since starting the controller."
    )
    assert (pending["pods_pending_eviction"], pending["namespaces"], pending["pods_evicted"]) == (2, 2, 1)
    one = parse_eviction_message("1 pod needs to be evicted in 1 namespace.")
    assert (one["pods_pending_eviction"], one["namespaces"]) == (1, 1)
    other = parse_eviction_message("Eviction only happens for the NoExecute effect.")
    assert all(v in (None, False) for v in other.values())
    assert parse_eviction_message(None)["published_devices"] is None


def rule_with(effect, generation, cond_generation=None, status="False", message=NONE_MESSAGE):
    cond = {
        "type": "EvictionInProgress",
        "status": status,
        "reason": "NoEffect",
        "message": message,
        "observedGeneration": cond_generation,
        "lastTransitionTime": "2026-11-29T07:34:17Z",
    }
    return {
        "metadata": {"name": "r", "generation": generation},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": "n", "device": "gpu-1"},
            "taint": {"key": "k", "effect": effect},
        },
        "status": {"conditions": [cond] if cond_generation is not None else []},
    }


def test_rule_report_and_settled():
    report = rule_report(rule_with("None", 1, 1))
    assert report["current"] and report["impact"]["published_devices"] == 3 and report["since"]
    assert rule_settled(rule_with("None", 1, 1))
    assert not rule_settled(rule_with("None", 2, 1))  # the condition is about the previous effect
    assert not rule_settled(rule_with("None", 1))
    assert rule_settled(rule_with("NoExecute", 2, 2, "True"))
    assert not rule_settled(rule_with("NoExecute", 2, 2, "True"), wait_eviction=True)
    assert rule_settled(rule_with("NoExecute", 2, 2, "False"), wait_eviction=True)
    assert rule_report(None)["current"] is False
