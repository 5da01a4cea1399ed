"""Taking a split back, decided on the controller (plugins/plugin_utils/unsplit.py) and its role steps
(plugins/plugin_utils/_steps/unsplit_steps.py)."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_fleet
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import unsplit
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.resplit import resplit_diff, resplit_refusals
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.role_steps import StepContext, run_step
from ansible_collections.gpusplit.k8s.tests.unit.plugins.plugin_utils.test_split_render import fleet, gpu

STOCK_EXCLUDED = {
    "metadata": {"name": "nvidia-device-plugin", "namespace": "kube-system", "labels": {}},
    "spec": {
        "template": {
            "spec": {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "gpusplit.io/split", "operator": "NotIn", "values": ["true"]}
                                    ]
                                }
                            ]
                        }
                    }
                },
                "containers": [{"name": "ctr", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}],
            }
        }
    },
}


def helm_owned(ds):
    out = {**ds, "metadata": dict(ds["metadata"])}
    out["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "Helm"}
    out["metadata"]["annotations"] = {
        "meta.helm.sh/release-name": "ndp",
        "meta.helm.sh/release-namespace": "kube-system",
    }
    return out


def live(name, kubelet="v1.37.2", labels=None, tainted=False, allocatable=None):
    labels = labels or {
        "gpusplit.io/split": "true",
        "gpusplit.io/mode": "device_plugin",
        "kubernetes.io/hostname": name,
    }
    owned = {f"f:{k}": {} for k in labels if k.startswith("gpusplit.io/")}
    node = {
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {"gpusplit.io/gpu-taint": "nvidia.com/gpu=present:NoSchedule"} if tainted else {},
            "managedFields": [
                {"manager": "gpusplit", "fieldsV1": {"f:metadata": {"f:labels": owned}}},
                {"manager": "kubectl", "fieldsV1": {"f:metadata": {"f:labels": {"f:team": {}}}}},
            ],
        },
        "spec": {
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
            if tainted
            else []
        },
        "status": {"nodeInfo": {"kubeletVersion": kubelet}, "allocatable": allocatable or {}},
    }
    return node


def one_node_plan(host="a-dp"):
    plan = fleet()
    return {**plan, "nodes": {host: plan["nodes"][host]}}


# ---------------------------------------------------------------------------------------------
# settings


def test_a_missing_target_is_refused_saying_what_to_set():
    with pytest.raises(unsplit.UnsplitError) as exc:
        unsplit.check_settings(None)
    assert "gpusplit_unsplit_to is required" in exc.value.errors[0]
    assert "-e gpusplit_unsplit_to=kubernetes" in exc.value.errors[0]


def test_every_bad_setting_is_refused_at_once():
    with pytest.raises(unsplit.UnsplitError) as exc:
        unsplit.check_settings("cluster", "wipe", "nvidia")
    assert len(exc.value.errors) == 3
    assert "'cluster' (string) is not one of kubernetes, host" in exc.value.errors[0]
    assert exc.value.errors[1].startswith("gpusplit_unsplit_host_files: 'wipe'")
    assert exc.value.errors[2].startswith("gpusplit_unsplit_plugin: 'nvidia'")


def test_the_settings_step_refuses_with_its_title():
    refused = run_step("unsplit_settings", {"to": "somewhere"}, StepContext())
    assert refused["failed"] and refused["msg"].startswith("gpusplit unsplit refused:")
    ok = run_step("unsplit_settings", {"to": "host"}, StepContext())
    assert ok == {
        "settings": {
            "to": "host",
            "host_files": "restore",
            "plugin": "stock",
            "cluster": False,
            "force": False,
            "releases": False,
            "wait": 120,
        }
    }


# ---------------------------------------------------------------------------------------------
# the plan the re-split's checks run on


def test_to_host_every_healthy_gpu_is_the_hosts():
    plan = one_node_plan()
    out = unsplit.unsplit_plan(plan, "host")
    node = out["nodes"]["a-dp"]
    assert node["kubernetes_uuids"] == [] and node["kubernetes_count"] == 0
    assert node["host_uuids"] == [g["uuid"] for g in node["gpus"]]
    assert {g["share"] for g in node["gpus"]} == {"host"}
    assert plan["nodes"]["a-dp"]["kubernetes_count"] == 2  # the plan given is left as it is


def test_to_kubernetes_every_healthy_gpu_is_kubernetes_and_excluded_ones_stay_out():
    plan = one_node_plan()
    plan["nodes"]["a-dp"]["gpus"][3]["share"] = "excluded"
    node = unsplit.unsplit_plan(plan, "kubernetes")["nodes"]["a-dp"]
    assert node["kubernetes_count"] == 3 and node["host_uuids"] == []
    assert node["gpus"][3]["share"] == "excluded"


@pytest.mark.parametrize("to", ["host", "kubernetes"])
def test_the_planners_excluded_gpus_a_lost_one_without_index_stay_out(to):
    facts = [gpu(i) for i in range(4)]
    facts[1]["health"] = {"status": "degraded", "reasons": ["row remapping failed"]}
    facts[2].update(index=None, health={"status": "lost", "reasons": ["NVML_ERROR_GPU_IS_LOST"]})
    plan = plan_fleet({"n": {"facts": facts, "mode": "device_plugin", "split": {"count": 1}}})
    assert [e["uuid"] for e in plan["nodes"]["n"]["excluded"]] == [facts[1]["uuid"], facts[2]["uuid"]]
    node = unsplit.unsplit_plan(plan, to)["nodes"]["n"]
    kept = [facts[0]["uuid"], facts[3]["uuid"]]
    assert node[f"{to}_uuids"] == kept and node[f"{to}_count"] == 2
    assert {g["uuid"] for g in node["gpus"] if g["share"] == "excluded"} == {
        facts[1]["uuid"],
        facts[2]["uuid"],
    }


def test_the_resplit_checks_on_the_unsplit_plan_find_the_pods_and_the_host_processes():
    plan = one_node_plan()
    node = plan["nodes"]["a-dp"]
    k8s = [g for g in node["gpus"] if g["share"] == "kubernetes"]
    host = [g for g in node["gpus"] if g["share"] == "host"]
    ds = {
        "metadata": {"name": "gpusplit-dp-a-dp", "annotations": {"gpusplit.io/node-name": node["node"]}},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "env": [
                                {"name": "NVIDIA_VISIBLE_DEVICES", "value": ",".join(g["uuid"] for g in k8s)}
                            ]
                        }
                    ]
                }
            }
        },
    }
    answer = {
        "available": True,
        "holders": [
            {
                "namespace": "t",
                "pod": "p",
                "container": "c",
                "resource_name": "nvidia.com/gpu",
                "device_id": k8s[0]["uuid"],
            }
        ],
    }
    facts = {
        "gpus": [{"uuid": host[0]["uuid"], "processes": [{"pid": 7, "name": "train", "in_container": False}]}]
    }
    to_host = resplit_diff(unsplit.unsplit_plan(plan, "host"), {"a-dp": answer}, [ds], facts={"a-dp": facts})
    assert [h["pod"] for h in to_host["nodes"][0]["holders"]] == ["p"]
    assert "t/p holds GPU" in resplit_refusals(to_host, "refuse")[0]
    to_k8s = resplit_diff(
        unsplit.unsplit_plan(plan, "kubernetes"), {"a-dp": answer}, [ds], facts={"a-dp": facts}
    )
    assert to_k8s["holders"] == []
    [refusal] = resplit_refusals(to_k8s, "refuse", "refuse")
    assert "pid 7 (train)" in refusal
    assert resplit_refusals(to_k8s, "refuse", "ignore") == []


# ---------------------------------------------------------------------------------------------
# the cluster side


@pytest.mark.parametrize("kubelet", ["v1.37.2", "v1.38.0-lab", "v1.37.1", "v1.34.2-eks-1", None])
def test_the_split_plugin_goes_first_on_every_kubelet(kubelet):
    # two plugins of one resource share one socket on the node, whatever the kubelet's release
    order = unsplit.handover_order({"status": {"nodeInfo": {"kubeletVersion": kubelet}}})
    assert order["order"] == "split_first"
    assert order["kubelet"] == (kubelet.split("-")[0].lstrip("v") if kubelet else "unknown")


def test_only_the_labels_gpusplits_field_manager_owns_are_gpusplits():
    node = live("n", labels={"gpusplit.io/split": "true", "team": "ml"})
    assert unsplit.owned_label_keys(node) == ["gpusplit.io/split"]
    assert unsplit.owned_label_keys(node, "someone") == []


def test_to_kubernetes_with_a_stock_plugin_removes_labels_taint_and_the_split_plugin():
    plan = one_node_plan()
    name = plan["nodes"]["a-dp"]["node"]
    out = unsplit.cluster_plan(plan, "kubernetes", [live(name, tainted=True)], [STOCK_EXCLUDED])
    assert out["refusals"] == []
    [entry] = out["nodes"]
    assert entry["stock"] == ["kube-system/nvidia-device-plugin"] and entry["order"] == "split_first"
    assert entry["expected"] == 4
    assert out["node_patches"] == [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}]
    assert out["taint_nodes"] == [
        {"name": name, "absent": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}
    ]
    assert out["prune"][0]["label_selector"].endswith(f"gpusplit.io/node in ({name})")
    assert out["stock_first"] == []


def test_to_kubernetes_without_a_device_plugin_is_refused_unless_none():
    plan = one_node_plan()
    name = plan["nodes"]["a-dp"]["node"]
    refused = unsplit.cluster_plan(plan, "kubernetes", [live(name)], [])
    assert "gpusplit_unsplit_plugin=none" in refused["refusals"][0]
    left = unsplit.cluster_plan(plan, "kubernetes", [live(name)], [], plugin="none")
    assert left["refusals"] == [] and left["nodes"][0]["expected"] == 0


def test_a_helm_release_kept_off_by_its_values_is_refused_with_what_to_change():
    plan = one_node_plan()
    name = plan["nodes"]["a-dp"]["node"]
    ds = helm_owned(STOCK_EXCLUDED)
    # the node keeps a gpusplit.io/split=true label that gpusplit does not own: the release's exclusion still holds
    node = live(name)
    node["metadata"]["managedFields"] = []
    out = unsplit.cluster_plan(plan, "kubernetes", [node], [ds])
    assert (
        "Helm release 'ndp'" in out["refusals"][0] and "helm upgrade -n kube-system ndp" in out["refusals"][0]
    )


def test_to_host_keeps_only_the_labels_that_keep_other_plugins_off():
    plan = one_node_plan()
    name = plan["nodes"]["a-dp"]["node"]
    out = unsplit.cluster_plan(plan, "host", [live(name, kubelet="v1.30.0")], [STOCK_EXCLUDED])
    assert out["refusals"] == []
    assert out["node_patches"][0]["metadata"]["labels"] == {"gpusplit.io/split": "true"}
    assert out["nodes"][0]["expected"] == 0 and out["nodes"][0]["order"] == "split_only"


def test_a_node_missing_from_the_cluster_is_refused():
    out = unsplit.cluster_plan(one_node_plan(), "host", [], [])
    assert "no such node in the cluster" in out["refusals"][0] and out["prune"] == []


def test_verify_says_which_node_advertises_what():
    entries = [
        {"node": "a", "resource": "nvidia.com/gpu", "expected": 4},
        {"node": "b", "resource": "nvidia.com/gpu", "expected": 0},
    ]
    ok, lines = unsplit.verify_nodes(
        entries,
        [live("a", allocatable={"nvidia.com/gpu": "4"}), live("b", allocatable={"nvidia.com/gpu": "2"})],
    )
    assert not ok
    assert lines == [
        "a: nvidia.com/gpu allocatable 4, expected 4",
        "b: nvidia.com/gpu allocatable 2, expected 0 (NOT as expected)",
    ]


def test_the_wait_step_polls_until_the_nodes_advertise_what_is_expected():
    answers = iter(
        [
            [live("a", allocatable={"nvidia.com/gpu": "6"})],
            [live("a", allocatable={"nvidia.com/gpu": "2"})],
            [live("a", allocatable={"nvidia.com/gpu": "8"})],
        ]
    )
    context = StepContext(run_module=lambda name, args: {"resources": next(answers)})
    entries = [{"node": "a", "resource": "nvidia.com/gpu", "expected": 8}]
    out = run_step("unsplit_wait", {"nodes": entries, "until": "verify", "wait_seconds": 10}, context)
    assert out["ok"] and out["lowest"] == {"a": 2}


def test_the_wait_step_gives_up_after_its_time_naming_the_nodes_left():
    context = StepContext(run_module=lambda name, args: {"resources": []})
    entries = [{"node": "a", "resource": "nvidia.com/gpu", "expected": 8}]
    out = run_step("unsplit_wait", {"nodes": entries, "until": "stock", "wait_seconds": 3}, context)
    assert not out["ok"] and out["left"] == ["a"]


# ---------------------------------------------------------------------------------------------
# a feature gate set to absent (role control_plane_gates)


def test_an_absent_gate_is_split_from_the_set_ones_with_its_runtime_config_and_its_objects():
    out = run_step(
        "cp_gates_absent",
        {"gates": {"GenericWorkload": "absent", "DRAAdminAccess": True}, "version": "1.37.2"},
        StepContext(),
    )
    assert out["set"] == {"DRAAdminAccess": True} and out["absent"] == ["GenericWorkload"]
    assert out["remove_runtime_config"] == ["scheduling.k8s.io/v1beta1"]
    assert [(q["api_version"], q["kind"]) for q in out["queries"]] == [
        ("scheduling.k8s.io/v1beta1", "Workload"),
        ("scheduling.k8s.io/v1beta1", "PodGroup"),
    ]


def test_an_absent_gate_on_an_older_release_takes_that_releases_api_version_out():
    out = run_step(
        "cp_gates_absent", {"gates": {"GenericWorkload": "absent"}, "version": "1.35.4"}, StepContext()
    )
    assert out["remove_runtime_config"] == ["scheduling.k8s.io/v1alpha1"]
    assert [q["kind"] for q in out["queries"]] == ["Workload"]  # no PodGroup before 1.36


def test_a_gate_whose_api_is_on_by_default_has_no_objects_to_check():
    out = run_step(
        "cp_gates_absent", {"gates": {"DRADeviceTaintRules": "absent"}, "version": "1.37.2"}, StepContext()
    )
    assert out["remove_runtime_config"] == [] and out["queries"] == []


def test_the_plan_step_names_the_hosts_it_did_not_reach_and_leaves_them_alone():
    plan = one_node_plan()
    context = StepContext(hostvars={"a-dp": {}, "gone-01": {}}, groups={"all": ["a-dp", "gone-01"]})
    out = run_step("unsplit_plan", {"plan": plan, "to": "host", "hosts": ["a-dp", "gone-01"]}, context)
    assert out["unreached"] == ["gone-01"] and list(out["plan"]["nodes"]) == ["a-dp"]
    assert any(line.startswith("gone-01: not reached") for line in out["lines"])
    assert out["hosts"]["a-dp"]["state_path"].endswith("/etc/gpusplit/host-state.json")
