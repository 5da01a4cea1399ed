# Copyright: gpusplit contributors
# Apache-2.0
"""Draw the fleet as one SVG: one row per node, one cell per GPU, coloured by share.

Up to ``detail_limit`` nodes (default 40) every node gets its row. A bigger fleet is drawn
compact, so that the picture of 1,000 or 10,000 nodes stays readable and small: a summary of
verdicts by mode, then a detailed row for each node that is not OK (problems first: FAIL, DRIFT,
any other verdict, not verified; at most ``problem_rows`` of them, the rest counted), then the OK
nodes as one small square each, grouped by mode (one <path> per group, no per-node markup).

Inputs are the fleet report (_split/verify.py verify_fleet: per node name, host, mode, host_gpus,
kubernetes_gpus, excluded_gpus, allocatable, verdict, reasons) and the fleet plan
(_split/planner.py plan_fleet: nodes{host: {node, gpus: [{uuid, pci_bus_id, index, name, share, health}]}}).
Every GPU cell carries a <title> tooltip (UUID, PCI bus id, name, health, share); every row a
<title> with the node's verdict and reasons. Pure: returns the SVG text, deterministic (no
clock), so that the picture of an unchanged fleet is byte-for-byte the same.
"""

from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

from ansible_collections.gpusplit.k8s.plugins.module_utils._split.gc_pause import gc_paused

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


# Problem nodes first: the order of verdicts in the compact picture.
VERDICT_ORDER = {"FAIL": 0, "DRIFT": 1}
SQUARE, SQUARE_GAP, SQUARES_PER_LINE = 8, 2, 100


def _mode_of(entry, node_plan):
    return entry.get("mode") or node_plan.get("mode") or "unknown"


def _problem_key(row):
    entry, node_plan, _unused = row
    verdict = entry.get("verdict")
    rank = VERDICT_ORDER.get(verdict, 2 if verdict else 3)
    return (rank, str(entry.get("name") or node_plan.get("node") or ""))


@gc_paused
def render_fleet_svg(report, plan, title="gpusplit fleet", detail_limit=40, problem_rows=200):
    """The SVG document (str) for the fleet report and plan.

    At most ``detail_limit`` nodes get one row each; a bigger fleet is drawn compact (module doc).
    """
    pairs = _rows(report, plan)
    if len(pairs) > detail_limit:
        return _compact_svg(pairs, title, problem_rows)
    rows = [(entry, plan_, _cells(entry, plan_)) for entry, plan_ in pairs]
    widest = max([len(c) for _unused, _unused2, c in rows] + [8])
    width = max(LABEL_W + widest * (CELL + GAP) + PAD * 2, _legend_width() + PAD)
    height = TOP + max(1, len(rows)) * ROW + PAD
    out = _head(len(rows), _totals(rows), width, height, title)
    if not rows:
        out.append(
            f"<text x='{PAD}' y='{TOP + 20}' {FONT} font-size='13' fill='#52606d'>no nodes in the report</text>"
        )
    for i, (entry, node_plan, cells) in enumerate(rows):
        out.extend(_node_row(entry, node_plan, cells, TOP + i * ROW, width, i % 2 == 0))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _legend_width():
    return PAD + sum(28 + len(SHARES[s][1]) * 7 for s in ("kubernetes", "host", "excluded"))


def _totals(rows):
    """{share: GPU count} over rows of (entry, node plan, cells)."""
    totals = {s: 0 for s in SHARES}
    for _unused, _unused2, cells in rows:
        for share, _unused in cells:
            totals[share] += 1
    return totals


def _head(node_count, totals, width, height, title):
    """The document's opening, title, GPU totals and legend (list of str)."""
    out = [
        "<?xml version='1.0' encoding='UTF-8'?>",
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' role='img' aria-label={_a(title)}>",
        f"<title>{_e(title)}</title>",
        f"<rect x='0' y='0' width='{width}' height='{height}' fill='#ffffff'/>",
        f"<text x='{PAD}' y='28' {FONT} font-size='18' font-weight='bold' fill='#1f2933'>{_e(title)}</text>",
        f"<text x='{PAD}' y='48' {FONT} font-size='12' fill='#52606d'>"
        f"{node_count} node(s), {sum(totals.values())} GPU(s): {totals['kubernetes']} Kubernetes, "
        f"{totals['host']} host, {totals['excluded']} excluded</text>",
    ]
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
    return out


def _text(x, y, text, size=12, weight="normal", fill="#1f2933", css=None):
    cls = f" class='{css}'" if css else ""
    return f"<text{cls} x='{x}' y='{y}' {FONT} font-size='{size}' font-weight='{weight}' fill='{fill}'>{_e(text)}</text>"


