"""The fleet table (plugins/plugin_utils/split_table.py): one fixed-width line per node plan."""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_fleet, plan_node
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.split_table import fleet_table, short_pci

# PCI buses of an 8-GPU HGX board, in bus order
BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


def gpu(i, health="ok", reasons=()):
    return {
        "uuid": f"GPU-00000001-{i:04x}-4{i:03x}-8001-{16 + i:012x}",
        "index": i,
        "minor_number": i,
        "pci_bus_id": f"00000000:{BUSES[i]:02X}:00.0",
        "name": "NVIDIA H100 80GB HBM3",
        "memory_total_mib": 81559,
        "mig_mode": {"current": "disabled", "pending": "disabled"},
        "mig_devices": [],
        "health": {"status": health, "reasons": list(reasons)},
        "processes": [],
    }


def facts8(overrides=None):
    """8 healthy H100s; overrides: {i: {gpu() kwargs}}."""
    overrides = overrides or {}
    return [gpu(i, **overrides.get(i, {})) for i in range(8)]


def test_fleet_table_is_fixed_width_with_bus_ids_and_totals():
    hosts = {
        "gpu-b": {"facts": facts8({7: {"health": "lost"}}), "mode": "device_plugin", "split": {"count": 2}},
        "gpu-a": {"facts": facts8(), "mode": "dra", "split": {"indices": [0]}},
        "cpu-c": {"facts": [], "mode": "none", "split": None},
    }
    plan = plan_fleet(hosts)
    lines = fleet_table(plan).splitlines()
    assert lines[0].split() == ["NODE", "MODE", "HOST", "GPUS", "KUBERNETES", "GPUS", "EXCLUDED"]
    assert lines[2].split()[:3] == ["cpu-c", "none", "0"]
    row_b = next(line for line in lines if line.startswith("gpu-b"))
    assert "2 (18:00.0 2A:00.0)" in row_b and "1 (DB:00.0)" in row_b
    assert lines[-1].split() == ["TOTAL", "3", "node(s)", "12", "3", "1"]
    widths = {len(line) for line in lines if line.startswith("-")}
    assert len(widths) == 1  # fixed width
    assert fleet_table(plan["nodes"]["gpu-b"]).splitlines()[2].startswith("gpu-b")


def test_short_pci_keeps_a_domain_that_is_not_zero():
    assert short_pci("00000000:3B:00.0") == "3B:00.0"
    assert short_pci("00000001:3B:00.0") == "00000001:3B:00.0"


def test_a_gpu_without_bus_id_is_a_question_mark():
    facts = facts8({3: {"health": "lost", "reasons": ["fell off the bus"]}})
    facts[3].update({"uuid": None, "pci_bus_id": None, "minor_number": None})
    plan = plan_node("gpu-a", facts, "dra", {"count": 2})
    assert "1 (?)" in fleet_table(plan)
