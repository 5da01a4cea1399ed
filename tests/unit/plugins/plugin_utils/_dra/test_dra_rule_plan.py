"""DeviceTaintRules (plugins/plugin_utils/_dra/rule_plan.py): what each rule says, gpusplit's rules of a GPU, the table."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._dra.names import DraError
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._dra.isolation import locate_gpu
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._dra.render import (
    host_share_rules,
    isolation_rule,
    render_taint_rule,
)
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._dra.rule_plan import (
    host_share_rule_contexts,
    rules_of_gpu,
    rules_table,
    taint_rule_context,
)
from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._dra.dra_testdata import (
    dra_fleet,
    fleet_input,
)


def test_rules_table():
    text = rules_table(host_share_rules(dra_fleet()))
    assert "gpu-a" in text and "gpusplit.io/host-share=reserved" in text and "3 DeviceTaintRule(s)" in text
    assert "no DeviceTaintRule" in rules_table([])


def test_rules_of_gpu_finds_ours_by_annotation():
    fi = fleet_input()
    located = locate_gpu(fi, fi["gpu-b"]["facts"][0]["uuid"])
    mine = isolation_rule(located, "None", "ecc")
    other_gpu = isolation_rule(locate_gpu(fi, fi["gpu-b"]["facts"][1]["uuid"]), "None")
    host_rule = render_taint_rule("host", "node-b.example.com", "gpu-7", uuid=located["uuid"])
    foreign = copy.deepcopy(mine)
    foreign["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "someone-else"
    foreign["metadata"]["name"] = "not-ours"
    rules = [mine, other_gpu, host_rule, foreign]
    assert rules_of_gpu(rules, located["uuid"].lower()) == [mine["metadata"]["name"]]
    assert rules_of_gpu(rules, located["uuid"], "host") == [host_rule["metadata"]["name"]]
    with pytest.raises(DraError, match="purpose"):
        rules_of_gpu(rules, located["uuid"], "bogus")


def test_taint_rule_context_is_what_the_template_renders():
    context = taint_rule_context("host", "gpu-a", "gpu-1", value="reserved", host="h", uuid="GPU-1")
    assert context["name"] == "gpusplit-host-gpu-a-gpu-1"
    assert context["labels"]["gpusplit.io/node"] == "gpu-a" and context["pool"] == "gpu-a"
    assert context["annotations"] == {"gpusplit.io/host": "h", "gpusplit.io/gpu-uuid": "GPU-1"}
    assert (context["key"], context["value"], context["effect"]) == (
        "gpusplit.io/host-share",
        "reserved",
        "NoSchedule",
    )
    rendered = render_taint_rule("host", "gpu-a", "gpu-1", value="reserved", host="h", uuid="GPU-1")
    assert rendered["metadata"]["name"] == context["name"]
    assert rendered["spec"]["taint"] == {"key": context["key"], "value": "reserved", "effect": "NoSchedule"}
    for bad in ({"effect": "PreferNoSchedule"}, {"purpose": "other"}):
        with pytest.raises(DraError):
            taint_rule_context(**{"purpose": "host", "node": "n", "device": "gpu-0", **bad})


def test_host_share_rule_contexts_are_the_rendered_rules():
    plan = dra_fleet()
    contexts = host_share_rule_contexts(plan)
    rules = host_share_rules(plan)
    assert [c["name"] for c in contexts] == [r["metadata"]["name"] for r in rules]
    assert [c["device"] for c in contexts] == [r["spec"]["deviceSelector"]["device"] for r in rules]
