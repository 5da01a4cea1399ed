"""gpu_operator mode and MIG: no node-wide layout on a node that keeps a host share; the Kubernetes share's
geometry goes to the MIG manager as a per-node mig-parted config that lists only its GPUs; one ClusterPolicy."""

from __future__ import annotations

import pytest
import yaml

from ansible_collections.gpusplit.k8s.plugins.module_utils._split.mig_geometry import layout_name
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import gpu_operator as G
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import operator_mig_layouts as L
from ansible_collections.gpusplit.k8s.tests.unit.plugins.plugin_utils.test_gpu_operator import (
    CRD,
    VM,
    facts,
    fleet,
    live_policy,
    load_yaml,
    validate,
)

DGX = facts("dgx-h100")
DGX_UUIDS = [g["uuid"] for g in DGX]
# GPUs 0 and 1 stay with the host; 2..7 go to Kubernetes; GPUs 2 and 5 get a geometry
GEOMETRY = {DGX_UUIDS[5]: ["3g.40gb", "3g.40gb"], DGX_UUIDS[2]: ["1g.10gb", "1g.10gb", "2g.20gb"]}
MIGGED = {
    "facts": DGX,
    "mode": "gpu_operator",
    "split": {"host_count": 2},
    "mig_strategy": "mixed",
    "mig_geometry": GEOMETRY,
}


@pytest.fixture(scope="module")
def crd_schema():
    (version,) = [v for v in load_yaml(CRD)["spec"]["versions"] if v["name"] == "v1"]
    return version["schema"]["openAPIV3Schema"]


def mixed_fleet(**overrides):
    base = {"op-mig": None, "op-a": MIGGED}
    base.update(overrides)
    return fleet(**base)


def refusals(plan, mig_configs=None, policies=None, settings=VM, nodes=None):
    with pytest.raises(G.OperatorError) as exc:
        G.operator_config(
            plan, mig_configs or {}, [live_policy()] if policies is None else policies, settings, nodes
        )
    return exc.value.errors


def test_a_node_wide_layout_on_a_node_with_a_host_share_is_refused_naming_the_host_gpus():
    plan = fleet()  # op-a: dgx-h100 with host_count 2
    for config in ("all-1g.10gb", "all-disabled"):
        errors = refusals(plan, {"op-a": config})
        [error] = [e for e in errors if e.startswith("op-a: gpusplit_mig_config")]
        assert f"repartition the GPU(s) the host keeps, {DGX_UUIDS[0]}, {DGX_UUIDS[1]}." in error
        assert "gpusplit_mig_geometry" in error and error.endswith("Nothing was changed.")
        assert all(u not in error for u in DGX_UUIDS[2:])  # only the host's GPUs are named


def test_a_node_wide_layout_next_to_a_geometry_is_refused():
    errors = refusals(mixed_fleet(), {"op-a": "all-1g.10gb"})
    assert any("repartition the GPU(s) the host keeps" in e for e in errors)
    whole = mixed_fleet(**{"op-a": {**MIGGED, "split": {"host_count": 0}}})
    errors = refusals(whole, {"op-a": "all-1g.10gb"})
    assert errors == [
        "op-a: gpusplit_mig_config 'all-1g.10gb' and gpusplit_mig_geometry both set the node's MIG layout; keep "
        "gpusplit_mig_geometry"
    ]


def test_the_geometry_is_not_refused_under_the_operator_and_says_the_mig_manager_applies_it():
    node = mixed_fleet()["nodes"]["op-a"]
    assert node["mig_geometry"] == {u: GEOMETRY[u] for u in sorted(GEOMETRY)}
    warnings = [w for w in node["warnings"] if w.startswith("gpusplit_mig_geometry: GPU")]
    assert len(warnings) == 2 and all("MIG manager applies it" in w for w in warnings)
    assert node["resources"]["nvidia.com/gpu"] == 6  # what the GPUs are now: whole GPUs
    # device_plugin mode: gpusplit applies it on the host (gpu_host, entry point mig); the plan lists the changes, no warning
    node = mixed_fleet(**{"op-a": {**MIGGED, "mode": "device_plugin"}})["nodes"]["op-a"]
    assert sorted(c["uuid"] for c in node["mig_changes"]) == sorted(GEOMETRY)
    assert not [w for w in node["warnings"] if w.startswith("gpusplit_mig_geometry: GPU")]


