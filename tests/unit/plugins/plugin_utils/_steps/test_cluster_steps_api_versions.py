"""The role step cluster_api_versions and dra_split_objects' api_version: the DeviceTaintRule version from discovery."""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.plugin_utils.role_steps import StepContext, run_step
from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._dra.dra_testdata import dra_fleet

RESOURCE_V1 = {k: {} for k in ("DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice")}


def cluster_info(git_version, apis):
    """What kubernetes.core.k8s_cluster_info returns (the parts the step reads)."""
    return {"apis": apis, "version": {"server": {"kubernetes": {"gitVersion": git_version}}}}


def test_the_step_picks_per_use_and_says_why_not():
    info = cluster_info(
        "v1.36.3", {"resource.k8s.io/v1": RESOURCE_V1, "resource.k8s.io/v1beta2": {"DeviceTaintRule": {}}}
    )
    out = run_step(
        "cluster_api_versions", {"cluster_info": info, "uses": ["device_taint_rule", "dra"]}, StepContext()
    )
    assert out == {
        "api_versions": {"device_taint_rule": "resource.k8s.io/v1beta2", "dra": "resource.k8s.io/v1"},
        "refusals": {},
        "gates": {"device_taint_rule": ["DRADeviceTaintRules"]},
        "kubernetes_version": "v1.36.3",
    }
    bare = cluster_info("v1.36.3", {"resource.k8s.io/v1": RESOURCE_V1})
    out = run_step(
        "cluster_api_versions", {"cluster_info": bare, "uses": ["device_taint_rule"]}, StepContext()
    )
    assert out["api_versions"] == {"device_taint_rule": None}
    assert "DRADeviceTaintRules" in out["refusals"]["device_taint_rule"]


def test_the_step_refuses_an_unknown_use_or_no_discovery_answer():
    out = run_step("cluster_api_versions", {"cluster_info": {}, "uses": ["podgroups"]}, StepContext())
    assert out["failed"] and "uses: unknown podgroups (known: device_taint_rule" in out["msg"]
    out = run_step("cluster_api_versions", {"cluster_info": "v1.37.2", "uses": ["dra"]}, StepContext())
    assert out["failed"] and "cluster_info: expected a mapping, got string" in out["msg"]


def test_dra_split_objects_writes_the_rules_in_the_version_given():
    plan = dra_fleet()
    inputs = {"plan": plan, "gpu_hosts": [], "kept": []}
    v1 = run_step("dra_split_objects", inputs, StepContext())
    assert v1["rules"] and {r["apiVersion"] for r in v1["rules"]} == {"resource.k8s.io/v1"}
    beta = run_step("dra_split_objects", {**inputs, "api_version": "resource.k8s.io/v1beta2"}, StepContext())
    assert [{**r, "apiVersion": "resource.k8s.io/v1"} for r in beta["rules"]] == v1["rules"]
    assert {r["apiVersion"] for r in beta["rules"]} == {"resource.k8s.io/v1beta2"}
    alpha = run_step(
        "dra_split_objects", {**inputs, "api_version": "resource.k8s.io/v1alpha3"}, StepContext()
    )
    assert alpha["failed"] and "not 'resource.k8s.io/v1alpha3'" in alpha["msg"]


def test_the_dra_preflight_step_reads_the_components_gates():
    info = cluster_info(
        "v1.36.3", {"resource.k8s.io/v1": RESOURCE_V1, "resource.k8s.io/v1beta2": {"DeviceTaintRule": {}}}
    )
    plan = dra_fleet()
    context = StepContext(hostvars={n["host"]: {} for n in plan["nodes"].values()})
    # control_plane_health's feature_gates: the metric's value per component, null where it was not read
    gates = {
        "kube-scheduler": {"DRADeviceTaintRules": 0.0},
        "kube-controller-manager": {"DRADeviceTaintRules": None},
    }
    out = run_step(
        "dra_driver_preflight", {"cluster_info": info, "plan": plan, "component_gates": gates}, context
    )
    check = next(c for c in out["report"]["checks"] if c["check"] == "device_taint_rules")
    assert not check["ok"] and "DRADeviceTaintRules on kube-scheduler is off" in check["detail"]
    assert "kube-controller-manager is off" not in check["detail"]
    out = run_step("dra_driver_preflight", {"cluster_info": info, "plan": plan}, context)
    check = next(c for c in out["report"]["checks"] if c["check"] == "device_taint_rules")
    assert check["ok"]  # no control plane asked: what is served decides
