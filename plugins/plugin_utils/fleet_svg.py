# Copyright: gpusplit contributors
# Apache-2.0
"""Draw the fleet as one SVG: one row per node, one cell per GPU, coloured by share.

Inputs are the fleet report (_split/verify.py verify_fleet: per node name, host, mode, host_gpus,
kubernetes_gpus, excluded_gpus, allocatable, verdict, reasons) and the fleet plan
(_split/planner.py plan_fleet: nodes{host: {node, gpus: [{uuid, pci_bus_id, index, name, share, health}]}}).
Every GPU cell carries a <title> tooltip (UUID, PCI bus id, name, health, share); every row a
<title> with the node's verdict and reasons. Pure: returns the SVG text, deterministic (no
clock), so that the picture of an unchanged fleet is byte-for-byte the same.
"""

from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

SHARES = {
    # share: (fill, legend text)
    "kubernetes": ("#2f7ed8", "Kubernetes share (advertised to pods)"),
    "host": ("#e3a21a", "host share (kept for the host's processes)"),
    "excluded": ("#c23b3b", "excluded (unhealthy: lost or degraded)"),
    "unknown": ("#9aa3ad", "not in the plan"),
}
VERDICT_COLOURS = {"OK": "#2e9d4f", "DRIFT": "#d98b0b", "FAIL": "#c23b3b"}
CELL, GAP, ROW, LABEL_W, TOP, PAD = 30, 6, 50, 330, 96, 16
FONT = "font-family='DejaVu Sans, Verdana, Arial, sans-serif'"


def _e(text):
    return escape(str(text))


def _a(text):
    return quoteattr(str(text))


def _plans_by_node(plan):
    by_host = dict((plan or {}).get("nodes") or {})
    by_node = {}
    for host, node_plan in by_host.items():
        by_node[(node_plan or {}).get("node") or host] = (host, node_plan or {})
    return by_host, by_node


def _cells(entry, node_plan):
    """[(share, gpu dict)] for one node: the plan's GPUs, plus any UUID only the report lists."""
    cells = []
    seen = set()
    excluded_reason = {e.get("uuid"): e.get("reason") for e in node_plan.get("excluded") or []}
    gpus = sorted(
        node_plan.get("gpus") or [], key=lambda g: (str(g.get("pci_bus_id") or ""), g.get("index") or 0)
    )
    for g in gpus:
        share = g.get("share") if g.get("share") in SHARES else "unknown"
        gpu = dict(g)
        if g.get("uuid") in excluded_reason:
            gpu["reason"] = excluded_reason[g["uuid"]]
        cells.append((share, gpu))
        seen.add(g.get("uuid"))
    for share, key in (
        ("kubernetes", "kubernetes_gpus"),
        ("host", "host_gpus"),
        ("excluded", "excluded_gpus"),
    ):
        for uuid in (entry or {}).get(key) or []:
            if uuid not in seen:
                cells.append((share, {"uuid": uuid}))
                seen.add(uuid)
    return cells


def _gpu_title(share, gpu):
    lines = [f"GPU {gpu.get('index', '?')}: {gpu.get('name') or 'unknown model'}"]
    lines.append(f"UUID {gpu.get('uuid')}")
    lines.append(f"PCI bus id {gpu.get('pci_bus_id') or '?'}")
    lines.append(f"share: {share}")
    lines.append(f"health: {gpu.get('health') or '?'}")
    if gpu.get("health_reasons"):
        lines.append("health reasons: " + "; ".join(str(r) for r in gpu["health_reasons"]))
    if gpu.get("reason"):
        lines.append(f"excluded: {gpu['reason']}")
    if gpu.get("mig_enabled"):
        lines.append(f"MIG enabled: {len(gpu.get('mig_uuids') or [])} instance(s)")
    return "\n".join(lines)


def _rows(report, plan):
    by_host, by_node = _plans_by_node(plan)
    rows, used = [], set()
    for entry in (report or {}).get("nodes") or []:
        host = entry.get("host")
        if host in by_host:
            node_plan = by_host[host]
        else:
            host, node_plan = by_node.get(entry.get("name"), (host, {}))
        used.add(host)
        rows.append((entry, node_plan or {}))
    for host in sorted(by_host):
        if host not in used:
            node_plan = by_host[host] or {}
            rows.append(
                (
                    {"name": node_plan.get("node") or host, "host": host, "mode": node_plan.get("mode")},
                    node_plan,
                )
            )
    return rows


