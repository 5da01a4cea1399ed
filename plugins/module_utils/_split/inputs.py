# Copyright: gpusplit contributors
# Apache-2.0
"""The GPU facts as the split planner reads them. Private to the collection.

Validates and normalises one host's GPU facts (as the module ``nvidia_gpu_facts`` reports them)
into :class:`Gpu` records sorted by PCI bus id. Every problem is appended to ``errors`` (each
naming the host and the offending value); nothing is raised here.
"""

from __future__ import annotations

import re

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import ascii_int, type_name
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.ids import (
    normalize_pci_bus_id,
    normalize_uuid,
    pci_sort_key,
)

HEALTH_STATES = ("ok", "degraded", "lost")
MAX_LISTED = 16  # a message lists at most this many values
_GPU_UUID_RE = re.compile(r"^gpu-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def int_or_none(value):
    """``value`` as an int (an int, or a string of ASCII digits), else None (booleans too). ``str.isdigit()``
    takes ``²`` (and ``int()`` then fails with Python's words) or ``٣`` (read as 3): ASCII digits only."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    return ascii_int(value)


def fmt_list(values):
    """``a, b, c`` for a message (at most MAX_LISTED values, then the count); ``none`` when empty."""
    values = list(values)
    if not values:
        return "none"
    shown = ", ".join(str(v) for v in values[:MAX_LISTED])
    if len(values) > MAX_LISTED:
        shown += f", ... ({len(values)} in all)"
    return shown


class Gpu:
    """One GPU of a host, normalised (``key``: the lower-case UUID, or a stand-in for an unidentified GPU)."""

    __slots__ = (
        "uuid",
        "key",
        "pci",
        "sort_key",
        "index",
        "minor",
        "name",
        "memory",
        "mig_enabled",
        "mig_mode_known",
        "mig_pending",
        "migs",
        "health",
        "health_reasons",
        "host_procs",
    )

    def describe(self):
        return f"{self.uuid} ({self.pci}, index {self.index})"


def _mig_sort_key(m):
    def num(v):
        return v if v is not None else -1

    return (num(m["gpu_instance_id"]), num(m["compute_instance_id"]), num(m["index"]), m["uuid"])


def _norm_mig_devices(host, gpu_uuid, raw, errors):
    migs = []
    if raw is None:
        return migs
    if not isinstance(raw, (list, tuple)):
        errors.append(f"{host}: facts: mig_devices of GPU {gpu_uuid} is not a list: {raw!r}")
        return migs
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("uuid"), str):
            errors.append(f"{host}: facts: a MIG device of GPU {gpu_uuid} has no uuid: {item!r}")
            continue
        migs.append(
            {
                "uuid": normalize_uuid(item["uuid"]),
                "index": int_or_none(item.get("index")),
                "profile": item.get("profile"),
                "gpu_instance_id": int_or_none(item.get("gpu_instance_id")),
                "compute_instance_id": int_or_none(item.get("compute_instance_id")),
                "memory_total_mib": int_or_none(item.get("memory_total_mib")),
            }
        )
    migs.sort(key=_mig_sort_key)
    return migs


def _norm_health(raw):
    health = raw.get("health") if isinstance(raw.get("health"), dict) else {}
    status = health.get("status") or "ok"
    reasons = [str(r) for r in (health.get("reasons") or [])]
    if not isinstance(status, str) or status.lower() not in HEALTH_STATES:
        reasons = [f"unknown health status {status!r}", *reasons]
        status = "degraded"
    return status.lower(), reasons


def _norm_gpu(host, pos, raw, errors):
    if not isinstance(raw, dict):
        errors.append(f"{host}: facts: GPU #{pos} is not a mapping: {raw!r}")
        return None
    health, reasons = _norm_health(raw)
    uuid = normalize_uuid(raw.get("uuid"))
    pci = normalize_pci_bus_id(raw.get("pci_bus_id"))
    index = int_or_none(raw.get("index"))
    minor = int_or_none(raw.get("minor_number"))
    valid_uuid = bool(uuid) and _GPU_UUID_RE.match(uuid.lower()) is not None
    if valid_uuid and pci is not None:
        key = uuid.lower()
        sort_key = pci_sort_key(pci)
    elif health != "ok":
        # a lost GPU, or one the driver would not open (no permission, unsupported), may not tell
        # its identity: keep it, excluded (usable() refuses a GPU without UUID), after the others
        uuid = uuid if valid_uuid else None
        key = (
            uuid.lower()
            if uuid
            else f"unidentified:{raw.get('uuid')}:{raw.get('pci_bus_id')}:{index}:{minor}"
        )
        sort_key = (1 << 40, -1 if index is None else index, -1 if minor is None else minor, key)
    elif not valid_uuid:
        errors.append(f"{host}: facts: GPU #{pos} has no valid GPU UUID: {raw.get('uuid')!r}")
        return None
    else:
        errors.append(f"{host}: facts: GPU {uuid} has no valid pci_bus_id: {raw.get('pci_bus_id')!r}")
        return None
    g = Gpu()
    g.uuid = uuid
    g.key = key
    g.pci = pci
    g.sort_key = sort_key
    g.index = index
    g.minor = minor
    g.name = raw.get("name") if isinstance(raw.get("name"), str) else ""
    g.memory = int_or_none(raw.get("memory_total_mib"))
    mig_mode = raw.get("mig_mode") if isinstance(raw.get("mig_mode"), dict) else {}
    current = mig_mode.get("current")
    pending = mig_mode.get("pending")
    g.mig_enabled = isinstance(current, str) and current.lower() == "enabled"
    g.mig_mode_known = isinstance(current, str) and current.lower() in ("enabled", "disabled")
    g.mig_pending = pending if isinstance(pending, str) else None
    if g.mig_pending is not None and isinstance(current, str) and pending.lower() == current.lower():
        g.mig_pending = None
    g.migs = _norm_mig_devices(host, uuid, raw.get("mig_devices"), errors)
    g.health = health
    g.health_reasons = reasons
    g.host_procs = [
        p for p in (raw.get("processes") or []) if isinstance(p, dict) and p.get("in_container") is not True
    ]
    return g


def read_facts(host, facts, errors):
    """Validate and normalise the facts; return the :class:`Gpu` list sorted by PCI bus id."""
    if isinstance(facts, dict):
        for key in ("gpus", "nvidia_gpus", "gpusplit_gpus"):
            if isinstance(facts.get(key), (list, tuple)):
                facts = facts[key]
                break
    if facts is None:
        errors.append(f"{host}: facts: no GPU facts for this host (run nvidia_gpu_facts first)")
        return []
    if not isinstance(facts, (list, tuple)):
        errors.append(f"{host}: facts: expected a list of GPUs, got {type_name(facts)}")
        return []
    gpus = []
    seen_uuid = set()
    seen_pci = {}
    for pos, raw in enumerate(facts):
        g = _norm_gpu(host, pos, raw, errors)
        if g is None:
            continue
        if g.key in seen_uuid:
            errors.append(f"{host}: facts: GPU UUID {g.uuid} is reported twice")
            continue
        if g.pci is not None and g.pci in seen_pci:
            errors.append(
                f"{host}: facts: PCI bus id {g.pci} is reported for both {seen_pci[g.pci]} and {g.uuid}"
            )
            continue
        seen_uuid.add(g.key)
        if g.pci is not None:
            seen_pci[g.pci] = g.uuid
        gpus.append(g)
    gpus.sort(key=lambda g: g.sort_key)
    return gpus
