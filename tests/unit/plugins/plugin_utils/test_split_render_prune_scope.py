"""gpusplit_prune_scope: what a run may prune, release and untaint, by inventory (default) or by plan (AWX slices).

An AWX job slice gets an inventory of its own hosts only, so to the inventory scope the other
slices' nodes look like hosts removed from the inventory. With scope ``plan`` a run touches only
the nodes it planned. The selectors are checked here by a small evaluator of the label-selector
grammar they use (``k=v``, ``k in (...)``, ``k notin (...)``); the lab runs them against the real
apiserver (tests/integration/test_dist.py).
"""

from __future__ import annotations

import re

import pytest

from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.role_steps import StepContext, run_step
from ansible_collections.gpusplit.k8s.tests.unit.plugins.plugin_utils.test_split_render import (
    fleet,
    live_node,
)

BASE = "app.kubernetes.io/managed-by=gpusplit,app.kubernetes.io/name=gpusplit-device-plugin"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def matches(selector, labels):
    """Whether ``labels`` match a label selector made of ``k=v``, ``k in (..)``, ``k notin (..)`` parts."""
    for part in re.findall(r"[^,(]+(?:\([^)]*\))?", selector):
        part = part.strip()
        if m := re.fullmatch(r"(\S+) (in|notin) \(([^)]*)\)", part):
            key, op, values = m.group(1), m.group(2), set(m.group(3).split(","))
            inside = key in labels and labels[key] in values
            if inside != (op == "in"):
                return False
        else:
            key, value = part.split("=", 1)
            if labels.get(key) != value:
                return False
    return True


def owned(node):
    """The labels of a node's split DaemonSet (or host-share rule)."""
    return {
        "app.kubernetes.io/managed-by": "gpusplit",
        "app.kubernetes.io/name": "gpusplit-device-plugin",
        "gpusplit.io/node": render.label_value(node),
    }


PLANNED = ["a-dp", "b-dra", "c-op", "d-none", "e-zero"]
LONG = "rack-42-" + "x" * 70  # its label value is hashed: the selector must use the same value


def test_the_evaluator_reads_the_selectors_as_the_apiserver_does():
    assert matches(BASE, owned("x"))
    assert not matches(BASE, {"app.kubernetes.io/managed-by": "helm"})
    assert matches(f"{BASE},gpusplit.io/node in (a,b)", owned("a"))
    assert not matches(f"{BASE},gpusplit.io/node in (a,b)", owned("c"))
    assert not matches(f"{BASE},gpusplit.io/node notin (a,b)", owned("a"))
    assert matches("gpusplit.io/node notin (a)", {})  # notin matches objects without the label


def test_inventory_scope_prunes_departed_nodes_and_keeps_inventory_nodes_outside_the_run():
    out = render.prune_scope(BASE, fleet(), [*PLANNED, "gpu-other-slice"])
    assert out == {
        "selector": f"{BASE},gpusplit.io/node notin (gpu-other-slice)",
        "kept": ["gpu-other-slice"],
    }
    assert matches(out["selector"], owned("gpu-departed"))  # gone from the inventory: pruned
    assert not matches(out["selector"], owned("gpu-other-slice"))
    # an AWX slice's inventory lacks the other slice's hosts: they would be pruned
    assert matches(render.prune_scope(BASE, fleet(), PLANNED)["selector"], owned("gpu-other-slice"))


def test_plan_scope_prunes_only_planned_nodes():
    out = render.prune_scope(BASE, fleet(), PLANNED, "plan")
    assert out["kept"] == []
    assert out["selector"] == f"{BASE},gpusplit.io/node in (a-dp,b-dra,c-op,d-none,e-zero)"
    # a planned node that needs no DaemonSet any more (e-zero, d-none) is still pruned by the apply
    assert matches(out["selector"], owned("e-zero")) and matches(out["selector"], owned("d-none"))
    # nodes outside the plan: the other slice's and departed ones alike stay
    for other in ("gpu-other-slice", "gpu-departed"):
        assert not matches(out["selector"], owned(other))
    # inventory hosts outside the plan are still reported as kept
    assert render.prune_scope(BASE, fleet(), [*PLANNED, "gpu-x"], "plan")["kept"] == ["gpu-x"]


def test_plan_scope_with_a_long_node_name_uses_its_label_value():
    from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_fleet
    from ansible_collections.gpusplit.k8s.tests.unit.plugins.plugin_utils.test_split_render import gpu

    plan = plan_fleet({LONG: {"facts": [gpu(0)], "mode": "device_plugin", "split": {"count": 1}}})
    out = render.prune_scope(BASE, plan, [LONG], "plan")
    assert matches(out["selector"], owned(LONG)) and len(render.label_value(LONG)) <= 63


def test_plan_scope_with_an_empty_plan_prunes_nothing():
    empty = {"nodes": {}, "summary": {}, "warnings": []}
    assert render.prune_scope(BASE, empty, ["gpu-a"], "plan") == {
        "selector": None,
        "kept": ["gpu-a"],
    }
    # the inventory scope with nothing planned prunes what is not in the inventory, as before
    assert render.prune_scope(BASE, empty, ["gpu-a"])["selector"] == f"{BASE},gpusplit.io/node notin (gpu-a)"