def render_fleet_svg(report, plan, title="gpusplit fleet"):
    """The SVG document (str) for the fleet report and plan."""
    rows = [(entry, plan_, _cells(entry, plan_)) for entry, plan_ in _rows(report, plan)]
    widest = max([len(c) for _, _, c in rows] + [8])
    legend_w = PAD + sum(28 + len(SHARES[s][1]) * 7 for s in ("kubernetes", "host", "excluded"))
    width = max(LABEL_W + widest * (CELL + GAP) + PAD * 2, legend_w + PAD)
    height = TOP + max(1, len(rows)) * ROW + PAD
    totals = {s: 0 for s in SHARES}
    for _, _, cells in rows:
        for share, _ in cells:
            totals[share] += 1
    out = [
        "<?xml version='1.0' encoding='UTF-8'?>",
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' role='img' aria-label={_a(title)}>",
        f"<title>{_e(title)}</title>",
        f"<rect x='0' y='0' width='{width}' height='{height}' fill='#ffffff'/>",
        f"<text x='{PAD}' y='28' {FONT} font-size='18' font-weight='bold' fill='#1f2933'>{_e(title)}</text>",
        f"<text x='{PAD}' y='48' {FONT} font-size='12' fill='#52606d'>"
        f"{len(rows)} node(s), {sum(totals.values())} GPU(s): {totals['kubernetes']} Kubernetes, "
        f"{totals['host']} host, {totals['excluded']} excluded</text>",
    ]
    # legend
    x = PAD
    out.append("<g class='legend'>")
    for share in ("kubernetes", "host", "excluded"):
        fill, text = SHARES[share]
        out.append(
            f"<rect class='legend-{share}' x='{x}' y='62' width='14' height='14' rx='3' fill='{fill}'/>"
            f"<text x='{x + 20}' y='74' {FONT} font-size='12' fill='#1f2933'>{_e(text)}</text>"
        )
        x += 28 + len(text) * 7
    out.append("</g>")
    if not rows:
        out.append(
            f"<text x='{PAD}' y='{TOP + 20}' {FONT} font-size='13' fill='#52606d'>no nodes in the report</text>"
        )
    for i, (entry, node_plan, cells) in enumerate(rows):
        y = TOP + i * ROW
        verdict = entry.get("verdict")
        name = entry.get("name") or node_plan.get("node") or "?"
        alloc = entry.get("allocatable")
        expected = entry.get("expected_allocatable")
        detail = [f"mode {entry.get('mode') or node_plan.get('mode') or '?'}"]
        if alloc is not None or expected is not None:
            detail.append(
                f"allocatable {'-' if alloc is None else alloc}/{'-' if expected is None else expected}"
            )
        row_title = [
            f"node {name}" + (f" (host {entry.get('host')})" if entry.get("host") not in (None, name) else "")
        ]
        row_title.append(f"verdict: {verdict or 'not verified'}")
        row_title.extend(f"- {r}" for r in entry.get("reasons") or [])
        out.append(f"<g class='node' data-node={_a(name)}>")
        out.append(f"<title>{_e(chr(10).join(row_title))}</title>")
        if i % 2 == 0:
            out.append(f"<rect x='0' y='{y - 4}' width='{width}' height='{ROW}' fill='#f5f7fa'/>")
        out.append(
            f"<text x='{PAD}' y='{y + 14}' {FONT} font-size='13' font-weight='bold' fill='#1f2933'>{_e(name)}</text>"
        )
        out.append(
            f"<text x='{PAD}' y='{y + 32}' {FONT} font-size='11' fill='#52606d'>{_e(', '.join(detail))}</text>"
        )
        if verdict:
            colour = VERDICT_COLOURS.get(verdict, "#52606d")
            out.append(
                f"<rect class='verdict' x='{LABEL_W - 70}' y='{y + 4}' width='56' height='20' rx='10' fill='{colour}'/>"
                f"<text x='{LABEL_W - 42}' y='{y + 18}' {FONT} font-size='11' font-weight='bold' "
                f"fill='#ffffff' text-anchor='middle'>{_e(verdict)}</text>"
            )
        if not cells:
            out.append(
                f"<text x='{LABEL_W}' y='{y + 20}' {FONT} font-size='12' fill='#52606d'>no GPUs</text>"
            )
        for j, (share, gpu) in enumerate(cells):
            cx = LABEL_W + j * (CELL + GAP)
            fill = SHARES[share][0]
            unhealthy = (gpu.get("health") or "ok") != "ok"
            out.append(f"<g class='gpu gpu-{share}' data-uuid={_a(gpu.get('uuid'))}>")
            out.append(f"<title>{_e(_gpu_title(share, gpu))}</title>")
            out.append(
                f"<rect x='{cx}' y='{y}' width='{CELL}' height='{CELL}' rx='4' fill='{fill}' "
                f"stroke='{'#7a1010' if unhealthy else '#ffffff'}' stroke-width='{2 if unhealthy else 1}'/>"
            )
            if unhealthy:
                out.append(
                    f"<line x1='{cx + 4}' y1='{y + 4}' x2='{cx + CELL - 4}' y2='{y + CELL - 4}' "
                    f"stroke='#ffffff' stroke-width='2' stroke-opacity='0.45'/>"
                )
            label = "" if gpu.get("index") is None else str(gpu["index"])
            out.append(
                f"<text x='{cx + CELL / 2:g}' y='{y + 19}' {FONT} font-size='11' fill='#ffffff' "
                f"text-anchor='middle'>{_e(label)}</text>"
            )
            if gpu.get("mig_enabled"):
                out.append(
                    f"<text x='{cx + CELL / 2:g}' y='{y + CELL + 9}' {FONT} font-size='8' fill='#52606d' "
                    f"text-anchor='middle'>MIG</text>"
                )
            out.append("</g>")
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"
