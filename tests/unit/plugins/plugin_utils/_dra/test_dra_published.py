"""The published ResourceSlices against the plan (plugins/plugin_utils/_dra/published.py)."""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.plugin_utils._dra.published import check_published
from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._dra.dra_testdata import (
    dra_fleet,
    fixture,
    mig_fleet,
)
from lab.dra_driver import render_resource_slice


def published_for(plan, node="gpu-a", swap=False, generation=1):
    node_plan = plan["nodes"][node]
    facts = [
        {
            "uuid": g["uuid"],
            "minor_number": g["minor_number"],
            "name": g["name"],
            "pci_bus_id": g["pci_bus_id"],
        }
        for g in node_plan["gpus"]
    ]
    if swap:
        facts[0]["minor_number"], facts[1]["minor_number"] = (
            facts[1]["minor_number"],
            facts[0]["minor_number"],
        )
    return render_resource_slice(node_plan["node"], facts, generation)


def test_check_published_matches_and_warns_when_unpublished():
    plan = dra_fleet()
    result = check_published(plan, [published_for(plan)])
    assert result["ok"]
    assert any("gpu-c" in w and "not published" in w for w in result["warnings"])


def test_check_published_refuses_a_device_that_is_another_gpu():
    plan = dra_fleet()
    result = check_published(plan, [published_for(plan, swap=True)])
    assert not result["ok"]
    assert "would hit another GPU" in result["errors"][0]
    # an older pool generation is not looked at
    assert check_published(
        plan, [published_for(plan, swap=True, generation=1), published_for(plan, generation=2)]
    )["ok"]


def test_check_published_warns_while_a_reserved_mig_gpu_is_unpublished():
    doc = fixture("a100-mig")
    plan, _ = mig_fleet([doc["gpus"][0]["uuid"]])
    whole_only = [g for g in doc["gpus"] if g["mig_mode"]["current"] != "enabled"]
    early = render_resource_slice("node-m", whole_only, 1, doc.get("driver_version"))
    result = check_published(plan, [early])
    assert result["ok"]
    assert any("MIG enabled" in w and "publishes none of its MIG devices" in w for w in result["warnings"])
    full = render_resource_slice("node-m", doc["gpus"], 1, doc.get("driver_version"))
    result = check_published(plan, [full])
    assert result["ok"] and not any("MIG" in w for w in result["warnings"])
    [node] = result["nodes"]
    assert len(node["mig_devices"][doc["gpus"][0]["uuid"]]) == 2