def test_plan_scope_selector_at_thousands_of_nodes():
    """One planned value per node: about 64 characters each (label values are at most 63)."""
    from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_fleet
    from ansible_collections.gpusplit.k8s.tests.unit.plugins.plugin_utils.test_split_render import gpu

    names = [f"gpu-{i:05d}-" + "n" * 60 for i in range(2000)]
    plan = plan_fleet({n: {"facts": [gpu(0)], "mode": "device_plugin", "split": {"count": 1}} for n in names})
    out = render.prune_scope(BASE, plan, names, "plan")
    values = out["selector"].split(" in (", 1)[1].rstrip(")").split(",")
    assert len(values) == 2000 and all(len(v) <= 63 for v in values)
    assert len(out["selector"]) < 2000 * 64 + len(BASE) + 32
    assert matches(out["selector"], owned(names[1234])) and not matches(out["selector"], owned("gpu-else"))


def test_departed_nodes_by_scope():
    nodes = [
        {"metadata": {"name": "a-dp", "labels": {"gpusplit.io/split": "true"}}},
        {"metadata": {"name": "gpu-other-slice", "labels": {"gpusplit.io/split": "true"}}},
    ]
    assert render.departed_nodes(nodes, fleet(), PLANNED) == ["gpu-other-slice"]
    assert render.departed_nodes(nodes, fleet(), PLANNED, "inventory") == ["gpu-other-slice"]
    assert render.departed_nodes(nodes, fleet(), PLANNED, "plan") == []


def test_gpu_taint_removals_by_scope():
    nodes = [
        live_node("e-zero", [GPU_TAINT]),  # planned, its share dropped to 0: loses it in either scope
        live_node("a-dp", [GPU_TAINT]),  # planned and still gets it
        live_node("gpu-other-slice", [GPU_TAINT]),  # not in this slice's inventory
    ]
    assert render.gpu_taint_removals(nodes, fleet(), True, PLANNED) == ["e-zero", "gpu-other-slice"]
    assert render.gpu_taint_removals(nodes, fleet(), True, PLANNED, "plan") == ["e-zero"]
    assert render.gpu_taint_removals(nodes, fleet(), False, PLANNED, "plan") == ["a-dp", "e-zero"]


@pytest.mark.parametrize("scope", ["all", "", None, "Plan"])
def test_an_unknown_scope_is_refused_naming_the_variable(scope):
    for call in (
        lambda: render.prune_scope(BASE, fleet(), PLANNED, scope),
        lambda: render.departed_nodes([], fleet(), PLANNED, scope),
        lambda: render.gpu_taint_removals([], fleet(), True, PLANNED, scope),
    ):
        with pytest.raises(
            render.RenderError, match=r"gpusplit_prune_scope: .* is not one of inventory, plan"
        ):
            call()


def test_the_steps_pass_the_scope_on():
    hostvars = {n: {} for n in PLANNED}
    context = StepContext(hostvars=hostvars, groups={"all": list(PLANNED)})
    checks = run_step("split_cluster", {"plan": fleet(), "live": {}, "prune_scope": "plan"}, context)
    assert " in (" in checks["prune"]["selector"]
    assert run_step("split_cluster", {"plan": fleet(), "live": {}}, context)["prune"]["selector"] == BASE
    nodes = [{"metadata": {"name": "gone", "labels": {"gpusplit.io/split": "true"}}}]
    objects = run_step(
        "split_cluster", {"plan": fleet(), "live": {"labelled": nodes}, "prune_scope": "plan"}, context
    )
    assert objects["departed"] == []
    assert render.gpu_taint_removals([], fleet(), True, PLANNED, "plan") == []
    refused = run_step("split_cluster", {"plan": fleet(), "live": {}, "prune_scope": "slices"}, context)
    assert refused["failed"] and "gpusplit_prune_scope" in refused["msg"]


def test_a_selector_the_apiserver_would_refuse_is_refused_before_anything_is_sent():
    """kube-apiserver answers 431 over 1 MiB (on the lab: 15,000 values of 63 characters pass, 20,000 do not)."""
    from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_fleet
    from ansible_collections.gpusplit.k8s.tests.unit.plugins.plugin_utils.test_split_render import gpu

    planned = ["gpu-a"]
    plan = plan_fleet({"gpu-a": {"facts": [gpu(0)], "mode": "device_plugin", "split": {"count": 1}}})
    others = [f"gpu-{i:06d}-" + "n" * 52 for i in range(20000)]
    with pytest.raises(
        render.RenderError, match=r"names 20000 nodes \(\d+ bytes URL-encoded, scope inventory\)"
    ):
        render.prune_scope(BASE, plan, [*planned, *others])
    assert len(render.prune_scope(BASE, plan, [*planned, *others[:15000]])["kept"]) == 15000
