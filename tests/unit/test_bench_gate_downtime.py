"""tools/bench_gate_downtime.py's arithmetic: the windows /readyz failed, the part after the new process
started, and the table of releases side by side (the lab measurement itself: the tool, never in make test)."""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.tests.unit.tool_module import load_tool

BENCH = load_tool("bench_gate_downtime")


def probe_with(samples):
    probe = BENCH.Probe.__new__(BENCH.Probe)  # no lab: only the samples are read
    probe.samples = samples
    return probe


def test_failure_windows_end_at_the_first_answer_after_them():
    samples = [(0.0, True), (1.0, False), (1.5, False), (3.0, True), (4.0, False), (4.5, True), (5.0, False)]
    assert probe_with(samples).windows() == [(1.0, 3.0), (4.0, 4.5), (5.0, 5.0)]
    assert probe_with([(0.0, True), (1.0, True)]).windows() == []


def test_unavailable_adds_the_windows_and_measures_from_the_start_inside_one():
    got = BENCH.unavailable([(10.0, 22.0), (30.0, 30.5)], started_at=20.0)
    assert got == {"unavailable_s": 12.5, "start_to_ready_s": 2.0, "windows": 2}
    # the process started outside every window: no start->ready figure, rather than a wrong one
    assert BENCH.unavailable([(10.0, 12.0)], started_at=50.0)["start_to_ready_s"] is None
    assert BENCH.unavailable([], started_at=None) == {
        "unavailable_s": 0,
        "start_to_ready_s": None,
        "windows": 0,
    }


def run(roll, bare, roll_sr, bare_sr):
    return {
        "load1": 2.0,
        "rollout": {"unavailable_s": roll, "start_to_ready_s": roll_sr, "playbook_s": 50.0},
        "bare_restart": {"unavailable_s": bare, "start_to_ready_s": bare_sr},
    }


def test_the_table_orders_releases_and_gives_median_ratios():
    results = [
        {
            "release": "1.37.2",
            "runs": [run(12.0, 10.0, 3.0, 2.0), run(14.0, 10.0, 3.0, 3.0), run(13.0, 10.0, 3.0, 2.0)],
        },
        {"release": "1.35.4", "runs": [run(11.0, 11.0, 2.0, None)]},
    ]
    lines = BENCH.table(results).splitlines()
    assert lines[2].startswith("| 1.35.4 | 1 |") and lines[3].startswith("| 1.37.2 | 3 |")
    # 1.37.2: medians 13 against 10 -> 1.30, start->ready 3 against 2 -> 1.50
    assert "| 13.0 (12.0-14.0) | 10.0 (10.0-10.0) | 1.30 | 3.0 (3.0-3.0) | 2.0 (2.0-3.0) | 1.50 |" in lines[3]
    assert "| 2.0 (2.0-2.0) | - | - |" in lines[2]
