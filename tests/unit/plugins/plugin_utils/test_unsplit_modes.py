"""Taking a split back in mode dra (gpusplit's DeviceTaintRules) and mode gpu_operator (the operator's device-plugin
opt-out label): plugins/plugin_utils/unsplit.py, cluster_plan, against the objects site.yml renders."""

from __future__ import annotations

import re

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.names import label_value
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import unsplit
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._dra import render as dra_render
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.role_steps import StepContext, run_step
from ansible_collections.gpusplit.k8s.tests.unit.plugins.plugin_utils.test_split_render import fleet
from ansible_collections.gpusplit.k8s.tests.unit.plugins.plugin_utils.test_unsplit import one_node_plan

OPERATOR_PLUGIN = {
    "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "gpu-operator", "labels": {}},
    "spec": {
        "template": {
            "spec": {
                "nodeSelector": {"nvidia.com/gpu.deploy.device-plugin": "true"},
                "containers": [
                    {"name": "nvidia-device-plugin", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}
                ],
            }
        }
    },
}


def split_live(plan, host, operator_managed=False):
    """The node of ``host`` as site.yml labelled it: gpusplit's labels, owned by its field manager."""
    node_plan = plan["nodes"][host]
    labels = {**render.node_labels(node_plan, operator_managed), "kubernetes.io/hostname": node_plan["node"]}
    owned = {f"f:{k}": {} for k in render.node_labels(node_plan, operator_managed)}
    return {
        "metadata": {
            "name": node_plan["node"],
            "labels": labels,
            "annotations": {},
            "managedFields": [{"manager": "gpusplit", "fieldsV1": {"f:metadata": {"f:labels": owned}}}],
        },
        "spec": {},
        "status": {"nodeInfo": {"kubeletVersion": "v1.37.2"}, "allocatable": {}},
    }


def selects(selector, labels):
    """Whether a label selector of the forms gpusplit writes (k=v, k, k in (a,b)) selects ``labels``."""
    for term in re.findall(r"[^,(]+(?:\([^)]*\))?", selector):
        term = term.strip()
        m = re.match(r"^(\S+) in \((.*)\)$", term)
        if m:
            if labels.get(m.group(1)) not in m.group(2).split(","):
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key) != value:
                return False
        elif term not in labels:
            return False
    return True


def dra_rules_of(plan, node):
    return [
        r for r in dra_render.host_share_rules(plan) if r["metadata"]["labels"]["gpusplit.io/node"] == node
    ]


def test_to_kubernetes_in_mode_dra_every_rule_site_wrote_for_the_node_goes_and_no_plugin_is_needed():
    plan = one_node_plan("b-dra")
    name = plan["nodes"]["b-dra"]["node"]
    written = dra_rules_of(fleet(), label_value(name))
    assert len(written) == 2  # the host share site.yml tainted
    out = unsplit.cluster_plan(plan, "kubernetes", [split_live(plan, "b-dra")], [])
    assert out["refusals"] == []  # the DRA driver serves the node: no device plugin is asked for
    [entry] = out["nodes"]
    assert entry["order"] == "dra" and entry["expected"] == 0
    assert out["dra_rules"] == []
    [prune] = out["dra_prune"]
    assert prune["kind"] == "DeviceTaintRule" and prune["api_version"] == "resource.k8s.io/v1"
    assert all(selects(prune["label_selector"], r["metadata"]["labels"]) for r in written)
    # another node's rules are not selected
    other = dict(written[0]["metadata"]["labels"], **{"gpusplit.io/node": "other-node"})
    assert not selects(prune["label_selector"], other)
    # isolate_gpu.yml's rules (another app name) are not either
    isolated = dict(written[0]["metadata"]["labels"], **{"app.kubernetes.io/name": "gpusplit-isolate"})
    assert not selects(prune["label_selector"], isolated)
    # every label of gpusplit's goes but the one the DRA driver's kubelet plugin runs by
    patch = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"gpusplit.io/mode": "dra"}},
    }
    assert out["node_patches"] == [patch]
    assert "DeviceTaintRules of the node removed" in out["lines"][0]
    assert "gpusplit.io/mode=dra kept" in out["lines"][0] and "gpusplit.io/split" in out["lines"][0]


