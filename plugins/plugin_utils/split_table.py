# Copyright: gpusplit contributors
# Apache-2.0
"""The fleet table: one fixed-width line per node plan. Private to the collection."""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import (
    SHARE_EXCLUDED,
    SHARE_HOST,
    SHARE_KUBERNETES,
    node_plans,
)


def short_pci(canonical):
    """``00000000:17:00.0`` -> ``17:00.0`` (the domain stays when it is not 0)."""
    if canonical.startswith("00000000:"):
        return canonical[9:]
    return canonical


def _share_cell(plan, share):
    buses = [
        short_pci(g["pci_bus_id"]) if g["pci_bus_id"] else "?" for g in plan["gpus"] if g["share"] == share
    ]
    if not buses:
        return "0"
    return f"{len(buses)} ({' '.join(buses)})"


def fleet_table(plan):
    """A fixed-width table: node, mode, host GPUs, Kubernetes GPUs, excluded (count and bus ids)."""
    nodes = node_plans(plan)
    header = ("NODE", "MODE", "HOST GPUS", "KUBERNETES GPUS", "EXCLUDED")
    rows = []
    totals = [0, 0, 0]
    for p in nodes:
        name = p["node"] if p["node"] == p["host"] else f"{p['node']} ({p['host']})"
        rows.append(
            (
                name,
                p["mode"],
                _share_cell(p, SHARE_HOST),
                _share_cell(p, SHARE_KUBERNETES),
                _share_cell(p, SHARE_EXCLUDED),
            )
        )
        totals[0] += p["host_count"]
        totals[1] += p["kubernetes_count"]
        totals[2] += p["excluded_count"]
    footer = (f"TOTAL {len(nodes)} node(s)", "", *(str(t) for t in totals))
    widths = [max(len(r[i]) for r in (header, footer, *rows)) for i in range(len(header))]

    def line(cells):
        return "  ".join(c.ljust(widths[i]) for i, c in enumerate(cells)).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), sep, *(line(r) for r in rows), sep, line(footer)])
