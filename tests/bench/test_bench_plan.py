"""Plan + render at fleet scale: 10,000 nodes x 8 GPUs.

    make bench        # pytest tests/bench --benchmark-enable: timings, and the memory growth
                      # (tracemalloc at 1k/5k/10k nodes, printed)
    GPUSPLIT_BENCH_MEMORY=1 pytest tests/bench    # the memory test without the timings

Without --benchmark-enable (the default addopts) each benchmark runs once as a plain test and
the memory test (about 30 s under tracemalloc) is skipped. Measurements only: nothing here
asserts on wall-clock time.
"""

from __future__ import annotations

import gc
import os
import tracemalloc

import pytest
from fleetgen import GPUS_PER_NODE, synthetic_fleet  # noqa: E402

from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_fleet
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.split_render import render_fleet


def plan_and_render(hosts):
    plan = plan_fleet(hosts)
    return plan, render_fleet(plan, {"namespace": "gpusplit-system"})


@pytest.mark.parametrize("nodes", [1_000, 5_000, 10_000], ids=["1k", "5k", "10k"])
def test_bench_plan_and_render(benchmark, nodes):
    """Time at 1k, 5k and 10k nodes: the growth between them shows whether it stays linear."""
    hosts = synthetic_fleet(nodes)
    plan, objects = benchmark.pedantic(plan_and_render, args=(hosts,), rounds=3, iterations=1)
    assert plan["summary"]["nodes"] == nodes
    assert plan["summary"]["gpus"] == nodes * GPUS_PER_NODE
    daemonsets = [o for o in objects if o["kind"] == "DaemonSet"]
    # modes device_plugin/gpu_operator (3 of 5) with a non-empty Kubernetes share (every split here)
    assert len(daemonsets) == nodes * 3 // 5
    assert len({d["metadata"]["name"] for d in daemonsets}) == len(daemonsets)
    assert objects[0]["kind"] == "Namespace"


def test_bench_plan_and_render_10k_collector_running(benchmark):
    """The same 10k plan + render with the cyclic garbage collector left running (the steps unwrapped from
    gc_pause): against test_bench_plan_and_render[10k], what pausing the collector saves."""
    hosts = synthetic_fleet(10_000)

    def unpaused():
        plan = plan_fleet.__wrapped__(hosts)
        return plan, render_fleet.__wrapped__(plan, {"namespace": "gpusplit-system"})

    plan, objects = benchmark.pedantic(unpaused, rounds=3, iterations=1)
    assert plan["summary"]["nodes"] == 10_000 and objects


def test_bench_plan_only_10k_nodes(benchmark):
    hosts = synthetic_fleet(10_000)
    plan = benchmark.pedantic(plan_fleet, args=(hosts,), rounds=3, iterations=1)
    assert plan["summary"]["nodes"] == 10_000


def _peak_bytes(nodes):
    hosts = synthetic_fleet(nodes)
    gc.collect()
    tracemalloc.start()
    try:
        plan, objects = plan_and_render(hosts)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert plan["summary"]["nodes"] == nodes and objects
    return peak


def test_memory_growth_1k_5k_10k(request, capsys):
    if not (request.config.getoption("benchmark_enable", False) or os.environ.get("GPUSPLIT_BENCH_MEMORY")):
        pytest.skip("memory growth runs with --benchmark-enable (make bench) or GPUSPLIT_BENCH_MEMORY=1")
    sizes = (1_000, 5_000, 10_000)
    peaks = {n: _peak_bytes(n) for n in sizes}
    with capsys.disabled():
        print()
        for n in sizes:
            print(f"plan+render {n:>6} nodes x {GPUS_PER_NODE} GPUs: peak {peaks[n] / 2**20:8.1f} MiB traced")
        print(
            f"growth 1k->5k: x{peaks[5_000] / peaks[1_000]:.2f} (nodes x5), "
            f"5k->10k: x{peaks[10_000] / peaks[5_000]:.2f} (nodes x2), "
            f"1k->10k: x{peaks[10_000] / peaks[1_000]:.2f} (nodes x10)"
        )
    # linear, not quadratic: generous bound, independent of the machine's speed
    assert peaks[10_000] / peaks[1_000] < 20
