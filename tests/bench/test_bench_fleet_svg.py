"""The fleet picture at fleet size: time and size of out/fleet.svg at 1k and 10k nodes.

    make bench        # timings (pytest-benchmark) and the sizes, printed

Measurements only: nothing here asserts on wall-clock time.
"""

from __future__ import annotations

import pytest
from fleetgen import synthetic_fleet  # noqa: E402

from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_fleet
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.fleet_drawing import render_fleet_svg


def report_for(plan):
    """A fleet report of verify's shape: one node in 100 FAIL, one in 100 DRIFT, the rest OK."""
    entries = []
    for n, (host, p) in enumerate(plan["nodes"].items()):
        verdict = ("FAIL", "DRIFT")[n % 2] if n % 100 < 2 else "OK"
        entries.append(
            {
                "name": p["node"],
                "host": host,
                "mode": p["mode"],
                "expected_allocatable": p["kubernetes_count"],
                "allocatable": p["kubernetes_count"],
                "verdict": verdict,
                "reasons": [] if verdict == "OK" else [f"{verdict} (synthetic)"],
            }
        )
    return {"nodes": entries}


@pytest.mark.parametrize("nodes", [1_000, 10_000], ids=["1k", "10k"])
def test_bench_fleet_svg(benchmark, nodes):
    plan = plan_fleet(synthetic_fleet(nodes))
    report = report_for(plan)
    svg = benchmark.pedantic(render_fleet_svg, args=(report, plan), rounds=3, iterations=1)
    print(f"\nfleet.svg at {nodes} nodes: {len(svg) / 1024:.0f} KiB ({len(svg) / nodes:.0f} bytes per node)")
    assert svg.count("class='node'") == min(200, nodes // 50)
