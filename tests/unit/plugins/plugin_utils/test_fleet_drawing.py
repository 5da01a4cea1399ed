"""The fleet picture: one row per node, one cell per GPU, coloured by share, with tooltips."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from ansible_collections.gpusplit.k8s.plugins.filter.fleet_svg import fleet_svg as fleet_svg_filter
from ansible_collections.gpusplit.k8s.plugins.module_utils._split import verify
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_fleet
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import fleet_drawing as fleet_svg

NS = "{http://www.w3.org/2000/svg}"


def gpu(i, share, health="ok", name="NVIDIA H100 80GB HBM3", mig=False):
    return {
        "uuid": f"GPU-0000000{i}-aaaa-bbbb-cccc-00000000000{i}",
        "pci_bus_id": f"00000000:{0x18 + i * 0x11:02X}:00.0",
        "index": i,
        "name": name,
        "share": share,
        "health": health,
        "mig_enabled": mig,
        "mig_uuids": ["MIG-1", "MIG-2"] if mig else [],
    }


def small_fleet():
    plan = {
        "nodes": {
            "dgx-01": {
                "node": "dgx-01.example",
                "host": "dgx-01",
                "mode": "device_plugin",
                "gpus": [
                    gpu(0, "host"),
                    gpu(1, "kubernetes"),
                    gpu(2, "kubernetes"),
                    gpu(3, "excluded", "lost"),
                ],
                "excluded": [
                    {"uuid": gpu(3, "excluded")["uuid"], "reason": "health lost: NVML_ERROR_GPU_IS_LOST"}
                ],
            },
            "ws-01": {
                "node": "ws-01",
                "host": "ws-01",
                "mode": "none",
                "gpus": [gpu(0, "host", name="NVIDIA GeForce RTX 4090 & <friends>", mig=True)],
            },
            "cpu-01": {"node": "cpu-01", "host": "cpu-01", "mode": "none", "gpus": []},
        }
    }
    report = {
        "nodes": [
            {
                "name": "dgx-01.example",
                "host": "dgx-01",
                "mode": "device_plugin",
                "host_gpus": [gpu(0, "host")["uuid"]],
                "kubernetes_gpus": [gpu(1, "k")["uuid"], gpu(2, "k")["uuid"]],
                "excluded_gpus": [gpu(3, "x")["uuid"]],
                "expected_allocatable": 2,
                "allocatable": 3,
                "verdict": "FAIL",
                "reasons": ["node advertises 3 nvidia.com/gpu but the Kubernetes share is 2"],
            },
            {
                "name": "ws-01",
                "host": "ws-01",
                "mode": "none",
                "host_gpus": [gpu(0, "host")["uuid"]],
                "kubernetes_gpus": [],
                "excluded_gpus": [],
                "expected_allocatable": 0,
                "allocatable": 0,
                "verdict": "OK",
                "reasons": [],
            },
        ],
        "counts": {"OK": 1, "DRIFT": 0, "FAIL": 1},
    }
    return report, plan


def parse(svg):
    assert svg.startswith("<?xml version='1.0' encoding='UTF-8'?>\n")
    return ET.fromstring(svg.split("\n", 1)[1])


def groups(root, cls):
    return [g for g in root.iter(f"{NS}g") if cls in (g.get("class") or "").split()]


def test_rows_cells_colours_and_tooltips():
    report, plan = small_fleet()
    root = parse(fleet_svg.render_fleet_svg(report, plan))
    rows = groups(root, "node")
    assert [g.get("data-node") for g in rows] == ["dgx-01.example", "ws-01", "cpu-01"]
    cells = groups(root, "gpu")
    assert len(cells) == 5
    by_uuid = {g.get("data-uuid"): g for g in cells}
    colours = {share: fill for share, (fill, _) in fleet_svg.SHARES.items()}
    for uuid, share in (
        (gpu(0, "")["uuid"], "host"),
        (gpu(1, "")["uuid"], "kubernetes"),
        (gpu(3, "")["uuid"], "excluded"),
    ):
        g = by_uuid[uuid]
        assert f"gpu-{share}" in g.get("class")
        rect = g.find(f"{NS}rect")
        assert rect.get("fill") == colours[share]
    lost = by_uuid[gpu(3, "")["uuid"]].find(f"{NS}title").text
    assert lost.splitlines() == [
        "GPU 3: NVIDIA H100 80GB HBM3",
        f"UUID {gpu(3, '')['uuid']}",
        "PCI bus id 00000000:4B:00.0",
        "share: excluded",
        "health: lost",
        "excluded: health lost: NVML_ERROR_GPU_IS_LOST",
    ]
    # the row's tooltip carries the verdict and the reasons
    dgx_title = rows[0].find(f"{NS}title").text
    assert "verdict: FAIL" in dgx_title and "advertises 3 nvidia.com/gpu" in dgx_title
    # a node with no GPU says so; a node only in the plan is drawn too
    texts = [t.text for t in rows[2].iter(f"{NS}text")]
    assert "no GPUs" in texts


def test_legend_and_counts():
    report, plan = small_fleet()
    root = parse(fleet_svg.render_fleet_svg(report, plan, title="lab"))
    assert root.find(f"{NS}title").text == "lab"
    legend = groups(root, "legend")[0]
    assert [t.text for t in legend.iter(f"{NS}text")] == [
        "Kubernetes share (advertised to pods)",
        "host share (kept for the host's processes)",
        "excluded (unhealthy: lost or degraded)",
    ]
    summary = [t.text for t in root.iter(f"{NS}text") if t.text and "node(s)" in t.text][0]
    assert summary == "3 node(s), 5 GPU(s): 2 Kubernetes, 2 host, 1 excluded"


def test_text_is_escaped_and_output_deterministic():
    report, plan = small_fleet()
    svg = fleet_svg.render_fleet_svg(report, plan)
    assert "RTX 4090 &amp; &lt;friends&gt;" in svg
    assert svg == fleet_svg.render_fleet_svg(json.loads(json.dumps(report)), json.loads(json.dumps(plan)))
    assert "MIG enabled: 2 instance(s)" in svg


def test_uuid_only_in_the_report_still_gets_a_cell():
    report, plan = small_fleet()
    report["nodes"][1]["kubernetes_gpus"] = ["GPU-stray"]
    root = parse(fleet_svg.render_fleet_svg(report, plan))
    stray = [g for g in groups(root, "gpu") if g.get("data-uuid") == "GPU-stray"]
    assert len(stray) == 1 and "gpu-kubernetes" in stray[0].get("class")


def test_empty_fleet():
    root = parse(fleet_svg.render_fleet_svg({"nodes": []}, {"nodes": {}}))
    assert any(t.text == "no nodes in the report" for t in root.iter(f"{NS}text"))


def facts(host_no, n, unhealthy=()):
    """GPU facts as gpu_facts reports them (the planner's input)."""
    out = []
    for i in range(n):
        health = unhealthy[i] if i < len(unhealthy) and unhealthy[i] else "ok"
        out.append(
            {
                "uuid": f"GPU-{host_no:08x}-{i:04x}-4000-8000-{host_no * 16 + i:012x}",
                "index": i,
                "minor_number": i,
                "pci_bus_id": f"00000000:{0x18 + 0x10 * i:02X}:00.0",
                "name": "NVIDIA H100 80GB HBM3",
                "memory_total_mib": 81559,
                "mig_mode": {"current": "disabled", "pending": "disabled"},
                "mig_devices": [],
                "health": {"status": health, "reasons": [f"health {health}"] if health != "ok" else []},
                "processes": [],
            }
        )
    return out


def test_real_planner_and_verifier_output():
    """The fleet report and plan exactly as the planner and verify produce them."""
    plan = plan_fleet(
        {
            "dgx": {"facts": facts(1, 8), "mode": "device_plugin", "split": {"host_count": 2}},
            "lost": {
                "facts": facts(2, 4, unhealthy=(None, "degraded", "lost")),
                "mode": "device_plugin",
                "split": {"count": 1},
            },
        }
    )
    nodes = [
        {
            "metadata": {"name": p["node"]},
            "status": {"allocatable": {"nvidia.com/gpu": str(p["kubernetes_count"])}},
        }
        for p in plan["nodes"].values()
    ]
    report = verify.verify_fleet(plan, nodes, [], {})
    root = parse(fleet_svg_filter(report, plan))
    cells = groups(root, "gpu")
    assert len(cells) == 12
    shares = sorted(g.get("class").split()[1] for g in cells)
    assert shares == sorted(f"gpu-{g['share']}" for p in plan["nodes"].values() for g in p["gpus"])
    # dgx: 2 host + 6 Kubernetes; lost: 1 Kubernetes, 2 excluded, the healthy rest (1) host
    assert (shares.count("gpu-host"), shares.count("gpu-kubernetes"), shares.count("gpu-excluded")) == (
        3,
        7,
        2,
    )


def big_fleet(count, wrong_every=50):
    """``count`` nodes planned by the real planner, in three modes, and a fleet report of the
    shape verify writes: every ``wrong_every``-th node FAIL, the one after it DRIFT, the rest OK."""
    modes = ("device_plugin", "gpu_operator", "none")
    hosts = {
        f"gpu-{n:05d}": {"facts": facts(n + 10, 8), "mode": modes[n % 3], "split": {"host_count": 2}}
        for n in range(count)
    }
    plan = plan_fleet(hosts)
    entries = []
    for n, (host, p) in enumerate(plan["nodes"].items()):
        verdict = "FAIL" if n % wrong_every == 0 else "DRIFT" if n % wrong_every == 1 else "OK"
        entries.append(
            {
                "name": p["node"],
                "host": host,
                "mode": p["mode"],
                "expected_allocatable": p["kubernetes_count"],
                "allocatable": p["kubernetes_count"] + (verdict == "FAIL"),
                "verdict": verdict,
                "reasons": [] if verdict == "OK" else [f"{verdict.lower()} on purpose"],
            }
        )
    return {"nodes": entries}, plan


def test_a_big_fleet_is_drawn_compact_problems_first():
    report, plan = big_fleet(1000)
    svg = fleet_svg.render_fleet_svg(report, plan)
    root = parse(svg)
    verdicts = [e["verdict"] for e in report["nodes"]]
    not_ok = [e for e in report["nodes"] if e["verdict"] != "OK"]
    assert 0 < len(not_ok) < 1000
    # a row (with its GPU cells) only for the nodes that are not OK, the worst verdicts first
    rows = groups(root, "node")
    assert sorted(g.get("data-node") for g in rows) == sorted(e["name"] for e in not_ok)
    order = [next(e["verdict"] for e in not_ok if e["name"] == g.get("data-node")) for g in rows]
    assert order == sorted(order, key=lambda v: {"FAIL": 0, "DRIFT": 1}.get(v, 2))
    assert len(groups(root, "gpu")) == 8 * len(not_ok)
    # every OK node is one square in its mode's group: the counts add up, no per-node markup
    ok_groups = groups(root, "ok-group")
    assert sum(int(g.get("data-nodes")) for g in ok_groups) == verdicts.count("OK")
    for g in ok_groups:
        path = g.find(f"{NS}path")
        assert path.get("d").count("M") == int(g.get("data-nodes"))
    summary = " ".join(t.text for t in groups(root, "summary")[0].iter(f"{NS}text"))
    counts = {m: {v: 0 for v in ("FAIL", "DRIFT", "OK")} for m in ("device_plugin", "gpu_operator", "none")}
    for e in report["nodes"]:
        counts[e["mode"]][e["verdict"]] += 1
    for mode, c in counts.items():
        line = f"mode {mode}: {sum(c.values())} node(s): {c['FAIL']} FAIL, {c['DRIFT']} DRIFT, {c['OK']} OK"
        assert line in summary
    # small: well under the detailed picture's size per node
    detailed = fleet_svg.render_fleet_svg(report, plan, detail_limit=10_000)
    assert len(svg) * 4 < len(detailed)


def test_problem_rows_are_capped_and_the_rest_counted():
    report, plan = big_fleet(120, wrong_every=2)
    root = parse(fleet_svg.render_fleet_svg(report, plan, problem_rows=5))
    assert len(groups(root, "node")) == 5
    more = [t for t in root.iter(f"{NS}text") if t.get("class") == "more"]
    not_ok = sum(1 for e in report["nodes"] if e["verdict"] != "OK")
    assert [t.text for t in more] == [f"+{not_ok - 5} more node(s) not OK, not drawn: see the fleet report"]


def test_plan_without_report_big_fleet_lists_nodes_as_not_verified():
    _, plan = big_fleet(60)
    root = parse(fleet_svg.render_fleet_svg({}, plan, problem_rows=10))
    assert len(groups(root, "node")) == 10
    assert groups(root, "ok-group") == []
    summary = " ".join(t.text for t in groups(root, "summary")[0].iter(f"{NS}text"))
    assert "not verified" in summary
