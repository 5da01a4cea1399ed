# Copyright: gpusplit contributors
# Apache-2.0
"""Isolating a faulty GPU: which host, node and DRA device a GPU is, and the planner input without it. Private to the collection.

``locate_gpu`` finds a GPU UUID in the planner's input; ``isolation_targets`` picks the GPUs
of one isolate_gpu run (one UUID, or every GPU whose facts say it is unhealthy);
``isolation_fleet_input`` marks the GPU lost, so that the existing planner leaves it out. The
DeviceTaintRules that isolate it are in ``rules.py``.
"""

from __future__ import annotations

import copy

from ansible_collections.gpusplit.k8s.plugins.module_utils._dra.names import DraError, device_name
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.ids import normalize_uuid


def norm_uuid(value):
    """A UUID normalised and lower-cased, for comparing (``gpu-...``, ``mig-...``); "" for a non-string."""
    return (normalize_uuid(value) or "").lower()


def _facts_list(facts):
    if isinstance(facts, dict):
        for key in ("gpus", "nvidia_gpus", "gpusplit_gpus"):
            if isinstance(facts.get(key), (list, tuple)):
                return list(facts[key])
    return list(facts or [])


def _located(host, entry, gpu):
    minor = gpu.get("minor_number")
    health = gpu.get("health") or {}
    return {
        "host": str(host),
        "node": str(entry.get("node_name") or host),
        "mode": entry.get("mode") or "none",
        "uuid": gpu.get("uuid"),
        "minor_number": minor,
        "device": device_name(minor) if minor is not None else None,
        "pci_bus_id": gpu.get("pci_bus_id"),
        "name": gpu.get("name"),
        "health": health.get("status") or "ok",
        "reasons": list(health.get("reasons") or []),
        "mig_enabled": str((gpu.get("mig_mode") or {}).get("current") or "").lower() == "enabled",
    }


def locate_gpu(fleet_input, uuid):
    """Which host, node, mode and DRA device a GPU UUID is. ``fleet_input``: the planner's input.

    Returns {host, node, mode, uuid, minor_number, device, pci_bus_id, name, health, reasons,
    mig_enabled}; refuses an unknown UUID (naming the hosts searched), a MIG UUID, or a UUID found
    on two hosts.
    """
    want = norm_uuid(uuid)
    if not want.startswith("gpu-"):
        hint = " (a MIG device: isolate its parent GPU)" if want.startswith("mig-") else ""
        raise DraError(f"{uuid!r} is not a GPU UUID (GPU-...){hint}")
    found = []
    for host in sorted(fleet_input or {}, key=str):
        entry = fleet_input[host] or {}
        for gpu in _facts_list(entry.get("facts")):
            if isinstance(gpu, dict) and norm_uuid(gpu.get("uuid")) == want:
                found.append(_located(host, entry, gpu))
    if not found:
        hosts = ", ".join(sorted(str(h) for h in fleet_input or {})) or "none"
        raise DraError(f"GPU {uuid} is not on any host of the play (searched: {hosts})")
    if len(found) > 1:
        raise DraError(
            f"GPU {uuid} is reported by several hosts: {', '.join(f['host'] for f in found)} "
            "(a UUID is unique per GPU: are two hosts the same machine? limit the search with -e gpusplit_hosts=<host>)"
        )
    return found[0]


def isolation_findings(gpu):
    """What in one GPU's facts calls for isolating it: lost, uncorrected ECC errors, failed row remapping.

    Pending row remapping or page retirement alone is not a reason (a reset repairs the GPU);
    neither is a corrected error. Returns a list of reasons, empty for a GPU to leave alone.
    """
    health = gpu.get("health") or {}
    if health.get("status") == "lost":
        return list(health.get("reasons") or []) or ["lost"]
    findings = []
    volatile = (gpu.get("ecc") or {}).get("uncorrected_volatile")
    if isinstance(volatile, int) and not isinstance(volatile, bool) and volatile > 0:
        findings.append(f"{volatile} uncorrected ECC error(s) since the driver loaded")
    if (gpu.get("remapped_rows") or {}).get("failure"):
        findings.append("row remapping failed: the GPU cannot repair its memory any more")
    return findings


def unhealthy_gpus(fleet_input):
    """Every GPU of the play that its facts say should leave Kubernetes (see isolation_findings).

    Sorted by host and PCI bus id; each entry is shaped like locate_gpu's answer, with ``why``
    (the findings). A GPU in mode none is listed too; the playbook says there is nothing to do.
    """
    found = []
    for host in sorted(fleet_input or {}, key=str):
        entry = fleet_input[host] or {}
        for gpu in _facts_list(entry.get("facts")):
            if not isinstance(gpu, dict) or not gpu.get("uuid"):
                continue
            why = isolation_findings(gpu)
            if why:
                found.append({**_located(host, entry, gpu), "why": why})
    return sorted(found, key=lambda g: (g["host"], str(g.get("pci_bus_id") or "")))


def isolation_targets(fleet_input, uuid=None, unhealthy=False):
    """The GPUs one isolate_gpu run acts on: the one named by ``uuid``, or every unhealthy one.

    Exactly one of the two must be asked for; a UUID is located (refusing unknown or MIG UUIDs).
    """
    if bool(uuid) == bool(unhealthy):
        raise DraError(
            "name one GPU with -e gpusplit_isolate_uuid=GPU-... or ask for every unhealthy GPU with "
            "-e gpusplit_isolate_unhealthy=true (one of the two, not both)"
        )
    if uuid:
        located = locate_gpu(fleet_input, uuid)
        return [{**located, "why": [f"named by gpusplit_isolate_uuid (health {located['health']})"]}]
    return unhealthy_gpus(fleet_input)


def isolate_facts(facts, uuid, reason=None):
    """A copy of the GPU facts with GPU ``uuid`` (or each of a list) marked lost, so that the planner excludes it.

    The planner has no option to leave one GPU out; a lost GPU is never usable, whatever the
    split says (a split that names it explicitly for Kubernetes is refused, with the planner's
    message). Only the copy is changed.
    """
    wanted = {norm_uuid(u) for u in (uuid if isinstance(uuid, (list, tuple)) else [uuid])}
    out = copy.deepcopy(facts)
    gpus = out
    if isinstance(out, dict):
        gpus = next(
            (out[k] for k in ("gpus", "nvidia_gpus", "gpusplit_gpus") if isinstance(out.get(k), list)), []
        )
    hit = set()
    for gpu in gpus or []:
        if isinstance(gpu, dict) and norm_uuid(gpu.get("uuid")) in wanted:
            health = dict(gpu.get("health") or {})
            reasons = [
                f"isolated by isolate_gpu.yml ({reason or 'isolated'})",
                *(health.get("reasons") or []),
            ]
            gpu["health"] = {"status": "lost", "reasons": reasons}
            hit.add(norm_uuid(gpu.get("uuid")))
    if wanted - hit:
        raise DraError(f"GPU {', '.join(sorted(wanted - hit))} is not in these facts")
    return out


def isolation_fleet_input(fleet_input, host, uuid, reason=None):
    """The planner input of ``host`` alone, with GPU ``uuid`` (or each of a list) isolated (see isolate_facts)."""
    if host not in (fleet_input or {}):
        raise DraError(f"host {host!r} is not in the planner input")
    entry = dict(fleet_input[host])
    entry["facts"] = isolate_facts(entry.get("facts"), uuid, reason)
    return {host: entry}
