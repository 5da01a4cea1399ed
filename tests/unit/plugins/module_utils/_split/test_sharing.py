"""Sharing the Kubernetes share: gpusplit_sharing read and refused before any change, and what the plan carries."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._split import sharing
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import (
    PlanError,
    plan_fleet,
    plan_node,
)

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"


def gpu(i, name=H100, mig=False, migs=()):
    return {
        "uuid": f"GPU-0000000{i}-0000-4000-8000-00000000000{i}",
        "index": i,
        "minor_number": i,
        "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0",
        "name": name,
        "memory_total_mib": 81559,
        "mig_mode": {"current": "enabled" if mig else "disabled", "pending": None},
        "mig_devices": list(migs),
        "health": {"status": "ok", "reasons": []},
        "processes": [],
    }


def mig(parent, gi, profile):
    return {
        "uuid": f"MIG-0000000{parent}-0000-4000-8000-0000000000{gi:02d}",
        "index": gi,
        "profile": profile,
        "gpu_instance_id": gi,
        "compute_instance_id": 0,
        "memory_total_mib": 9856,
    }


FOUR = [gpu(i) for i in range(4)]
TS4 = {"time_slicing": {"replicas": 4}}


def refusal(sharing_value, mode="device_plugin", **kwargs):
    with pytest.raises(PlanError) as exc:
        plan_node("gpu-a", FOUR, mode, {"host_count": 2}, sharing=sharing_value, **kwargs)
    return exc.value.errors


def test_time_slicing_multiplies_the_kubernetes_share_only():
    plan = plan_node("gpu-a", FOUR, "device_plugin", {"host_count": 2}, sharing=TS4)
    assert plan["kubernetes_uuids"] == [FOUR[2]["uuid"], FOUR[3]["uuid"]]
    assert plan["resources"] == {"nvidia.com/gpu": 8}
    assert plan["resource_name"] == "nvidia.com/gpu"
    assert plan["kubernetes_count"] == 2  # GPUs, not replicas
    assert plan["sharing"] == {
        "strategy": "time-slicing",
        "replicas": 4,
        "rename": False,
        "fail_requests_greater_than_one": False,
        "resources": [{"name": "nvidia.com/gpu", "devices": 2, "advertised_as": "nvidia.com/gpu"}],
    }


def test_rename_advertises_the_shared_name_and_nothing_unshared():
    value = {"time_slicing": {"replicas": 3, "rename": True, "fail_requests_greater_than_one": True}}
    plan = plan_node("gpu-a", FOUR, "gpu_operator", {"host_count": 2}, sharing=value)
    assert plan["resources"] == {"nvidia.com/gpu": 0, "nvidia.com/gpu.shared": 6}
    assert plan["resource_name"] == "nvidia.com/gpu.shared"
    assert (
        sharing.sharing_text(plan["sharing"])
        == "time-slicing x3 (nvidia.com/gpu.shared, failRequestsGreaterThanOne)"
    )


def test_mixed_mig_shares_each_profile():
    facts = [gpu(0), gpu(1, A100, mig=True, migs=[mig(1, 1, "3g.40gb"), mig(1, 2, "1g.10gb")])]
    plan = plan_node(
        "gpu-a",
        facts,
        "device_plugin",
        {"host_count": 1},
        mig_strategy="mixed",
        sharing={"time_slicing": {"replicas": 2, "rename": True}},
    )
    assert plan["resources"] == {
        "nvidia.com/gpu": 0,
        "nvidia.com/mig-1g.10gb": 0,
        "nvidia.com/mig-1g.10gb.shared": 2,
        "nvidia.com/mig-3g.40gb": 0,
        "nvidia.com/mig-3g.40gb.shared": 2,
    }
    assert plan["resource_name"] == ["nvidia.com/mig-1g.10gb.shared", "nvidia.com/mig-3g.40gb.shared"]


def test_no_sharing_and_an_empty_mapping_change_nothing():
    for value in (None, {}):
        plan = plan_node("gpu-a", FOUR, "device_plugin", {"host_count": 2}, sharing=value)
        assert plan["sharing"] is None
        assert plan["resources"] == {"nvidia.com/gpu": 2}


def test_an_empty_kubernetes_share_shares_nothing():
    plan = plan_node("gpu-a", FOUR, "device_plugin", {"count": 0}, sharing=TS4)
    assert plan["sharing"] is None
    assert plan["resources"] == {"nvidia.com/gpu": 0}


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ({"time_slicing": {"replicas": 1}}, "replicas: expected a whole number of at least 2, got 1"),
        ({"time_slicing": {"replicas": 2.5}}, "replicas: expected a whole number of at least 2, got 2.5"),
        ({"time_slicing": {"replicas": "4"}}, "replicas: expected a whole number of at least 2, got '4'"),
        (
            {"time_slicing": {"replicas": True}},
            "replicas: expected a whole number of at least 2, got a boolean",
        ),
        ({"time_slicing": {}}, "replicas is required"),
        ({"time_slicing": {"replicas": 4, "slices": 2}}, "unknown key(s) slices (known: replicas, rename"),
        ({"time_slicing": {"replicas": 4, "rename": "gpu-small"}}, "ignores a resource name of one's own"),
        ({"time_slicing": {"replicas": 4, "rename": "yes"}}, "ignores a resource name"),
        (
            {"time_slicing": {"replicas": 4, "fail_requests_greater_than_one": "yes"}},
            "fail_requests_greater_than_one: expected true or false, got string",
        ),
        ({"time_slicing": [4]}, "time_slicing: expected a mapping with replicas, got list"),
        ({"timeslicing": {"replicas": 4}}, "unknown key(s) timeslicing (known: time_slicing, mps)"),
        ({"time_slicing": {"replicas": 4}, "mps": {"replicas": 2}}, "set exactly one of time_slicing, mps"),
        ([4], "expected a mapping with time_slicing or mps, got list"),
        ({"mps": {"replicas": 4}}, "MPS control daemon runs privileged"),
    ],
)
def test_bad_sharing_is_refused_naming_the_field(value, words):
    errors = refusal(value)
    assert any(e.startswith("gpu-a: gpusplit_sharing") and words in e for e in errors), errors


@pytest.mark.parametrize(
    ("mode", "words"), [("dra", "claim's opaque config"), ("none", "runs no split device plugin")]
)
def test_sharing_in_a_mode_without_the_split_plugin_is_refused(mode, words):
    errors = refusal(TS4, mode=mode)
    assert any(words in e for e in errors), errors


def test_fleet_collects_sharing_refusals_of_every_host():
    hosts = {
        "a": {
            "facts": FOUR,
            "mode": "device_plugin",
            "split": {"host_count": 2},
            "sharing": {"time_slicing": {"replicas": 0}},
        },
        "b": {"facts": FOUR, "mode": "device_plugin", "split": {"host_count": 2}, "sharing": {"mps": {}}},
        "c": {"facts": FOUR, "mode": "device_plugin", "split": {"host_count": 2}, "sharing": TS4},
    }
    with pytest.raises(PlanError) as exc:
        plan_fleet(hosts)
    assert [e.split(":", 1)[0] for e in exc.value.errors] == ["a", "b"]
    del hosts["a"], hosts["b"]
    assert plan_fleet(hosts)["nodes"]["c"]["resources"] == {"nvidia.com/gpu": 8}


def test_advertised_difference_names_what_the_node_shows():
    plan = plan_node(
        "gpu-a",
        FOUR,
        "device_plugin",
        {"host_count": 2},
        sharing={"time_slicing": {"replicas": 4, "rename": True}},
    )
    assert sharing.advertised_difference(plan, {"nvidia.com/gpu": 0, "nvidia.com/gpu.shared": 8}) is None
    assert (
        "one per device: the split plugin runs without its sharing config"
        in sharing.advertised_difference(plan, {"nvidia.com/gpu": 2})
    )
    assert (
        "2 replicas per device: the split plugin runs an older sharing config"
        in sharing.advertised_difference(plan, {"nvidia.com/gpu.shared": 4})
    )
    assert (
        sharing.advertised_difference(plan_node("gpu-a", FOUR, "device_plugin", {"host_count": 2}), {})
        is None
    )
