"""The pure split planner: happy paths, every refusal, determinism."""

from __future__ import annotations

import copy
import json
import random

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import ids
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import (
    PlanError,
    plan_fleet,
    plan_node,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.selectors import SPLIT_KEYS

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-40GB"
# PCI buses of an 8-GPU HGX board, in bus order; NVML indices follow them, minors do not
BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
MINORS = (2, 0, 3, 1, 6, 4, 7, 5)


def uuid(host_no, i):
    return f"GPU-{host_no:08x}-{i:04x}-4{i:03x}-8{host_no % 4096:03x}-{host_no * 16 + i:012x}"


def gpu(i, host_no=1, name=H100, health="ok", reasons=(), mig=None, migs=(), procs=(), pending=None):
    current = "enabled" if mig else ("disabled" if mig is False or mig is None else None)
    return {
        "uuid": uuid(host_no, i),
        "index": i,
        "minor_number": MINORS[i],
        "pci_bus_id": f"00000000:{BUSES[i]:02X}:00.0",
        "name": name,
        "memory_total_mib": 81559,
        "mig_mode": {"current": current, "pending": pending or current},
        "mig_devices": list(migs),
        "health": {"status": health, "reasons": list(reasons)},
        "processes": list(procs),
    }


def mig_dev(parent_i, gi, profile="1g.10gb", host_no=1):
    return {
        "uuid": f"MIG-{host_no:08x}-{parent_i:04x}-4{gi:03x}-8000-{gi:012x}",
        "index": gi,
        "profile": profile,
        "gpu_instance_id": gi,
        "compute_instance_id": 0,
        "memory_total_mib": 9856,
    }


def facts8(overrides=None):
    """8 healthy H100s; overrides: {i: {gpu() kwargs}}."""
    overrides = overrides or {}
    return [gpu(i, **overrides.get(i, {})) for i in range(8)]


def refused(*args, **kwargs):
    with pytest.raises(PlanError) as exc:
        plan_node(*args, **kwargs)
    return exc.value


# --------------------------------------------------------------------------------------------
# happy paths


def test_count_takes_first_healthy_by_pci_bus_id():
    facts = facts8({0: {"health": "degraded", "reasons": ["Xid 79"]}})
    random.Random(3).shuffle(facts)
    plan = plan_node("gpu-a", facts, "device_plugin", {"count": 2})
    assert plan["kubernetes_uuids"] == [uuid(1, 1), uuid(1, 2)]
    assert plan["host_uuids"] == [uuid(1, i) for i in range(3, 8)]
    assert plan["excluded"] == [
        {"uuid": uuid(1, 0), "pci_bus_id": "00000000:18:00.0", "reason": "health degraded: Xid 79"}
    ]
    assert (plan["kubernetes_count"], plan["host_count"], plan["excluded_count"]) == (2, 5, 1)
    assert plan["resource_name"] == "nvidia.com/gpu"
    assert plan["resources"] == {"nvidia.com/gpu": 2}
    assert [g["pci_bus_id"] for g in plan["gpus"]] == [f"00000000:{b:02X}:00.0" for b in BUSES]
    assert [g["share"] for g in plan["gpus"]] == ["excluded", "kubernetes", "kubernetes"] + ["host"] * 5
    assert plan["split"] is True
    assert plan["selector"] == {"kubernetes": "count", "host": None}
    assert plan["warnings"] == []


def test_plan_schema_keys():
    plan = plan_node("gpu-a", facts8(), "device_plugin", {"count": 1})
    assert set(plan) == {
        "host",
        "node",
        "mode",
        "mig_strategy",
        "split",
        "selector",
        "kubernetes_uuids",
        "host_uuids",
        "excluded",
        "kubernetes_count",
        "host_count",
        "excluded_count",
        "gpu_count",
        "kubernetes_mig_uuids",
        "resource_name",
        "resources",
        "dra_devices",
        "dra_excluded_devices",
        "sharing",
        "mig_geometry",
        "mig_changes",
        "warnings",
        "gpus",
    }
    assert set(plan["gpus"][0]) == {
        "uuid",
        "pci_bus_id",
        "index",
        "minor_number",
        "name",
        "memory_total_mib",
        "share",
        "health",
        "mig_enabled",
        "mig_uuids",
    }
    json.dumps(plan)  # plain data only


def test_uuids_are_matched_case_insensitively_and_kept_in_bus_order():
    plan = plan_node("gpu-a", facts8(), "device_plugin", {"uuids": [uuid(1, 5).upper(), " " + uuid(1, 2)]})
    assert plan["kubernetes_uuids"] == [uuid(1, 2), uuid(1, 5)]
    assert plan["host_count"] == 6


def test_uuids_accept_a_comma_separated_string():
    plan = plan_node("gpu-a", facts8(), "device_plugin", {"uuids": f"{uuid(1, 0)},{uuid(1, 1)}"})
    assert plan["kubernetes_uuids"] == [uuid(1, 0), uuid(1, 1)]


@pytest.mark.parametrize("spelling", ["00000000:2A:00.0", "0000:2a:00.0", "2a:00.0", " 0000:2A:00.0 "])
def test_pci_bus_ids_are_normalised(spelling):
    plan = plan_node("gpu-a", facts8(), "device_plugin", {"pci_bus_ids": [spelling]})
    assert plan["kubernetes_uuids"] == [uuid(1, 1)]


def test_facts_bus_ids_in_sysfs_spelling_are_normalised():
    facts = facts8()
    for g in facts:
        g["pci_bus_id"] = g["pci_bus_id"][4:].lower()  # 0000:18:00.0
    plan = plan_node("gpu-a", facts, "device_plugin", {"pci_bus_ids": ["00000000:18:00.0"]})
    assert plan["gpus"][0]["pci_bus_id"] == "00000000:18:00.0"
    assert plan["kubernetes_uuids"] == [uuid(1, 0)]


def test_indices_work_with_a_warning():
    plan = plan_node("gpu-a", facts8(), "device_plugin", {"indices": [3, "1"]})
    assert plan["kubernetes_uuids"] == [uuid(1, 1), uuid(1, 3)]
    assert any("not stable across reboots" in w and uuid(1, 3) in w for w in plan["warnings"])


def test_product_exact_and_glob():
    facts = [gpu(i, name=H100 if i < 4 else A100) for i in range(8)]
    exact = plan_node("gpu-a", facts, "device_plugin", {"product": A100})
    assert exact["kubernetes_uuids"] == [uuid(1, i) for i in range(4, 8)]
    glob = plan_node("gpu-a", facts, "device_plugin", {"product": "*h100*"})
    assert glob["kubernetes_uuids"] == [uuid(1, i) for i in range(4)]


def test_product_skips_unhealthy_gpus():
    facts = facts8({1: {"health": "lost", "reasons": ["fell off the bus"]}})
    plan = plan_node("gpu-a", facts, "device_plugin", {"product": H100})
    assert uuid(1, 1) not in plan["kubernetes_uuids"]
    assert plan["excluded"][0]["uuid"] == uuid(1, 1)


def test_host_uuids_give_kubernetes_the_rest():
    facts = facts8({7: {"health": "lost"}})
    plan = plan_node("gpu-a", facts, "device_plugin", {"host_uuids": [uuid(1, 0), uuid(1, 1)]})
    assert plan["host_uuids"] == [uuid(1, 0), uuid(1, 1)]
    assert plan["kubernetes_uuids"] == [uuid(1, i) for i in range(2, 7)]
    assert plan["excluded"][0]["uuid"] == uuid(1, 7)
    assert plan["excluded"][0]["reason"] == "health lost"


def test_host_pci_bus_ids_and_host_indices():
    a = plan_node("gpu-a", facts8(), "device_plugin", {"host_pci_bus_ids": ["0000:db:00.0"]})
    assert a["host_uuids"] == [uuid(1, 7)]
    b = plan_node("gpu-a", facts8(), "device_plugin", {"host_indices": [7]})
    assert b["host_uuids"] == [uuid(1, 7)]
    assert any("prefer split.host_uuids" in w for w in b["warnings"])


def test_host_count_takes_first_usable_gpus_for_the_host():
    plan = plan_node("gpu-a", facts8(), "device_plugin", {"host_count": 3})
    assert plan["host_uuids"] == [uuid(1, i) for i in range(3)]
    assert plan["kubernetes_count"] == 5


def test_host_count_zero_gives_kubernetes_everything():
    plan = plan_node("gpu-a", facts8(), "gpu_operator", {"host_count": 0})
    assert plan["kubernetes_count"] == 8 and plan["host_count"] == 0


def test_count_zero_gives_kubernetes_nothing_with_a_warning():
    plan = plan_node("gpu-a", facts8(), "device_plugin", {"count": 0})
    assert plan["kubernetes_count"] == 0 and plan["host_count"] == 8
    assert plan["resources"] == {"nvidia.com/gpu": 0}
    assert any("split.count is 0" in w for w in plan["warnings"])


def test_both_shares_named_leftovers_stay_with_the_host():
    plan = plan_node(
        "gpu-a", facts8(), "device_plugin", {"uuids": [uuid(1, 0)], "host_pci_bus_ids": ["00000000:2A:00.0"]}
    )
    assert plan["kubernetes_uuids"] == [uuid(1, 0)]
    assert plan["host_uuids"] == [uuid(1, i) for i in range(1, 8)]
    assert any("named by neither" in w and uuid(1, 2) in w for w in plan["warnings"])


def test_count_with_host_count_host_side_goes_first():
    plan = plan_node("gpu-a", facts8(), "device_plugin", {"count": 2, "host_count": 2})
    assert plan["host_uuids"][:2] == [uuid(1, 0), uuid(1, 1)]
    assert plan["kubernetes_uuids"] == [uuid(1, 2), uuid(1, 3)]


def test_explicitly_selected_degraded_gpu_is_kept_with_a_warning():
    facts = facts8({2: {"health": "degraded", "reasons": ["ECC"]}})
    plan = plan_node("gpu-a", facts, "device_plugin", {"uuids": [uuid(1, 2)]})
    assert plan["kubernetes_uuids"] == [uuid(1, 2)]
    assert any(uuid(1, 2) in w and "degraded" in w for w in plan["warnings"])


def test_lost_gpu_kept_for_the_host_explicitly_warns():
    facts = facts8({2: {"health": "lost"}})
    plan = plan_node("gpu-a", facts, "device_plugin", {"host_uuids": [uuid(1, 2)]})
    assert uuid(1, 2) in plan["host_uuids"]
    assert any(uuid(1, 2) in w and "lost" in w for w in plan["warnings"])


def test_exclude_unhealthy_false_uses_degraded_but_never_lost():
    facts = facts8({0: {"health": "degraded"}, 1: {"health": "lost"}})
    plan = plan_node("gpu-a", facts, "device_plugin", {"count": 2}, exclude_unhealthy=False)
    assert plan["kubernetes_uuids"] == [uuid(1, 0), uuid(1, 2)]
    assert [e["uuid"] for e in plan["excluded"]] == [uuid(1, 1)]


def test_mode_none_keeps_everything_for_the_host():
    plan = plan_node("gpu-a", facts8(), "none", {"count": 4})
    assert plan["host_count"] == 8 and plan["kubernetes_count"] == 0
    assert plan["resources"] == {"nvidia.com/gpu": 0}
    assert any("split is ignored" in w for w in plan["warnings"])
    assert plan_node("gpu-a", facts8(), "none", None)["host_count"] == 8


def test_mode_dra_names_host_devices_by_minor_number_not_index():
    facts = facts8({6: {"health": "degraded"}})
    plan = plan_node("gpu-a", facts, "dra", {"count": 4})
    assert plan["host_uuids"] == [uuid(1, 4), uuid(1, 5), uuid(1, 7)]
    assert plan["dra_devices"] == [f"gpu-{MINORS[4]}", f"gpu-{MINORS[5]}", f"gpu-{MINORS[7]}"]
    assert plan["dra_excluded_devices"] == [f"gpu-{MINORS[6]}"]
    assert plan["dra_devices"] != ["gpu-4", "gpu-5", "gpu-7"]
    assert plan["resources"] == {"nvidia.com/gpu": 0}  # no device plugin in mode dra


def test_gpu_operator_mode_plans_like_device_plugin():
    a = plan_node("gpu-a", facts8(), "gpu_operator", {"count": 3})
    b = plan_node("gpu-a", facts8(), "device_plugin", {"count": 3})
    assert a["kubernetes_uuids"] == b["kubernetes_uuids"] and a["mode"] == "gpu_operator"


def test_facts_may_be_the_module_result_mapping():
    plan = plan_node("gpu-a", {"gpus": facts8()}, "device_plugin", {"count": 1})
    assert plan["kubernetes_count"] == 1
    ansible_facts = {"nvidia_gpus": facts8(), "nvidia_driver_version": "570.172.08"}
    assert plan_node("gpu-a", ansible_facts, "device_plugin", {"count": 3})["kubernetes_count"] == 3


def test_node_name_differs_from_host():
    plan = plan_node("gpu-a", facts8(), "device_plugin", {"count": 1}, node_name="gpu-a.cluster.local")
    assert plan["host"] == "gpu-a" and plan["node"] == "gpu-a.cluster.local"


def test_host_without_gpus():
    plan = plan_node("cpu-a", [], "device_plugin", {"host_count": 0})
    assert plan["gpu_count"] == 0 and plan["split"] is False and plan["kubernetes_uuids"] == []


def test_warns_about_host_processes_on_kubernetes_gpus():
    procs = [
        {"pid": 4242, "used_memory_mib": 1000, "name": "python", "in_container": False, "container_id": None},
        {"pid": 99, "used_memory_mib": 10, "name": "pod", "in_container": True, "container_id": "abc"},
    ]
    plan = plan_node("gpu-a", facts8({0: {"procs": procs}}), "device_plugin", {"count": 1})
    [warning] = [w for w in plan["warnings"] if "process" in w]
    assert "pid 4242 (python)" in warning and "pid 99" not in warning and uuid(1, 0) in warning


def test_warns_about_pending_mig_mode_change():
    facts = facts8({3: {"mig": False, "pending": "enabled"}})
    plan = plan_node("gpu-a", facts, "device_plugin", {"count": 1})
    assert any(uuid(1, 3) in w and "pending" in w for w in plan["warnings"])


def test_duplicate_selection_warns_once():
    plan = plan_node("gpu-a", facts8(), "device_plugin", {"uuids": [uuid(1, 0), uuid(1, 0).upper()]})
    assert plan["kubernetes_uuids"] == [uuid(1, 0)]
    assert any("more than once" in w for w in plan["warnings"])


# MIG


def a100_mig_facts(profiles=("1g.10gb", "1g.10gb")):
    facts = []
    for i in range(4):
        migs = [mig_dev(i, gi + 1, p) for gi, p in enumerate(profiles)] if i < 2 else []
        facts.append(gpu(i, name=A100, mig=i < 2, migs=migs))
    return facts


def test_mig_single_kubernetes_share_is_the_mig_devices():
    plan = plan_node("a100", a100_mig_facts(), "device_plugin", {"count": 2}, mig_strategy="single")
    assert plan["kubernetes_uuids"] == [uuid(1, 0), uuid(1, 1)]
    assert plan["kubernetes_mig_uuids"] == [mig_dev(0, 1)["uuid"], mig_dev(0, 2)["uuid"]] + [
        mig_dev(1, 1)["uuid"],
        mig_dev(1, 2)["uuid"],
    ]
    assert plan["resources"] == {"nvidia.com/gpu": 4}
    assert plan["resource_name"] == "nvidia.com/gpu"
    assert plan["gpus"][0]["mig_enabled"] is True


def test_mig_mixed_resources_per_profile():
    plan = plan_node(
        "a100",
        a100_mig_facts(("1g.10gb", "3g.20gb")),
        "device_plugin",
        {"host_count": 1},
        mig_strategy="mixed",
    )
    # host takes GPU 0 (MIG); Kubernetes: GPU 1 (MIG, 2 devices) + GPUs 2,3 whole
    assert plan["resources"] == {
        "nvidia.com/gpu": 2,
        "nvidia.com/mig-1g.10gb": 1,
        "nvidia.com/mig-3g.20gb": 1,
    }
    assert plan["resource_name"] == ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.20gb"]


def test_count_skips_mig_enabled_gpus_under_strategy_none():
    plan = plan_node("a100", a100_mig_facts(), "device_plugin", {"count": 2})
    assert plan["kubernetes_uuids"] == [uuid(1, 2), uuid(1, 3)]
    assert any("MIG enabled" in w and uuid(1, 0) in w for w in plan["warnings"])


# --------------------------------------------------------------------------------------------
# refusals: each message names the host and the value


def test_refuses_unknown_mode_listing_allowed_values():
    err = refused("gpu-a", facts8(), "kubernetes", {"count": 1})
    assert err.errors == ["gpu-a: mode 'kubernetes' is not one of device_plugin, gpu_operator, dra, none"]


def test_refuses_unknown_mig_strategy():
    err = refused("gpu-a", facts8(), "device_plugin", {"count": 1}, mig_strategy="all")
    assert "gpu-a: mig_strategy (gpusplit_mig_strategy) 'all' is not one of none, single, mixed" in err.errors


def test_refuses_unknown_uuid():
    bad = "GPU-deadbeef-0000-4000-8000-000000000000"
    err = refused("gpu-a", facts8(), "device_plugin", {"uuids": [uuid(1, 0), bad]})
    [msg] = err.errors
    assert msg.startswith("gpu-a: split.uuids: unknown GPU UUID") and bad in msg and uuid(1, 0) in msg


def test_refuses_unknown_host_uuid():
    err = refused("gpu-a", facts8(), "device_plugin", {"host_uuids": ["GPU-nope"]})
    assert err.errors[0].startswith("gpu-a: split.host_uuids: unknown GPU UUID 'GPU-nope'")


def test_mig_uuids_of_a_whole_gpu_select_that_gpu():
    facts = a100_mig_facts()
    random.Random(5).shuffle(facts)
    migs = [mig_dev(1, 2)["uuid"].upper(), mig_dev(1, 1)["uuid"]]  # any order, any case
    plan = plan_node("a100", facts, "device_plugin", {"uuids": migs}, mig_strategy="mixed")
    assert plan["kubernetes_uuids"] == [uuid(1, 1)]
    assert plan["kubernetes_mig_uuids"] == [mig_dev(1, 1)["uuid"], mig_dev(1, 2)["uuid"]]
    assert plan["resources"] == {"nvidia.com/gpu": 0, "nvidia.com/mig-1g.10gb": 2}
    assert plan["host_uuids"] == [uuid(1, 0), uuid(1, 2), uuid(1, 3)]


def test_mig_uuids_and_gpu_uuids_mix_in_one_selection():
    migs = [mig_dev(0, 1)["uuid"], mig_dev(0, 2)["uuid"]]
    plan = plan_node(
        "a100", a100_mig_facts(), "gpu_operator", {"uuids": [uuid(1, 1), *migs]}, mig_strategy="single"
    )
    assert plan["kubernetes_uuids"] == [uuid(1, 0), uuid(1, 1)]
    assert plan["resources"] == {"nvidia.com/gpu": 4}


def test_host_share_by_mig_uuids():
    migs = [mig_dev(0, 1)["uuid"], mig_dev(0, 2)["uuid"]]
    plan = plan_node("a100", a100_mig_facts(), "device_plugin", {"host_uuids": migs}, mig_strategy="mixed")
    assert plan["host_uuids"] == [uuid(1, 0)]
    assert plan["kubernetes_uuids"] == [uuid(1, 1), uuid(1, 2), uuid(1, 3)]


def test_legacy_mig_names_resolve_through_parent_and_instance_ids():
    legacy = [f"MIG-{uuid(1, 0)}/1/0", f"mig-{uuid(1, 0).lower()}/2/0"]
    plan = plan_node("a100", a100_mig_facts(), "device_plugin", {"uuids": legacy}, mig_strategy="single")
    assert plan["kubernetes_uuids"] == [uuid(1, 0)]


def test_naming_a_gpu_and_all_its_mig_devices_warns_once():
    migs = [mig_dev(0, 1)["uuid"], mig_dev(0, 2)["uuid"]]
    plan = plan_node(
        "a100", a100_mig_facts(), "device_plugin", {"uuids": [uuid(1, 0), *migs]}, mig_strategy="single"
    )
    assert plan["kubernetes_uuids"] == [uuid(1, 0)]
    assert f"split.uuids names GPU {uuid(1, 0)} and also each of its MIG devices" in plan["warnings"]


def test_refuses_part_of_a_gpus_mig_devices():
    facts = a100_mig_facts(profiles=("3g.40gb", "1g.10gb", "1g.10gb"))
    chosen = mig_dev(0, 1, "3g.40gb")["uuid"]
    err = refused("a100", facts, "device_plugin", {"uuids": [chosen]}, mig_strategy="mixed")
    [msg] = err.errors
    assert msg.startswith(f"a100: split.uuids names 1 of the 3 MIG devices of GPU {uuid(1, 0)} ")
    assert f"({chosen})" in msg
    assert f"so {mig_dev(0, 2)['uuid']}, {mig_dev(0, 3)['uuid']} would go to the same share" in msg
    assert "nvidia.com/mig.config" in msg


def test_refuses_part_of_a_gpus_mig_devices_for_the_host_too():
    err = refused(
        "a100",
        a100_mig_facts(),
        "gpu_operator",
        {"host_uuids": [mig_dev(1, 2)["uuid"]]},
        mig_strategy="single",
    )
    assert err.errors[0].startswith(
        f"a100: split.host_uuids names 1 of the 2 MIG devices of GPU {uuid(1, 1)}"
    )


def test_refuses_mig_uuids_under_mig_strategy_none():
    mig_uuid = mig_dev(0, 1)["uuid"]
    err = refused("a100", a100_mig_facts(), "device_plugin", {"uuids": [mig_uuid]})
    assert err.errors == [
        f"a100: split.uuids: {mig_uuid} is a MIG device; mig_strategy 'none' advertises whole GPUs only; "
        "set mig_strategy single or mixed to hand out MIG devices"
    ]


def test_refuses_mig_uuids_in_dra_mode():
    mig_uuid = mig_dev(0, 1)["uuid"]
    err = refused("a100", a100_mig_facts(), "dra", {"host_uuids": [mig_uuid]})
    assert err.errors[0].startswith(f"a100: split.host_uuids: {mig_uuid} is a MIG device; mode dra")


def test_refuses_unknown_mig_uuid_listing_the_hosts_mig_devices():
    err = refused(
        "a100", a100_mig_facts(), "device_plugin", {"uuids": ["MIG-deadbeef"]}, mig_strategy="single"
    )
    [msg] = err.errors
    assert msg.startswith(
        "a100: split.uuids: unknown MIG device UUID 'MIG-deadbeef' (MIG devices on this host: "
    )
    assert mig_dev(1, 2)["uuid"] in msg


def test_refuses_unknown_pci_bus_id():
    err = refused("gpu-a", facts8(), "device_plugin", {"pci_bus_ids": ["0000:ff:00.0"]})
    [msg] = err.errors
    assert msg.startswith("gpu-a: split.pci_bus_ids: unknown PCI bus id '0000:ff:00.0'")


def test_refuses_malformed_pci_bus_id():
    err = refused("gpu-a", facts8(), "device_plugin", {"host_pci_bus_ids": ["slot-3"]})
    assert err.errors[0].startswith("gpu-a: split.host_pci_bus_ids: 'slot-3' is not a PCI bus id")


def test_refuses_unknown_index():
    err = refused("gpu-a", facts8(), "device_plugin", {"indices": [8]})
    assert err.errors == ["gpu-a: split.indices: unknown GPU index 8 (this host has: 0, 1, 2, 3, 4, 5, 6, 7)"]


def test_refuses_non_numeric_index():
    err = refused("gpu-a", facts8(), "device_plugin", {"host_indices": ["first"]})
    assert err.errors == ["gpu-a: split.host_indices: 'first' is not a GPU index"]


def test_refuses_overlap_between_named_shares():
    err = refused(
        "gpu-a", facts8(), "device_plugin", {"uuids": [uuid(1, 0), uuid(1, 1)], "host_indices": [1]}
    )
    [msg] = err.errors
    assert msg.startswith("gpu-a: split.uuids and split.host_indices both name GPU " + uuid(1, 1))


def test_refuses_count_above_usable():
    facts = facts8({0: {"health": "lost"}, 1: {"health": "degraded"}})
    err = refused("gpu-a", facts, "device_plugin", {"count": 7})
    assert err.errors == [
        "gpu-a: split.count 7 is more than the 6 usable GPU(s) (8 GPU(s) on the host, 1 lost, 1 degraded)"
    ]


def test_refuses_count_above_usable_mentions_mig():
    err = refused("a100", a100_mig_facts(), "device_plugin", {"count": 3})
    assert "a100: split.count 3 is more than the 2 usable GPU(s)" in err.errors[0]
    assert "2 more have MIG enabled" in err.errors[0]


@pytest.mark.parametrize("value", ["²", "٣"])
def test_refuses_an_index_in_other_digits(value):
    err = refused("gpu-a", facts8(), "device_plugin", {"indices": [value]})
    assert "indices" in err.errors[0] and repr(value) in err.errors[0]


def test_refuses_host_count_above_usable():
    err = refused("gpu-a", facts8(), "device_plugin", {"host_count": 9})
    assert err.errors[0].startswith("gpu-a: split.host_count 9 is more than the 8 usable GPU(s)")


# issue 43: "²" passed str.isdigit() and int() then failed with Python's words; "٣" and "２" were read as 3 and 2
@pytest.mark.parametrize("value", [-1, True, "two", 1.5, "²", "٣", "２", "1_0"])
def test_refuses_bad_count(value):
    err = refused("gpu-a", facts8(), "device_plugin", {"count": value})
    assert err.errors == [f"gpu-a: split.count: {value!r} is not a whole number >= 0"]


def test_refuses_product_matching_nothing():
    err = refused("gpu-a", facts8(), "device_plugin", {"product": "Tesla V100*"})
    assert err.errors == [
        f"gpu-a: split.product 'Tesla V100*' matches no GPU on this host (products: {H100})"
    ]


def test_refuses_product_matching_only_unhealthy():
    facts = [gpu(i, name=A100 if i == 0 else H100, health="lost" if i == 0 else "ok") for i in range(2)]
    err = refused("gpu-a", facts, "device_plugin", {"product": A100})
    assert err.errors[0].startswith(f"gpu-a: split.product '{A100}' matches only GPUs that are unhealthy")


@pytest.mark.parametrize(
    ("key", "value"),
    [("host_uuids", [uuid(1, 1), uuid(1, 5)]), ("host_pci_bus_ids", ["2a:00.0", "0000:ab:00.0"])],
)
def test_refuses_product_overlapping_the_named_host_share(key, value):
    """product takes every matching GPU; one the host share names too would be in both shares."""
    facts = [gpu(i, name=H100 if i < 4 else A100) for i in range(8)]
    err = refused("gpu-a", facts, "device_plugin", {"product": "*H100*", key: value})
    assert err.errors == [
        f"gpu-a: split.product '*H100*' and split.{key} both name GPU(s) {uuid(1, 1)} "
        f"(00000000:2A:00.0, index 1); a GPU belongs to one share (narrow the product pattern, "
        f"or keep only GPUs of other products in split.{key})"
    ]
    # the host share naming only GPUs of other products is fine
    plan = plan_node("gpu-a", facts, "device_plugin", {"product": "*H100*", key: value[1:]})
    assert plan["kubernetes_uuids"] == [uuid(1, i) for i in range(4)]
    assert plan["host_uuids"] == [uuid(1, i) for i in range(4, 8)]


@pytest.mark.parametrize("key", ["uuids", "pci_bus_ids", "indices", "host_uuids"])
def test_refuses_empty_selection(key):
    err = refused("gpu-a", facts8(), "device_plugin", {key: []})
    assert err.errors[0].startswith(f"gpu-a: split.{key}: [] selects nothing")


def test_refuses_more_than_one_selector():
    err = refused("gpu-a", facts8(), "device_plugin", {"count": 1, "product": H100})
    assert err.errors == [
        "gpu-a: split: more than one selector for the Kubernetes share: count, product "
        "(use exactly one of count, uuids, pci_bus_ids, indices, product)"
    ]
    err = refused("gpu-a", facts8(), "device_plugin", {"host_count": 1, "host_uuids": [uuid(1, 0)]})
    assert "gpu-a: split: more than one selector for the host share: host_count, host_uuids" in err.errors[0]


def test_refuses_no_selector_and_unknown_keys():
    err = refused("gpu-a", facts8(), "device_plugin", {})
    assert err.errors[0].startswith("gpu-a: split: {} names no selector")
    err = refused("gpu-a", facts8(), "device_plugin", None)
    assert "names no selector" in err.errors[0]
    err = refused("gpu-a", facts8(), "device_plugin", {"gpus": 2})
    assert err.errors[0].startswith("gpu-a: split: unknown key(s) gpus (allowed: count, uuids")


def test_refuses_split_that_is_not_a_mapping():
    err = refused("gpu-a", facts8(), "device_plugin", [2])
    assert err.errors[0].startswith("gpu-a: split (gpusplit_split): expected a mapping") and err.errors[
        0
    ].endswith("got list [2]")


def test_refuses_whole_gpu_selection_of_mig_enabled_gpu():
    err = refused("a100", a100_mig_facts(), "device_plugin", {"uuids": [uuid(1, 0), uuid(1, 2)]})
    [msg] = err.errors
    assert msg.startswith(f"a100: split.uuids gives GPU {uuid(1, 0)} ") and "MIG mode is enabled" in msg


def test_refuses_mig_enabled_gpu_falling_to_kubernetes_as_the_rest():
    err = refused("a100", a100_mig_facts(), "gpu_operator", {"host_uuids": [uuid(1, 0)]})
    [msg] = err.errors
    assert msg.startswith(f"a100: the rest (not named by split.host_uuids) gives GPU {uuid(1, 1)}")


def test_mig_enabled_gpu_is_fine_in_the_host_share():
    plan = plan_node("a100", a100_mig_facts(), "device_plugin", {"host_uuids": [uuid(1, 0), uuid(1, 1)]})
    assert plan["kubernetes_uuids"] == [uuid(1, 2), uuid(1, 3)]


def test_refuses_lost_gpu_in_kubernetes_share():
    facts = facts8({3: {"health": "lost", "reasons": ["GPU has fallen off the bus"]}})
    err = refused("gpu-a", facts, "device_plugin", {"pci_bus_ids": ["00000000:5D:00.0"]})
    [msg] = err.errors
    assert msg.startswith(f"gpu-a: split.pci_bus_ids selects GPU {uuid(1, 3)}")
    assert "lost" in msg and "fallen off the bus" in msg


def test_refuses_mixed_mig_modes_under_single():
    err = refused("a100", a100_mig_facts(), "device_plugin", {"host_count": 0}, mig_strategy="single")
    assert err.errors[0].startswith(
        "a100: mig_strategy single needs one MIG mode across the Kubernetes share"
    )
    assert uuid(1, 0) in err.errors[0] and uuid(1, 3) in err.errors[0]


def test_refuses_several_profiles_under_single():
    facts = a100_mig_facts(("1g.10gb", "2g.20gb"))
    err = refused("a100", facts, "device_plugin", {"count": 2}, mig_strategy="single")
    assert err.errors == [
        "a100: mig_strategy single needs one MIG profile across the Kubernetes share, "
        "found 1g.10gb, 2g.20gb (use mig_strategy mixed)"
    ]


def test_refuses_mig_gpu_without_devices_under_single():
    facts = [gpu(0, name=A100, mig=True, migs=[])]
    err = refused("a100", facts, "device_plugin", {"count": 1}, mig_strategy="single")
    assert err.errors[0].startswith(f"a100: mig_strategy single: GPU {uuid(1, 0)}")


def test_refuses_dra_without_minor_numbers():
    facts = facts8()
    facts[5]["minor_number"] = None
    err = refused("gpu-a", facts, "dra", {"count": 2})
    assert err.errors[0].startswith(f"gpu-a: mode dra: GPU {uuid(1, 5)}")


def test_refuses_bad_facts():
    facts = facts8()
    facts.append(dict(facts[0]))
    bad_pci = gpu(1)
    bad_pci["uuid"] = uuid(1, 9)
    bad_pci["pci_bus_id"] = "nowhere"
    facts.append(bad_pci)
    err = refused("gpu-a", facts, "device_plugin", {"count": 1})
    assert f"gpu-a: facts: GPU UUID {uuid(1, 0)} is reported twice" in err.errors
    assert f"gpu-a: facts: GPU {uuid(1, 9)} has no valid pci_bus_id: 'nowhere'" in err.errors
    assert (
        refused("gpu-a", None, "device_plugin", {"count": 1})
        .errors[0]
        .startswith("gpu-a: facts: no GPU facts")
    )


def test_collects_several_refusals_of_one_host():
    err = refused("gpu-a", facts8(), "device_plugin", {"uuids": ["GPU-x", "GPU-y"]})
    assert len(err.errors) == 2 and all(
        m.startswith("gpu-a: split.uuids: unknown GPU UUID") for m in err.errors
    )
    assert str(err) == "\n".join(err.errors)


# --------------------------------------------------------------------------------------------
# determinism


def test_shuffled_facts_give_the_same_plan():
    base = facts8({2: {"health": "degraded", "reasons": ["Xid 48"]}})
    base[0]["mig_devices"] = []
    reference = plan_node("gpu-a", base, "device_plugin", {"host_uuids": [uuid(1, 6)]})
    for seed in range(20):
        shuffled = copy.deepcopy(base)
        random.Random(seed).shuffle(shuffled)
        assert plan_node("gpu-a", shuffled, "device_plugin", {"host_uuids": [uuid(1, 6)]}) == reference


def test_shuffled_mig_devices_and_hosts_give_the_same_fleet_plan():
    def fleet(seed):
        rng = random.Random(seed)
        hosts = {}
        names = [f"node-{n}" for n in range(6)]
        rng.shuffle(names)
        for name in names:
            facts = a100_mig_facts(("1g.10gb", "3g.20gb"))
            for g in facts:
                rng.shuffle(g["mig_devices"])
            rng.shuffle(facts)
            hosts[name] = {
                "facts": facts,
                "mode": "device_plugin",
                "split": {"count": 3},
                "mig_strategy": "mixed",
            }
        return plan_fleet(hosts)

    first = fleet(0)
    assert list(first["nodes"]) == sorted(first["nodes"])
    for seed in range(1, 6):
        assert json.dumps(fleet(seed)) == json.dumps(first)


# --------------------------------------------------------------------------------------------
# fleet


def test_fleet_collects_every_hosts_errors_before_raising():
    hosts = {
        "gpu-b": {"facts": facts8(), "mode": "device_plugin", "split": {"count": 9}},
        "gpu-a": {"facts": facts8(), "mode": "device-plugin", "split": {"count": 1}},
        "gpu-c": {"facts": facts8(), "mode": "device_plugin", "split": {"count": 1}},
        "gpu-d": {"facts": facts8(), "mode": "dra", "split": {"uuids": ["GPU-zzz"]}},
        "gpu-e": {"facts": facts8(), "mode": "none", "splitt": {}},
    }
    with pytest.raises(PlanError) as exc:
        plan_fleet(hosts)
    errors = exc.value.errors
    assert [e.split(":")[0] for e in errors] == ["gpu-a", "gpu-b", "gpu-d", "gpu-e"]
    assert "'device-plugin'" in errors[0] and "split.count 9" in errors[1] and "'GPU-zzz'" in errors[2]
    assert "unknown key(s) splitt" in errors[3]


def test_fleet_plan_summary_and_warnings():
    hosts = {
        "gpu-b": {"facts": facts8({7: {"health": "lost"}}), "mode": "device_plugin", "split": {"count": 2}},
        "gpu-a": {"facts": facts8(), "mode": "dra", "split": {"indices": [0]}},
        "cpu-c": {"facts": [], "mode": "none", "split": None},
    }
    plan = plan_fleet(hosts)
    assert list(plan["nodes"]) == ["cpu-c", "gpu-a", "gpu-b"]
    assert plan["summary"] == {
        "nodes": 3,
        "gpus": 16,
        "kubernetes_gpus": 3,
        "host_gpus": 12,
        "excluded_gpus": 1,
        "by_mode": {"device_plugin": 1, "dra": 1, "none": 1},
    }
    assert any(w.startswith("gpu-a: split.indices") for w in plan["warnings"])


def test_fleet_refuses_two_hosts_on_one_node_name():
    hosts = {
        "a": {"facts": facts8(), "mode": "device_plugin", "split": {"count": 1}, "node_name": "n1"},
        "b": {"facts": facts8(), "mode": "device_plugin", "split": {"count": 1}, "node_name": "n1"},
    }
    with pytest.raises(PlanError) as exc:
        plan_fleet(hosts)
    assert exc.value.errors == ["a: node name 'n1' is also used by b"]


def test_fleet_entry_options_are_passed_through():
    hosts = {
        "a100": {
            "facts": a100_mig_facts(),
            "mode": "device_plugin",
            "split": {"count": 2},
            "mig_strategy": "single",
            "exclude_unhealthy": False,
            "node_name": "a100.example",
        }
    }
    node = plan_fleet(hosts)["nodes"]["a100"]
    assert node["mig_strategy"] == "single" and node["node"] == "a100.example"
    assert node["resources"] == {"nvidia.com/gpu": 4}


def test_normalisers():
    assert ids.normalize_pci_bus_id("0000:3b:00.0") == "00000000:3B:00.0"
    assert ids.normalize_pci_bus_id("3B:00.1") == "00000000:3B:00.1"
    assert ids.normalize_pci_bus_id("10000:3b:00.0") == "00010000:3B:00.0"
    assert ids.normalize_pci_bus_id("3b:00") is None
    assert ids.normalize_uuid(" GPU-ABC ") == "GPU-abc"
    assert ids.normalize_uuid("mig-gpu-ABC/1/0") == "MIG-GPU-abc/1/0"


def test_lost_gpu_without_identity_is_excluded_not_refused():
    facts = facts8({3: {"health": "lost", "reasons": ["fell off the bus"]}})
    facts[3]["uuid"] = None
    facts[3]["pci_bus_id"] = None
    facts[3]["minor_number"] = None
    plan = plan_node("gpu-a", facts, "dra", {"count": 2})
    assert plan["excluded"] == [{"uuid": None, "pci_bus_id": None, "reason": "health lost: fell off the bus"}]
    assert plan["gpus"][-1]["share"] == "excluded"  # unidentified GPUs come last
    assert plan["dra_excluded_devices"] == []
    assert any("no DeviceTaintRule can name it" in w for w in plan["warnings"])
    # a healthy GPU without identity is still refused
    facts[3]["health"] = {"status": "ok", "reasons": []}
    assert refused("gpu-a", facts, "dra", {"count": 2}).errors == [
        "gpu-a: facts: GPU #3 has no valid GPU UUID: None"
    ]


def test_a_gpu_the_driver_would_not_open_is_excluded_with_its_reason():
    """The facts report a GPU NVML could not open (no permission) by index only, degraded: the plan
    keeps it out of both shares with the facts' reason, even when degraded GPUs are allowed."""
    reason = "NVML cannot open GPU 3: nvmlDeviceGetHandleByIndex returned NVML_ERROR_NO_PERMISSION"
    facts = facts8({3: {"health": "degraded", "reasons": [reason]}})
    facts[3].update({"uuid": None, "pci_bus_id": None, "minor_number": None})
    for exclude_unhealthy in (True, False):
        plan = plan_node("gpu-a", facts, "device_plugin", {"count": 7}, exclude_unhealthy=exclude_unhealthy)
        assert plan["kubernetes_count"] == 7 and None not in plan["kubernetes_uuids"]
        [excluded] = plan["excluded"]
        assert excluded["uuid"] is None and reason in excluded["reason"]
    with pytest.raises(PlanError, match="8"):
        plan_node("gpu-a", facts, "device_plugin", {"count": 8})
    dra_plan = plan_node("gpu-a", facts, "dra", {"count": 2})
    assert any("degraded GPU" in w and "no DeviceTaintRule can name it" in w for w in dra_plan["warnings"])


# --------------------------------------------------------------------------------------------
# issue 18: node names (case 5) and inventory fields of the wrong JSON type (case 12)


@pytest.mark.parametrize(
    ("node_name", "problem"),
    [
        ("My_Node!", "it contains '!' 'M' 'N' '_'; only lower-case letters, digits, '-' and '.' are allowed"),
        ("gpu-a..example", "each part between dots must start and end with a letter or digit"),
        ("n" * 254, "it has 254 characters, more than 253"),
        ("", "it is empty"),
        (7.5, "expected a string, got number"),
        (True, "expected a string, got boolean"),
        (["gpu-a"], "expected a string, got list"),
    ],
)
def test_a_node_name_that_kubernetes_refuses_is_refused_before_planning(node_name, problem):
    """Case 5: gpusplit_node_name is checked as an RFC 1123 subdomain, naming the host and the field."""
    (msg,) = refused("gpu-a", facts8(), "device_plugin", {"count": 1}, node_name=node_name).errors
    assert msg.startswith("gpu-a: node_name (gpusplit_node_name) ")
    assert msg.endswith(problem)


def test_a_numeric_node_name_is_a_name():
    assert plan_node("gpu-a", facts8(), "device_plugin", {"count": 1}, node_name=12345)["node"] == "12345"


def test_an_inventory_host_name_used_as_node_name_is_checked_too():
    """The sibling case 5 does not name: no gpusplit_node_name, and a host name that is no node name."""
    (msg,) = refused("GPU_A", facts8(), "device_plugin", {"count": 1}).errors
    assert msg.startswith(
        "GPU_A: the inventory host name is the node name (gpusplit_node_name is not set), but 'GPU_A' is not"
    )
    assert msg.endswith("; set gpusplit_node_name to the node's name")
    assert plan_node("GPU_A", facts8(), "device_plugin", {"count": 1}, node_name="gpu-a")["node"] == "gpu-a"


def test_a_split_given_as_a_list_names_host_field_and_shape():
    """Case 12: gpusplit_split: [count, 2]."""
    (msg,) = refused("gpu-a", facts8(), "device_plugin", ["count", 2]).errors
    assert msg == (
        "gpu-a: split (gpusplit_split): expected a mapping of one selector to its value, e.g. {count: 2} "
        "or {host_uuids: [GPU-...]}, got list ['count', 2]"
    )


JSON_VALUES = [None, True, 3, 2.5, "x", ["count", 2], {"x": [1]}]
PYTHON_TEXT = (
    "object has no attribute",
    "not iterable",
    "unhashable",
    "NoneType",
    "_AnsibleTagged",
    "Traceback",
)
FIELDS = {
    "facts": None,
    "mode": None,
    "split": None,
    "mig_strategy": None,
    "exclude_unhealthy": None,
    "node_name": None,
    **{f"split.{key}": key for key in SPLIT_KEYS},
}


@pytest.mark.parametrize("field", sorted(FIELDS))
@pytest.mark.parametrize("value", JSON_VALUES, ids=lambda v: type(v).__name__)
def test_every_fleet_field_of_every_json_type_is_planned_or_refused_by_name(field, value):
    """The class behind case 12: each inventory field (and each split selector) given each JSON
    type is planned or refused with the host and the field named; never a Python error."""
    entry = {"facts": facts8(), "mode": "device_plugin", "split": {"count": 1}}
    if field.startswith("split."):
        entry["split"] = {FIELDS[field]: value}
    else:
        entry[field] = value
    try:
        plan_fleet({"gpu-a": entry})
    except PlanError as exc:
        for msg in exc.errors:
            assert msg.startswith("gpu-a: "), msg
            assert not any(p in msg for p in PYTHON_TEXT), msg
        name = field.split(".")[-1] if field.startswith("split.") else field
        assert any(name in msg for msg in exc.errors) or field == "facts" or value is None, exc.errors