def _compact_svg(pairs, title, problem_rows):
    """A big fleet: verdicts by mode, a row per problem node, one square per OK node.

    GPU cells are built only for the rows drawn; the totals count every node's GPUs."""
    ok = [(e, p, None) for e, p in pairs if e.get("verdict") == "OK"]
    problems = sorted(((e, p, None) for e, p in pairs if e.get("verdict") != "OK"), key=_problem_key)
    drawn = [(e, p, _cells(e, p)) for e, p, _unused in problems[: max(0, problem_rows)]]
    totals = _totals(drawn)
    for entry, node_plan, _unused in problems[len(drawn) :] + ok:
        for share, _unused in _cells(entry, node_plan):
            totals[share] += 1
    by_mode = {}
    for entry, node_plan in pairs:
        counts = by_mode.setdefault(_mode_of(entry, node_plan), {})
        verdict = entry.get("verdict") or "not verified"
        counts[verdict] = counts.get(verdict, 0) + 1
    ok_by_mode = {}
    for entry, node_plan, _unused in ok:
        ok_by_mode.setdefault(_mode_of(entry, node_plan), []).append(entry)

    widest = max([len(c) for _unused, _unused2, c in drawn] + [8])
    grid_w = PAD * 2 + SQUARES_PER_LINE * (SQUARE + SQUARE_GAP)
    width = max(LABEL_W + widest * (CELL + GAP) + PAD * 2, grid_w, _legend_width() + PAD)
    line = 18
    grid_lines = sum(-(-len(v) // SQUARES_PER_LINE) for v in ok_by_mode.values())
    height = (
        TOP
        + line * (len(by_mode) + 1)
        + line * 2
        + ROW * len(drawn)
        + (line if len(problems) > len(drawn) else 0)
        + line * 2
        + (line + 4) * len(ok_by_mode)
        + grid_lines * (SQUARE + SQUARE_GAP)
        + PAD
    )
    out = _head(len(pairs), totals, width, height, title)
    y = TOP
    out.append("<g class='summary'>")
    out.append(_text(PAD, y, "Verdicts by mode", 13, "bold"))
    for mode in sorted(by_mode):
        y += line
        counts = by_mode[mode]
        order = sorted(counts, key=lambda v: (VERDICT_ORDER.get(v, 2 if v != "not verified" else 3), v))
        order = [v for v in order if v != "OK"] + (["OK"] if "OK" in counts else [])
        parts = ", ".join(f"{counts[v]} {v}" for v in order)
        out.append(_text(PAD, y, f"mode {mode}: {sum(counts.values())} node(s): {parts}", 12))
    out.append("</g>")
    y += line * 2
    out.append(_text(PAD, y - 4, f"Needs attention: {len(problems)} node(s)", 13, "bold", css="problems"))
    y += 8
    for i, (entry, node_plan, cells) in enumerate(drawn):
        out.extend(_node_row(entry, node_plan, cells, y + i * ROW, width, i % 2 == 0))
    y += ROW * len(drawn)
    if len(problems) > len(drawn):
        out.append(
            _text(
                PAD,
                y + 12,
                f"+{len(problems) - len(drawn)} more node(s) not OK, not drawn: see the fleet report",
                12,
                fill="#c23b3b",
                css="more",
            )
        )
        y += line
    y += line * 2
    out.append(_text(PAD, y - 4, f"OK: {len(ok)} node(s), one square each, by mode", 13, "bold"))
    colour = VERDICT_COLOURS["OK"]
    for mode in sorted(ok_by_mode):
        entries = ok_by_mode[mode]
        y += line + 4
        out.append(f"<g class='ok-group' data-mode={_a(mode)} data-nodes='{len(entries)}'>")
        out.append(f"<title>{_e(f'mode {mode}: {len(entries)} node(s) OK')}</title>")
        out.append(_text(PAD, y - 6, f"mode {mode}: {len(entries)}", 12))
        steps = []
        for k in range(len(entries)):
            col, row = k % SQUARES_PER_LINE, k // SQUARES_PER_LINE
            steps.append(
                f"M{PAD + col * (SQUARE + SQUARE_GAP)} {y + row * (SQUARE + SQUARE_GAP)}h{SQUARE}v{SQUARE}h-{SQUARE}z"
            )
        out.append(f"<path fill='{colour}' d='{''.join(steps)}'/>")
        out.append("</g>")
        y += -(-len(entries) // SQUARES_PER_LINE) * (SQUARE + SQUARE_GAP)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _node_row(entry, node_plan, cells, y, width, shaded):
    """The markup (list of str) of one node's row at height ``y``."""
    out = []
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
    if shaded:
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
        out.append(f"<text x='{LABEL_W}' y='{y + 20}' {FONT} font-size='12' fill='#52606d'>no GPUs</text>")
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
    return out
