"""Synthetic fleets for the benchmarks: HGX-like hosts with 8 GPUs each, mixed modes and splits."""

from __future__ import annotations

GPUS_PER_NODE = 8
BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
SPLITS = ({"count": 4}, {"host_count": 2}, {"pci_bus_ids": ["0000:18:00.0", "0000:2a:00.0"]}, {"count": 8})
MODES = ("device_plugin", "device_plugin", "gpu_operator", "dra", "none")


def synthetic_fleet(nodes):
    """{host: {facts, mode, split}} for ``nodes`` HGX-like hosts; every 97th has a degraded GPU."""
    hosts = {}
    for n in range(nodes):
        facts = []
        for i in range(GPUS_PER_NODE):
            facts.append(
                {
                    "uuid": f"GPU-{n:08x}-{i:04x}-4000-8000-{n * GPUS_PER_NODE + i:012x}",
                    "index": i,
                    "minor_number": (i * 3) % GPUS_PER_NODE,
                    "pci_bus_id": f"00000000:{BUSES[i]:02X}:00.0",
                    "name": "NVIDIA H100 80GB HBM3",
                    "memory_total_mib": 81559,
                    "mig_mode": {"current": "disabled", "pending": "disabled"},
                    "mig_devices": [],
                    "health": {"status": "degraded" if (n % 97 == 0 and i == 7) else "ok", "reasons": []},
                    "processes": [],
                }
            )
        facts.reverse()  # not in bus order, as facts may arrive
        split = dict(SPLITS[n % len(SPLITS)])
        if n % 97 == 0 and split.get("count") == 8:
            split = {"count": 7}
        hosts[f"gpu-node-{n:05d}.dc1.example.com"] = {
            "facts": facts,
            "mode": MODES[n % len(MODES)],
            "split": split,
        }
    return hosts
