"""The filter fleet_input: the planner's input from each host's variables, the sharing and MIG geometry included."""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.filter.fleet import fleet_input
from ansible_collections.gpusplit.k8s.plugins.filter.split import fleet_plan
from ansible_collections.gpusplit.k8s.tests.unit.gpufacts import h100


def gpus(host_no):
    """4 H100s of a host of their own (a GPU UUID belongs to one machine)."""
    return [dict(h100(i), uuid=f"GPU-0000000{host_no}-{i:04x}-4000-8000-{16 + i:012x}") for i in range(4)]


def test_sharing_and_mig_geometry_reach_the_planner():
    sharing = {"time_slicing": {"replicas": 4}}
    hostvars = {
        "a": {
            "nvidia_gpus": gpus(1),
            "gpusplit_mode": "device_plugin",
            "gpusplit_split": {"host_count": 2},
            "gpusplit_sharing": sharing,
        },
        "b": {
            "nvidia_gpus": gpus(2),
            "gpusplit_mode": "device_plugin",
            "gpusplit_split": {"host_count": 2},
            "gpusplit_sharing": None,
            "gpusplit_mig_geometry": None,
        },
    }
    entries = fleet_input(hostvars, ["a", "b"])
    assert entries["a"]["sharing"] == sharing
    assert "sharing" not in entries["b"] and "mig_geometry" not in entries["b"]  # null is left out
    plan = fleet_plan(entries)
    assert plan["nodes"]["a"]["resources"] == {"nvidia.com/gpu": 8}
    assert plan["nodes"]["b"]["sharing"] is None and plan["nodes"]["b"]["mig_geometry"] is None
