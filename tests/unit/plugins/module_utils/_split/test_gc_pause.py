"""The fleet-wide steps run with the cyclic garbage collector paused (module_utils/_split/gc_pause.py).

Measured by gc.callbacks: a collection that starts while a step runs is recorded. A control run of the
same step without the pause shows that the step allocates enough for the collector to run, so the
checks can fail.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import pkgutil
from pathlib import Path

import pytest

import ansible_collections.gpusplit.k8s.plugins.filter as filter_package
from ansible_collections.gpusplit.k8s.plugins.module_utils._split import planner, verify
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.gc_pause import gc_paused
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import fleet_drawing as fleet_svg
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import host_play
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render

FIXTURES = Path(__file__).resolve().parents[4] / "fixtures" / "gpus"


@contextlib.contextmanager
def collections_started():
    """The collections that start inside the block (their generations), with the youngest generation's threshold
    low (each Python version counts allocations its own way: 3.13 ran no collection in some control runs)."""
    started = []
    thresholds = gc.get_threshold()

    def record(phase, info):
        if phase == "start":
            started.append(info["generation"])

    was_enabled = gc.isenabled()
    gc.enable()
    gc.collect()
    gc.set_threshold(50, *thresholds[1:])
    gc.callbacks.append(record)
    try:
        yield started
    finally:
        gc.callbacks.remove(record)
        gc.set_threshold(*thresholds)
        if not was_enabled:
            gc.disable()


def fleet(n):
    facts = json.loads((FIXTURES / "dgx-h100.json").read_text())["gpus"]
    return {
        f"node-{i:04d}": {"facts": facts, "mode": "device_plugin", "split": {"host_count": 2}}
        for i in range(n)
    }


@pytest.fixture(scope="module")
def plan():
    return planner.plan_fleet(fleet(300))


def fleet_steps(plan):
    """(name, the step as a function of nothing); every fleet-wide entry point that gc_pause wraps."""
    facts = {
        p["host"]: [{"uuid": g["uuid"], "processes": []} for g in p["gpus"]] for p in plan["nodes"].values()
    }
    report = verify.verify_fleet(plan, [], [], facts)
    hostvars = {host: {} for host in plan["nodes"]}
    return [
        ("plan_fleet", planner.plan_fleet, lambda: (fleet(300),)),
        ("render_fleet", render.render_fleet, lambda: (plan,)),
        ("verify_inputs", verify.verify_inputs, lambda: (plan, facts)),
        ("verify_fleet", verify.verify_fleet, lambda: (plan, [], [], facts)),
        ("host_play_fleet", host_play.host_play_fleet, lambda: (plan, hostvars)),
        ("render_fleet_svg", fleet_svg.render_fleet_svg, lambda: (report, plan)),
    ]


def test_every_fleet_step_runs_without_a_collection(plan):
    for name, step, args in fleet_steps(plan):
        arguments = args()
        with collections_started() as unpaused:
            step.__wrapped__(*arguments)
        assert unpaused, f"{name}: the control run allocates too little for the collector to run"
        with collections_started() as paused:
            step(*arguments)
        assert paused == [], f"{name}: the collector ran {len(paused)} time(s) during the step"
        assert gc.isenabled(), f"{name}: the collector stays paused after the step"


def test_a_caller_that_paused_the_collector_keeps_it_paused(plan):
    gc.disable()
    try:
        render.render_fleet(plan)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_collector_is_back_after_a_refusal():
    with pytest.raises(planner.PlanError):
        planner.plan_fleet({"node-1": {"facts": None, "mode": "device_plugin"}})
    assert gc.isenabled()


def test_the_pause_returns_what_the_function_returns():
    @gc_paused
    def answer(a, b=2):
        assert not gc.isenabled()
        return a + b

    assert answer(1, b=3) == 4
    assert gc.isenabled()
    assert answer.gc_paused is True


def every_filter():
    for info in pkgutil.iter_modules(filter_package.__path__):
        module = importlib.import_module(f"{filter_package.__name__}.{info.name}")
        if hasattr(module, "FilterModule"):
            yield from sorted(module.FilterModule().filters().items())


def test_every_filter_runs_with_the_collector_paused():
    """Every filter of the collection goes through filter_errors.wrap, which pauses the collector."""
    found = dict(every_filter())
    assert len(found) >= 15
    unpaused = sorted(name for name, func in found.items() if getattr(func, "gc_paused", False) is not True)
    assert not unpaused, f"filters not built by plugin_utils/filter_errors.filters: {unpaused}"
