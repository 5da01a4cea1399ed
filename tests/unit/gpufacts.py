"""One GPU as nvidia_gpu_facts reports it, for the tests that build node plans by hand."""

from __future__ import annotations


def h100(i, processes=()):
    """GPU ``i`` of an HGX-like H100 host: a UUID and a bus id of its own, healthy, MIG off."""
    return {
        "uuid": f"GPU-00000001-{i:04x}-4000-8000-{16 + i:012x}",
        "index": i,
        "minor_number": i,
        "pci_bus_id": f"0000:{0x18 + 0x10 * i:02x}:00.0",
        "name": "NVIDIA H100 80GB HBM3",
        "memory_total_mib": 81559,
        "mig_mode": {"current": "disabled", "pending": None},
        "mig_devices": [],
        "health": {"status": "ok", "reasons": []},
        "processes": list(processes),
    }
