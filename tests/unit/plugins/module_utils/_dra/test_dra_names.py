"""DRA names (plugins/module_utils/_dra/names.py): device and rule names, the DRA nodes of a plan."""

from __future__ import annotations

import re

import pytest
import yaml

from ansible_collections.gpusplit.k8s.plugins.module_utils._dra.names import (
    PLAN_RULES_SELECTOR,
    DraError,
    device_name,
    dra_node_plans,
    taint_rule_name,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._split import modes
from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._dra.dra_testdata import ROOT, dra_fleet


def test_the_roles_prune_selector_is_the_plans():
    role_vars = yaml.safe_load((ROOT / "roles" / "dra_split" / "vars" / "main.yml").read_text())
    assert role_vars["dra_split_prune_selector"] == PLAN_RULES_SELECTOR
    assert "gpusplit-isolate" not in PLAN_RULES_SELECTOR  # isolation rules are never pruned


def test_device_name_is_the_minor_number():
    assert device_name(3) == "gpu-3"
    assert device_name("7") == "gpu-7"
    for bad in (None, -1, "x", True, 1.5):
        with pytest.raises(DraError):
            device_name(bad)


def test_rule_names_are_deterministic_dns_labels_and_distinct():
    assert taint_rule_name("host", "gpu-a", "gpu-1") == "gpusplit-host-gpu-a-gpu-1"
    assert taint_rule_name("excluded", "gpu-a", "gpu-1") == "gpusplit-excluded-gpu-a-gpu-1"
    assert taint_rule_name("isolate", "gpu-a", "gpu-1") == "gpusplit-isolate-gpu-a-gpu-1"
    long_a = "node-" + "a" * 70 + ".dc1.example.com"
    long_b = "node-" + "a" * 70 + ".dc2.example.com"
    names = {taint_rule_name("host", n, "gpu-0") for n in (long_a, long_b, "Gpu-A", "gpu-a")}
    assert len(names) == 4
    for name in names:
        assert len(name) <= 63 and re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", name)
    assert taint_rule_name("host", long_a, "gpu-0") == taint_rule_name("host", long_a, "gpu-0")
    with pytest.raises(DraError):
        taint_rule_name("other", "n", "gpu-0")


def test_dra_node_plans_are_the_nodes_whose_mode_shares_by_dra(monkeypatch):
    plan = dra_fleet()
    assert [p["host"] for p in dra_node_plans(plan)] == ["gpu-a", "gpu-c"]
    # the mode table decides, not the mode's name: a throwaway mode that shares by DRA is one too
    extra = modes.MODES["dra"]._replace(name="dra_throwaway")
    monkeypatch.setitem(modes.MODES, extra.name, extra)
    node = {**plan["nodes"]["gpu-c"], "mode": extra.name}
    assert dra_node_plans([plan["nodes"]["gpu-b"], node]) == [node]


# issue 43: "²" passed str.isdigit() and int() then failed with Python's words; "٣" became gpu-3
@pytest.mark.parametrize("minor", ["²", "٣", "３", "-1", -1, True, 1.0, None])
def test_device_name_takes_ascii_digits_only(minor):
    with pytest.raises(DraError, match="is not a whole number >= 0"):
        device_name(minor)


def test_device_name_of_a_minor_number():
    assert device_name(3) == device_name("3") == device_name(" 3 ") == "gpu-3"
