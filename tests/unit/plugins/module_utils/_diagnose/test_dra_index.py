"""DRA claims: device taints, no matching device, allocations, templates, firstAvailable."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.dra_index import device_tolerates
from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.report import diagnose
from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.rules import (
    DRA_NO_DEVICE,
    DRA_TAINT,
    UNKNOWN,
)
from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._diagnose.diagnose_scene import (
    ROLE_A,
    claim_pod,
    dra_objects,
    fixture,
    only,
    pod,
    scene_nodes,
)


def test_dra_device_taint_rule():
    p = claim_pod(message=fixture("dra-device-taint"))
    e = only(diagnose([p], scene_nodes(), resource=dra_objects()), "want-dra")
    assert e["class"] == DRA_TAINT, e
    assert (
        "gpu.nvidia.com/diag-a/gpu-0 gpusplit.io/unhealthy=Degraded:NoSchedule (DeviceTaintRule diag-a-unhealthy)"
        in e["summary"]
    )
    assert e["suggested_device_tolerations"] == [
        {"key": "gpusplit.io/unhealthy", "operator": "Equal", "value": "Degraded", "effect": "NoSchedule"}
    ]
    assert e["next"].startswith("kubectl get devicetaintrule diag-a-unhealthy -o yaml")


def test_dra_driver_taint_in_the_resource_slice():
    taint = {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoExecute"}
    res = dra_objects(taint_rule=False, slice_taints=[taint])
    e = only(
        diagnose([claim_pod(message=fixture("dra-device-taint"))], scene_nodes(), resource=res), "want-dra"
    )
    assert e["class"] == DRA_TAINT
    assert "gpu.nvidia.com/xid=79:NoExecute (ResourceSlice diag-a-gpus)" in e["summary"]


def test_dra_tolerated_taint_or_effect_none_does_not_block():
    tol = {"key": "gpusplit.io/unhealthy", "operator": "Exists", "effect": "NoSchedule"}
    e = only(diagnose([claim_pod()], scene_nodes(), resource=dra_objects(tolerations=[tol])), "want-dra")
    assert e["class"] == UNKNOWN and e["nodes"]["diag-a"] == []
    res = dra_objects(taint_rule=False, slice_taints=[{"key": "k", "value": "v", "effect": "None"}])
    assert only(diagnose([claim_pod()], scene_nodes(), resource=res), "want-dra")["nodes"]["diag-a"] == []


def test_dra_no_matching_device():
    sel = 'device.attributes["gpu.nvidia.com"].uuid == "GPU-does-not-exist"'
    res = dra_objects(taint_rule=False, claim_selectors=[sel])
    e = only(diagnose([claim_pod(message=fixture("dra-no-device"))], scene_nodes(), resource=res), "want-dra")
    assert e["class"] == DRA_NO_DEVICE
    assert "diag-a: no published device matches the class and selectors on this node" in e["summary"]
    assert "kubectl get deviceclass diag-gpu -o yaml" in e["next"]
    assert "ResourceClaim diag/claim" in e["next"]


def test_dra_devices_allocated_to_other_claims():
    res = dra_objects(taint_rule=False)
    other = {
        "metadata": {"name": "other", "namespace": "team"},
        "spec": {},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"driver": "gpu.nvidia.com", "pool": "diag-a", "device": f"gpu-{i}", "request": "gpu"}
                        for i in range(2)
                    ]
                }
            }
        },
    }
    res["claims"].append(other)
    e = only(diagnose([claim_pod()], scene_nodes(), resource=res), "want-dra")
    assert e["class"] == DRA_NO_DEVICE
    assert "2 matching device(s) already allocated" in e["summary"]


def test_dra_unevaluated_selector_is_reported_not_guessed():
    # find() is in Kubernetes' regex CEL library, which the diagnosis does not bridge
    sel = 'device.attributes["gpu.nvidia.com"].uuid.find("^GPU-9") != ""'
    res = dra_objects(taint_rule=True, claim_selectors=[sel])
    e = only(diagnose([claim_pod()], scene_nodes(), resource=res), "want-dra")
    # the unevaluated selector does not filter; the rule still taints every device
    assert e["class"] == DRA_TAINT
    assert e["nodes"]["diag-a"][0]["unevaluated_selectors"] == [sel]


def test_dra_claim_missing_and_template():
    p = claim_pod()
    res = dra_objects(taint_rule=False)
    res["claims"] = []
    assert only(diagnose([p], scene_nodes(), resource=res), "want-dra")["class"] == DRA_NO_DEVICE
    tmpl = {
        "metadata": {"name": "tmpl", "namespace": "diag"},
        "spec": {"spec": dra_objects()["claims"][0]["spec"]},
    }
    res = dra_objects()
    res["claims"], res["templates"] = [], [tmpl]
    p = pod(
        "t",
        gpus=0,
        selector=ROLE_A,
        extra_spec={"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "tmpl"}]},
    )
    e = only(diagnose([p], scene_nodes(), resource=res), "t")
    assert e["class"] == DRA_TAINT
    assert e["nodes"]["diag-a"][0]["where"] == "ResourceClaimTemplate diag/tmpl"


def test_dra_all_mode_and_first_available():
    res = dra_objects(taint_rule=False)
    res["claims"][0]["spec"]["devices"]["requests"] = [
        {
            "name": "gpu",
            "firstAvailable": [
                {"name": "big", "deviceClassName": "diag-gpu", "count": 3},
                {"name": "small", "deviceClassName": "diag-gpu", "count": 1},
            ],
        }
    ]
    assert only(diagnose([claim_pod()], scene_nodes(), resource=res), "want-dra")["nodes"]["diag-a"] == []
    res["claims"][0]["spec"]["devices"]["requests"] = [
        {"name": "gpu", "exactly": {"deviceClassName": "diag-gpu", "allocationMode": "All"}}
    ]
    res["rules"] = dra_objects()["rules"]
    assert only(diagnose([claim_pod()], scene_nodes(), resource=res), "want-dra")["class"] == DRA_TAINT


def test_a_nodes_claim_findings_keep_the_claims_order():
    res = dra_objects()  # "claim": every device tainted by the DeviceTaintRule
    missing = copy.deepcopy(res["claims"][0])
    missing["metadata"]["name"] = "claim2"
    missing["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
        {"cel": {"expression": 'device.attributes["gpu.nvidia.com"].uuid == "GPU-none"'}}
    ]
    res["claims"].append(missing)
    for first, second, cls in (("claim2", "claim", DRA_NO_DEVICE), ("claim", "claim2", DRA_TAINT)):
        refs = [{"name": "a", "resourceClaimName": first}, {"name": "b", "resourceClaimName": second}]
        p = pod("two", gpus=0, selector=ROLE_A, extra_spec={"resourceClaims": refs})
        e = only(diagnose([p], scene_nodes(), resource=res), "two")
        assert [b["claim"] for b in e["nodes"]["diag-a"]] == ["a", "b"]
        assert e["class"] == cls  # the first claim that fails decides, as the DRA filter meets them


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        ({"key": "gpusplit.io/unhealthy", "operator": "Exists"}, True),
        ({"operator": "Exists", "effect": "NoSchedule"}, True),
        ({"key": "gpusplit.io/unhealthy", "value": "Degraded"}, True),
        ({"key": "gpusplit.io/unhealthy", "value": "Other"}, False),
        ({"key": "gpusplit.io/unhealthy", "operator": "Exists", "effect": "NoExecute"}, False),
    ],
)
def test_device_tolerates(toleration, expected):
    taint = {"key": "gpusplit.io/unhealthy", "value": "Degraded", "effect": "NoSchedule"}
    assert device_tolerates(toleration, taint) is expected


def test_dra_selector_is_evaluated_by_the_cel_library():
    # matches() is standard CEL: no published device's UUID starts with GPU-9, so none is selected
    sel = 'device.attributes["gpu.nvidia.com"].uuid.matches("^GPU-9")'
    res = dra_objects(taint_rule=True, claim_selectors=[sel])
    e = only(diagnose([claim_pod()], scene_nodes(), resource=res), "want-dra")
    assert e["class"] == DRA_NO_DEVICE
    assert e["nodes"]["diag-a"][0]["unevaluated_selectors"] == []
