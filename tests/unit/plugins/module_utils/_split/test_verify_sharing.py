"""verify on a node whose Kubernetes share is time-sliced: GPUs x replicas under the advertised name, and why not."""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._split import verify
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_fleet


def gpu(i):
    return {
        "uuid": f"GPU-0000000{i}-0000-4000-8000-00000000000{i}",
        "index": i,
        "minor_number": i,
        "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0",
        "name": "NVIDIA H100 80GB HBM3",
        "memory_total_mib": 81559,
        "mig_mode": {"current": "disabled", "pending": None},
        "mig_devices": [],
        "health": {"status": "ok", "reasons": []},
        "processes": [],
    }


def plan(**time_slicing):
    entry = {"facts": [gpu(i) for i in range(4)], "mode": "device_plugin", "split": {"host_count": 2}}
    entry["sharing"] = {"time_slicing": time_slicing}
    return plan_fleet({"n1": entry})


def node(**allocatable):
    names = {"gpu": "nvidia.com/gpu", "shared": "nvidia.com/gpu.shared"}
    values = {names[k]: str(v) for k, v in allocatable.items()}
    return {"metadata": {"name": "n1"}, "status": {"allocatable": values}}


def pod(sharing="time-slicing x4"):
    return {
        "metadata": {
            "name": "gpusplit-dp-n1-x",
            "labels": {"app.kubernetes.io/name": "gpusplit-device-plugin"},
            "annotations": {"gpusplit.io/sharing": sharing},
        },
        "spec": {
            "nodeName": "n1",
            "containers": [
                {"name": "nvidia-device-plugin-ctr", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"}
            ],
        },
        "status": {"phase": "Running"},
    }


def entry(the_plan, the_node, pods):
    return verify.verify_fleet(the_plan, [the_node], pods, {})["nodes"][0]


def test_gpus_times_replicas_is_ok():
    got = entry(plan(replicas=4), node(gpu=8), [pod()])
    assert got["verdict"] == verify.OK, got
    assert got["expected_resources"] == {"nvidia.com/gpu": 8}


def test_renamed_resource_is_compared_and_the_unrenamed_one_must_be_zero():
    the_plan = plan(replicas=4, rename=True)
    ok = entry(
        the_plan,
        node(gpu=0, shared=8),
        [pod("time-slicing x4 (nvidia.com/gpu.shared)")],
    )
    assert ok["verdict"] == verify.OK, ok
    assert ok["resources"] == {"nvidia.com/gpu": 0, "nvidia.com/gpu.shared": 8}


def test_a_plugin_without_its_config_is_named():
    got = entry(
        plan(replicas=4, rename=True),
        node(gpu=2),
        [pod("time-slicing x4 (nvidia.com/gpu.shared)")],
    )
    assert got["verdict"] == verify.FAIL  # 2 nvidia.com/gpu where the plan has none
    assert any(
        "sharing time-slicing x4 (nvidia.com/gpu.shared): nvidia.com/gpu.shared: 0 advertised, 8 planned "
        "(2 device(s) x 4 replicas); one per device: the split plugin runs without its sharing config" in r
        for r in got["reasons"]
    ), got["reasons"]


def test_fewer_replicas_than_planned_is_drift_and_says_so():
    got = entry(plan(replicas=4), node(gpu=4), [pod()])
    assert got["verdict"] == verify.DRIFT
    assert "2 replicas per device: the split plugin runs an older sharing config" in got["reasons"][-1]


def test_more_while_the_old_sharing_still_runs_is_rolling_out():
    got = entry(plan(replicas=2), node(gpu=8), [pod("time-slicing x4")])
    assert got["verdict"] == verify.DRIFT, got
    assert "rolling out" in got["reasons"][0]
    assert entry(plan(replicas=2), node(gpu=8), [pod("time-slicing x2")])["verdict"] == verify.FAIL