def test_the_mig_manager_gets_a_config_of_this_node_that_lists_only_its_kubernetes_gpus(crd_schema):
    out = G.operator_config(mixed_fleet(), {}, [live_policy(state="ready")], VM, nodes=[])
    cm, policy = out["objects"]
    assert [o["kind"] for o in out["objects"]] == ["ConfigMap", "ClusterPolicy"]  # exactly one ClusterPolicy
    assert cm["metadata"] == {
        "name": "gpusplit-mig-parted-config",
        "namespace": "gpu-operator",
        "labels": {"app.kubernetes.io/managed-by": "gpusplit"},
    }
    config = yaml.safe_load(cm["data"]["config.yaml"])
    assert config == {
        "version": "v1",
        "mig-configs": {
            "all-disabled": [{"devices": "all", "mig-enabled": False}],
            "gpusplit-op-a": [
                {"devices": [2], "mig-enabled": True, "mig-devices": {"1g.10gb": 2, "2g.20gb": 1}},
                {"devices": [5], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
            ],
        },
    }
    selected = [d for e in config["mig-configs"]["gpusplit-op-a"] for d in e["devices"]]
    assert (
        0 not in selected and 1 not in selected
    )  # the host's GPUs are left out: mig-parted leaves them alone
    assert policy["spec"]["migManager"] == {"config": {"name": "gpusplit-mig-parted-config"}}
    validate(crd_schema, policy, partial=True)
    assert out["mig_labels"] == [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "op-a", "labels": {"nvidia.com/mig.config": "gpusplit-op-a"}},
        }
    ]
    # without a geometry nothing of it: no ConfigMap, no migManager field
    plain = G.operator_config(fleet(), {}, [live_policy(state="ready")], VM, nodes=[])
    assert [o["kind"] for o in plain["objects"]] == ["ClusterPolicy"]
    assert "migManager" not in plain["objects"][0]["spec"]


def test_helm_values_name_the_config_and_a_users_own_config_is_refused():
    out = G.operator_config(mixed_fleet(), {}, [], VM, nodes=[])
    assert out["helm"] and out["helm_values"]["migManager"] == {
        "config": {"name": "gpusplit-mig-parted-config"}
    }
    theirs = {**VM, "helm_values": {"migManager": {"config": {"name": "my-mig", "create": False}}}}
    [error] = refusals(mixed_fleet(), policies=[], settings=theirs)
    assert "migManager.config.name is 'my-mig', someone else's" in error and error.endswith(
        "Nothing was changed."
    )
    live = live_policy()
    live["spec"]["migManager"] = {"config": {"name": "custom-mig-parted-configs"}}
    [error] = refusals(mixed_fleet(), policies=[live])
    assert "'custom-mig-parted-configs'" in error


def test_a_stock_config_another_node_uses_would_vanish_and_is_refused():
    nodes = [
        {"metadata": {"name": "free-1", "labels": {"nvidia.com/mig.config": "all-1g.10gb"}}},
        {"metadata": {"name": "free-2", "labels": {"nvidia.com/mig.config": "all-disabled"}}},
        {"metadata": {"name": "old-1", "labels": {"nvidia.com/mig.config": "gpusplit-old-1"}}},
    ]
    [error] = refusals(mixed_fleet(), nodes=nodes)
    assert error.startswith(
        "free-1: nvidia.com/mig.config=all-1g.10gb names a config of the MIG manager's own"
    )
    whole = {"facts": facts("h200"), "mode": "gpu_operator", "split": {"count": 1}, "mig_strategy": "mixed"}
    [error] = refusals(mixed_fleet(**{"op-h": whole}), {"op-h": "all-1g.18gb"})
    assert error.startswith("op-h: nvidia.com/mig.config=all-1g.18gb names a config")


def test_the_mig_manager_switched_off_is_refused():
    live = live_policy()
    live["spec"]["migManager"] = {"enabled": False}
    [error] = refusals(mixed_fleet(), policies=[live])
    assert "gpusplit_mig_geometry is set for op-a" in error and "migManager.enabled false" in error


def test_a_long_node_name_gets_a_short_layout_name():
    assert layout_name("gpu-a") == "gpusplit-gpu-a"
    long = "n" * 60 + ".example.com"
    name = layout_name(long)
    assert len(name) == len("gpusplit-") + 12 and name.startswith("gpusplit-") and name == layout_name(long)
    assert L.node_layouts(fleet()) == {}


def test_a_node_whose_host_keeps_mig_gpus_without_a_label_is_warned_of_the_operators_default():
    plan = fleet()  # op-mig: a100-mig, Kubernetes gets GPU 0, the host keeps GPU 1 (MIG on), 2 and 3
    host_mig = plan["nodes"]["op-mig"]["gpus"][1]["uuid"]
    out = G.operator_config(plan, {}, [live_policy()], VM, nodes=[])
    [warning] = [w for w in out["warnings"] if "MIG manager applies its default config" in w]
    assert warning.startswith(f"op-mig: the host keeps MIG-enabled GPU(s) {host_mig}, and the node has no")
    assert "(all-disabled)" in warning and "gpusplit_mig_geometry" in warning
    assert not any("op-a: the host keeps" in w for w in out["warnings"])  # its host GPUs have MIG off
    # quiet where the default is off, where the node is labelled, or where the MIG manager is off
    live = live_policy()
    live["spec"]["migManager"] = {"config": {"default": ""}}
    assert not any(
        "default config" in w for w in G.operator_config(plan, {}, [live], VM, nodes=[])["warnings"]
    )
    labelled = [{"metadata": {"name": "op-mig", "labels": {"nvidia.com/mig.config": "gpusplit-op-mig"}}}]
    out = G.operator_config(plan, {}, [live_policy()], VM, nodes=labelled)
    assert not any("default config" in w for w in out["warnings"])
    live["spec"]["migManager"] = {"enabled": False}
    assert not any(
        "default config" in w for w in G.operator_config(plan, {}, [live], VM, nodes=[])["warnings"]
    )
