# Copyright: gpusplit contributors
# Apache-2.0
"""Node names and GPU UUIDs checked across a fleet plan: one machine, one inventory host. Private to the collection.

A GPU's UUID is its own (NVML reads it from the board), so two inventory hosts that report one UUID are one
machine under two names (``gpu1`` and ``gpu1.example.com``), or hosts whose GPU facts were copied from
another. Planned twice, each name would get its own, contradicting plan for the same GPUs.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.ids import normalize_uuid


def shared_node_names(nodes):
    """One refusal per Kubernetes node name that more than one host of ``nodes`` ({host: node plan}) plans."""
    owners = {}
    for host, plan in nodes.items():
        owners.setdefault(plan["node"], []).append(host)
    return [
        f"{hosts[0]}: node name {node!r} is also used by {', '.join(hosts[1:])}"
        for node, hosts in sorted(owners.items())
        if len(hosts) > 1
    ]


def shared_gpu_problems(nodes):
    """One refusal per group of hosts that report the same GPU UUIDs in ``nodes`` ({host: node plan}), naming
    the hosts and the UUIDs (the first few of each)."""
    hosts_of = {}
    for host, plan in nodes.items():
        for gpu in plan.get("gpus") or []:
            uuid = normalize_uuid(gpu.get("uuid")) if isinstance(gpu, dict) else None
            if uuid:
                hosts_of.setdefault(uuid, set()).add(host)
    shared = {}
    for uuid, hosts in hosts_of.items():
        if len(hosts) > 1:
            shared.setdefault(tuple(sorted(hosts)), []).append(uuid)
    problems = []
    for hosts, uuids in sorted(shared.items()):
        problems.append(
            f"{hosts[0]}: GPU {_some(sorted(uuids))} {'is' if len(uuids) == 1 else 'are'} also reported by "
            f"{_some(hosts[1:])}: one machine in the inventory under two names (or GPU facts copied from "
            "another host); a GPU UUID belongs to one machine, so keep one of these hosts"
        )
    return problems


def _some(names, shown=3):
    """``a, b, c and 4 more``."""
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")
