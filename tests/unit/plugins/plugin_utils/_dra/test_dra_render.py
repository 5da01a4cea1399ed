"""DRA mode's rendered objects (plugins/plugin_utils/_dra/render.py): DeviceTaintRules and claims (the lab's
DeviceClass and ResourceSlice: tests/unit/lab/test_dra_driver.py). Every rendered object is validated against
the Kubernetes 1.37 schemas."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._dra.names import (
    EFFECTS,
    PLAN_RULES_SELECTOR,
    DraError,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_node
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._dra.claims import (
    host_share_toleration,
    isolation_toleration,
)
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._dra.isolation import locate_gpu
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._dra.render import (
    diagnostic_claim,
    host_share_rules,
    isolation_rule,
    isolation_rules,
    render_claim,
)
from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._dra.dra_testdata import (
    dra_fleet,
    fixture,
    fleet_input,
    mig_fleet,
    validate,
)
from lab.dra_driver import render_resource_slice


def test_host_share_rules_taint_host_and_excluded_devices_by_minor():
    plan = dra_fleet()
    a = plan["nodes"]["gpu-a"]
    # host_count 2 keeps GPUs 0 and 1 (by bus id); their minors are 3 and 2
    assert a["dra_devices"] == ["gpu-3", "gpu-2"] and a["dra_excluded_devices"] == ["gpu-0"]
    rules = host_share_rules(plan)
    names = [r["metadata"]["name"] for r in rules]
    assert names == sorted(names)
    assert names == [
        "gpusplit-excluded-gpu-a-gpu-0",
        "gpusplit-host-gpu-a-gpu-2",
        "gpusplit-host-gpu-a-gpu-3",
    ]
    by_name = {r["metadata"]["name"]: r for r in rules}
    for rule in rules:
        validate(rule)
        assert rule["apiVersion"] == "resource.k8s.io/v1" and rule["kind"] == "DeviceTaintRule"
        assert rule["spec"]["taint"]["effect"] == "NoSchedule"
        assert "timeAdded" not in rule["spec"]["taint"]
        assert rule["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpusplit"
        assert rule["metadata"]["labels"]["app.kubernetes.io/name"] == "gpusplit-host-share"
        assert rule["metadata"]["labels"]["gpusplit.io/node"] == "gpu-a"
    host3 = by_name["gpusplit-host-gpu-a-gpu-3"]
    assert host3["spec"]["deviceSelector"] == {"driver": "gpu.nvidia.com", "pool": "gpu-a", "device": "gpu-3"}
    assert host3["spec"]["taint"] == {
        "key": "gpusplit.io/host-share",
        "value": "reserved",
        "effect": "NoSchedule",
    }
    assert host3["metadata"]["annotations"]["gpusplit.io/gpu-uuid"] == a["host_uuids"][0]
    assert host3["metadata"]["annotations"]["gpusplit.io/pci-bus-id"] == "00000000:18:00.0"
    excl = by_name["gpusplit-excluded-gpu-a-gpu-0"]
    assert excl["spec"]["taint"] == {
        "key": "gpusplit.io/excluded",
        "value": "degraded",
        "effect": "NoSchedule",
    }
    assert "row remapping failed" in excl["metadata"]["annotations"]["gpusplit.io/reason"]
    assert excl["metadata"]["labels"]["gpusplit.io/taint-purpose"] == "excluded"
    # the selector the role prunes with selects them all
    selector = dict(kv.split("=") for kv in PLAN_RULES_SELECTOR.split(","))
    assert all(selector.items() <= r["metadata"]["labels"].items() for r in rules)


def test_host_share_rules_ignore_other_modes_and_a_node_without_host_share():
    plan = dra_fleet()
    assert not [r for r in host_share_rules(plan) if r["spec"]["deviceSelector"]["pool"] != "gpu-a"]
    assert host_share_rules({"nodes": {"gpu-b": plan["nodes"]["gpu-b"]}}) == []


def test_host_share_rules_with_noexecute_and_refused_effects():
    plan = dra_fleet()
    assert {r["spec"]["taint"]["effect"] for r in host_share_rules(plan, "NoExecute")} == {"NoExecute"}
    with pytest.raises(DraError, match="PreferNoSchedule"):
        host_share_rules(plan, "PreferNoSchedule")


def test_host_share_rules_refuse_a_stale_plan():
    plan = copy.deepcopy(dra_fleet())
    plan["nodes"]["gpu-a"]["dra_devices"] = ["gpu-3"]
    with pytest.raises(DraError, match="re-run the planner"):
        host_share_rules(plan)


def test_host_share_rules_from_a_real_fixture_use_minor_not_index():
    ws = fixture("workstation")["gpus"]  # index 0 is minor 1 and the other way round
    plan = plan_node("ws", ws, "dra", {"host_count": 1})
    [rule] = host_share_rules(plan)
    host_gpu = next(g for g in ws if g["uuid"] == plan["host_uuids"][0])
    assert rule["spec"]["deviceSelector"]["device"] == f"gpu-{host_gpu['minor_number']}"
    assert host_gpu["minor_number"] != host_gpu["index"]


def test_isolation_rule_effects():
    located = {"host": "h", "node": "n", "uuid": "GPU-1", "minor_number": 5, "pci_bus_id": "00000000:18:00.0"}
    for effect in EFFECTS:
        rule = isolation_rule(located, effect, "ecc errors")
        validate(rule)
        assert rule["metadata"]["name"] == "gpusplit-isolate-n-gpu-5"
        assert rule["metadata"]["labels"]["app.kubernetes.io/name"] == "gpusplit-isolate"
        taint = rule["spec"]["taint"]
        assert taint["key"] == "gpusplit.io/unhealthy" and taint["effect"] == effect
        assert taint["value"].startswith("ecc-errors-")  # a label value: the blank is replaced, hashed
        assert rule["metadata"]["annotations"]["gpusplit.io/reason"] == "ecc errors"
    assert isolation_rule(located)["spec"]["taint"]["effect"] == "None"
    assert isolation_rule(located)["spec"]["taint"]["value"] == "isolated"
    with pytest.raises(DraError):
        isolation_rule(located, "Evict")
    with pytest.raises(DraError, match="no minor number"):
        isolation_rule({**located, "minor_number": None})


def test_claim_template_and_claim_validate_with_tolerations():
    tolerations = [
        host_share_toleration(),
        {
            "key": "gpusplit.io/unhealthy",
            "operator": "Equal",
            "value": "ecc",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        },
        {"operator": "Exists"},
    ]
    rct = render_claim("one-gpu", "ns", tolerations=tolerations)
    validate(rct)
    [req] = rct["spec"]["spec"]["devices"]["requests"]
    assert req["name"] == "gpu"
    assert req["exactly"]["deviceClassName"] == "gpu.nvidia.com"
    assert req["exactly"]["count"] == 1 and req["exactly"]["allocationMode"] == "ExactCount"
    assert req["exactly"]["tolerations"][0] == {
        "key": "gpusplit.io/host-share",
        "operator": "Exists",
        "effect": "NoSchedule",
    }
    assert req["exactly"]["tolerations"][1]["tolerationSeconds"] == 300
    claim = render_claim(
        "shared",
        "ns",
        count=2,
        kind="ResourceClaim",
        selectors=["device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H200'"],
        labels={"a": "b"},
    )
    validate(claim)
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["count"] == 2
    assert "tolerations" not in claim["spec"]["devices"]["requests"][0]["exactly"]


def test_host_share_rules_cover_the_published_mig_devices_of_a_reserved_mig_gpu():
    doc = fixture("a100-mig")
    parent = doc["gpus"][0]  # MIG enabled, two 3g.40gb devices
    plan, _ = mig_fleet([parent["uuid"]])
    assert any("MIG enabled" in w for w in plan["warnings"] + plan["nodes"]["mig-a"].get("warnings", []))
    without = host_share_rules(plan)
    assert [r["spec"]["deviceSelector"]["device"] for r in without] == ["gpu-0"]
    rs = render_resource_slice("node-m", doc["gpus"], 1, doc.get("driver_version"))
    published_migs = sorted(
        d["name"]
        for d in rs["spec"]["devices"]
        if d["attributes"].get("parentUUID", {}).get("string") == parent["uuid"]
    )
    assert len(published_migs) == 2
    rules = host_share_rules(plan, slices=[rs])
    devices = sorted(r["spec"]["deviceSelector"]["device"] for r in rules)
    assert devices == sorted(["gpu-0", *published_migs])
    for rule in rules:
        validate(rule)
        assert rule["spec"]["deviceSelector"]["pool"] == "node-m"
        assert rule["metadata"]["annotations"]["gpusplit.io/gpu-uuid"] == parent["uuid"]
        assert rule["spec"]["taint"]["key"] == "gpusplit.io/host-share"
    assert len({r["metadata"]["name"] for r in rules}) == len(rules)
    # the other MIG GPU (Kubernetes share) gets nothing
    other = doc["gpus"][1]["uuid"]
    assert all(r["metadata"]["annotations"]["gpusplit.io/gpu-uuid"] != other for r in rules)


def test_isolation_rules_of_a_mig_gpu_and_of_a_lost_one():
    doc = fixture("a100-mig")
    fi = {"mig-a": {"facts": doc["gpus"], "mode": "dra", "split": {"count": 1}, "node_name": "node-m"}}
    located = locate_gpu(fi, doc["gpus"][1]["uuid"])
    assert located["mig_enabled"] is True
    with pytest.raises(DraError, match="publishes none of its MIG devices"):
        isolation_rules(located, "None", "ecc", slices=[])
    rs = render_resource_slice("node-m", doc["gpus"], 1, doc.get("driver_version"))
    rules = isolation_rules(located, "NoExecute", "ecc", slices=[rs])
    assert [r["spec"]["deviceSelector"]["device"] for r in rules][0] == "gpu-1"
    assert len(rules) == 1 + len(doc["gpus"][1]["mig_devices"])
    assert all(r["spec"]["taint"]["effect"] == "NoExecute" for r in rules)
    # a whole GPU: one rule
    whole = locate_gpu(fi, doc["gpus"][2]["uuid"])
    assert [r["spec"]["deviceSelector"]["device"] for r in isolation_rules(whole, slices=[rs])] == ["gpu-2"]
    # a lost GPU is not published: nothing to taint
    assert isolation_rules({**whole, "health": "lost"}, slices=[rs]) == []


def test_diagnostic_claim_reaches_only_the_isolated_gpu():
    fi = fleet_input()
    located = locate_gpu(fi, fi["gpu-b"]["facts"][0]["uuid"])
    claim = diagnostic_claim("burn-in", "diag", located)
    validate(claim)
    [request] = claim["spec"]["devices"]["requests"]
    exactly = request["exactly"]
    assert exactly["tolerations"] == [
        {"operator": "Exists", "key": "gpusplit.io/unhealthy"},
        {"operator": "Exists", "key": "gpusplit.io/excluded"},
    ]
    assert exactly["selectors"] == [
        {"cel": {"expression": f"device.attributes['gpu.nvidia.com'].uuid == '{located['uuid']}'"}}
    ]
    assert isolation_toleration("NoExecute") == {
        "operator": "Exists",
        "key": "gpusplit.io/unhealthy",
        "effect": "NoExecute",
    }
    with pytest.raises(DraError, match="MIG enabled"):
        diagnostic_claim("x", "diag", {**located, "mig_enabled": True})
    with pytest.raises(DraError, match="not a GPU UUID"):
        diagnostic_claim("x", "diag", {**located, "uuid": "MIG-1"})
