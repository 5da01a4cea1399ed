# Copyright: gpusplit contributors
# Apache-2.0
"""The shape of ansible_facts.nvidia_gpus: its keys, empty records and how they sort. Private to the collection.

Both collectors (nvml.py, smi.py) build their records with these functions, so every GPU carries every key
whatever the backend; nothing here touches the host.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError

# The keys of one GPU in ansible_facts.nvidia_gpus, in documentation order. Every GPU carries all of them.
GPU_KEYS = (
    "uuid",
    "index",
    "minor_number",
    "pci_bus_id",
    "name",
    "memory_total_mib",
    "mig_mode",
    "mig_devices",
    "ecc",
    "remapped_rows",
    "retired_pages",
    "numa_node",
    "persistence_mode",
    "processes",
    "health",
)
MIG_DEVICE_KEYS = ("uuid", "index", "profile", "gpu_instance_id", "compute_instance_id", "memory_total_mib")
PROCESS_KEYS = ("pid", "used_memory_mib", "name", "in_container", "container_id")

HEALTH_OK = "ok"
HEALTH_DEGRADED = "degraded"
HEALTH_LOST = "lost"


class GpuFactsError(GpusplitError):
    """A failure the module reports as is (the message is meant for the operator)."""


def _record(keys, **known):
    """A record with every one of ``keys`` (None: not known yet), in that order, ``known`` filled in."""
    record = dict.fromkeys(keys)
    record.update(known)
    return record


def new_gpu(index=None):
    """A GPU record with every key present and nothing known yet."""
    return _record(
        GPU_KEYS,
        index=index,
        mig_mode={"current": None, "pending": None},
        mig_devices=[],
        health={"status": HEALTH_OK, "reasons": []},
    )


def new_mig_device(index=None):
    return _record(MIG_DEVICE_KEYS, index=index)


def new_process(pid, used_memory_mib=None, name=None):
    return _record(PROCESS_KEYS, pid=pid, used_memory_mib=used_memory_mib, name=name)


def gpu_sort_key(gpu):
    """Sort by PCI bus id (stable across reboots); GPUs whose bus id is unknown go last, by index."""
    bus = gpu.get("pci_bus_id")
    index = gpu.get("index")
    return (bus is None, bus or "", index if index is not None else 1 << 30)


def sort_gpus(gpus):
    return sorted(gpus, key=gpu_sort_key)


def _none_when_unknown(**fields):
    """``fields`` as a dict, or None when every one of them is None (the GPU reports none of it)."""
    return None if all(value is None for value in fields.values()) else fields


def ecc_or_none(mode_current, uncorrected_volatile, uncorrected_aggregate):
    """The ecc dict, or None when the GPU reports none of it (no ECC support)."""
    return _none_when_unknown(
        mode_current=mode_current,
        uncorrected_volatile=uncorrected_volatile,
        uncorrected_aggregate=uncorrected_aggregate,
    )


def remapped_rows_or_none(correctable, uncorrectable, pending, failure):
    return _none_when_unknown(
        correctable=correctable, uncorrectable=uncorrectable, pending=pending, failure=failure
    )


def retired_pages_or_none(pending, double_bit_count):
    return _none_when_unknown(double_bit_pending=pending, double_bit_count=double_bit_count)