def test_in_mode_dra_the_drivers_label_stays_only_where_gpusplit_set_it():
    plan = one_node_plan("b-dra")
    node = split_live(plan, "b-dra")
    fields = node["metadata"]["managedFields"][0]["fieldsV1"]["f:metadata"]["f:labels"]
    del fields["f:gpusplit.io/mode"]  # someone else's label: not gpusplit's to keep or take
    out = unsplit.cluster_plan(plan, "kubernetes", [node], [])
    assert out["node_patches"][0]["metadata"] == {"name": plan["nodes"]["b-dra"]["node"]}
    assert "kept" not in out["lines"][0]


def test_to_host_in_mode_dra_every_healthy_device_is_tainted_and_the_rules_site_wrote_are_kept_by_name():
    plan = one_node_plan("b-dra")
    name = plan["nodes"]["b-dra"]["node"]
    written = {r["metadata"]["name"] for r in dra_rules_of(fleet(), label_value(name))}
    out = unsplit.cluster_plan(plan, "host", [split_live(plan, "b-dra")], [])
    assert out["refusals"] == []
    rules = out["dra_rules"]
    assert sorted(r["spec"]["deviceSelector"]["device"] for r in rules) == [
        "gpu-0",
        "gpu-1",
        "gpu-2",
        "gpu-3",
    ]
    assert {r["spec"]["taint"]["key"] for r in rules} == {"gpusplit.io/host-share"}
    assert written <= {r["metadata"]["name"] for r in rules}  # updated in place, not pruned and re-created
    assert all(selects(out["dra_prune"][0]["label_selector"], r["metadata"]["labels"]) for r in rules)
    assert out["node_patches"][0]["metadata"]["labels"] == {
        "gpusplit.io/split": "true",
        "gpusplit.io/mode": "dra",
    }


def test_the_rules_follow_the_version_the_cluster_serves_and_without_one_host_is_refused():
    plan = one_node_plan("b-dra")
    nodes = [split_live(plan, "b-dra")]
    beta = unsplit.cluster_plan(plan, "host", nodes, [], dra_api_version="resource.k8s.io/v1beta2")
    assert {r["apiVersion"] for r in beta["dra_rules"]} == {"resource.k8s.io/v1beta2"}
    assert beta["dra_prune"][0]["api_version"] == "resource.k8s.io/v1beta2"
    refused = unsplit.cluster_plan(plan, "host", nodes, [], dra_api_version=None, dra_refusal="needs 1.36")
    assert "cannot be kept from claims: needs 1.36" in refused["refusals"][0]
    # to kubernetes, a cluster serving no DeviceTaintRule holds none: nothing to prune, nothing refused
    served_none = unsplit.cluster_plan(plan, "kubernetes", nodes, [], dra_api_version=None)
    assert served_none["refusals"] == [] and served_none["dra_prune"] == []


def test_the_cluster_step_reads_the_version_from_cluster_api_versions():
    plan = one_node_plan("b-dra")
    inputs = {
        "plan": plan,
        "to": "host",
        "nodes": [split_live(plan, "b-dra")],
        "daemonsets": [],
        "api_versions": {
            "api_versions": {"device_taint_rule": None},
            "refusals": {"device_taint_rule": "off"},
        },
    }
    out = run_step("unsplit_cluster", inputs, StepContext())["cluster"]
    assert "cannot be kept from claims: off" in out["refusals"][0]


def test_a_device_plugin_node_gets_no_rule_and_no_rule_prune():
    plan = one_node_plan("a-dp")
    out = unsplit.cluster_plan(plan, "host", [split_live(plan, "a-dp")], [])
    assert out["dra_rules"] == [] and out["dra_prune"] == []


@pytest.mark.parametrize("to", ["kubernetes", "host"])
def test_in_mode_gpu_operator_the_opt_out_label_goes_back_to_the_operator_or_keeps_its_plugin_off(to):
    plan = one_node_plan("c-op")
    node = split_live(plan, "c-op", operator_managed=True)
    assert node["metadata"]["labels"]["nvidia.com/gpu.deploy.device-plugin"] == "false"
    out = unsplit.cluster_plan(plan, to, [node], [OPERATOR_PLUGIN])
    assert out["refusals"] == []
    [patch] = out["node_patches"]
    if to == "kubernetes":
        # gpusplit's opt-out label goes (the operator labels the node for its plugin again), and the operator's
        # plugin is the one the hand-over waits for
        assert "labels" not in patch["metadata"]
        assert out["nodes"][0]["stock"] == ["gpu-operator/nvidia-device-plugin-daemonset"]
        assert out["nodes"][0]["expected"] == 4
    else:
        assert patch["metadata"]["labels"] == {
            "gpusplit.io/split": "true",
            "nvidia.com/gpu.deploy.device-plugin": "false",
        }
