"""Taking gpusplit off the whole cluster (gpusplit_unsplit_cluster: true; plugins/plugin_utils/unsplit.py,
cluster_wide_plan and namespaces_to_delete, and the steps unsplit_cluster and unsplit_namespaces)."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import unsplit
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import unsplit_cluster as wide
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.role_steps import StepContext, run_step
from ansible_collections.gpusplit.k8s.tests.unit.plugins.plugin_utils.test_split_render import fleet
from ansible_collections.gpusplit.k8s.tests.unit.plugins.plugin_utils.test_unsplit import (
    STOCK_EXCLUDED,
    helm_owned,
    live,
    one_node_plan,
)


def guard_objects():
    """The admission guard's policies and bindings as playbooks/guard.yml renders them."""
    inputs = {"guard": {"name": "gpusplit-guard"}, "policies": {"name": "gpusplit-guard"}}
    return run_step("guard_objects", inputs, StepContext())["objects"]


def of_kind(objects, kind):
    return [o for o in objects if o["kind"] == kind]


def split_daemonsets(settings=None):
    return of_kind(render.render_fleet(fleet(), settings), "DaemonSet")


def unlabelled(name):
    node = live(name, labels={"kubernetes.io/hostname": name})
    node["metadata"]["managedFields"] = []
    return node


def test_a_node_outside_the_play_still_split_refuses_the_whole_cluster_naming_what_it_has():
    plan = one_node_plan("a-dp")
    name = plan["nodes"]["a-dp"]["node"]
    daemonsets = split_daemonsets()  # those of a-dp and c-op, as site.yml applied them
    out = wide.cluster_wide_plan(plan, [live(name), live("c-op"), unlabelled("d-none")], daemonsets)
    [refusal] = out["refusals"]
    assert out["still_split"] == ["c-op"]
    assert "c-op (gpusplit's labels gpusplit.io/mode, gpusplit.io/split" in refusal
    assert "its split device plugin kube-system/gpusplit-dp-c-op" in refusal
    assert "add them to gpusplit_hosts" in refusal and refusal.endswith("Nothing was changed.")
    assert "d-none" not in refusal and name + " (" not in refusal


def test_a_node_with_only_someone_elses_gpusplit_labels_does_not_refuse():
    plan = one_node_plan("a-dp")
    other = live("c-op")
    other["metadata"]["managedFields"] = [
        m for m in other["metadata"]["managedFields"] if m["manager"] != "gpusplit"
    ]
    out = wide.cluster_wide_plan(plan, [live(plan["nodes"]["a-dp"]["node"]), other], [])
    assert out["refusals"] == [] and out["still_split"] == []


def test_the_whole_cluster_prunes_only_by_gpusplits_labels_and_lists_look_alikes():
    objects = guard_objects()
    policies = of_kind(objects, "ValidatingAdmissionPolicy")
    bindings = of_kind(objects, "ValidatingAdmissionPolicyBinding")
    assert policies and bindings
    look_alike = {"kind": "ValidatingAdmissionPolicy", "metadata": {"name": "gpusplit-ish", "labels": {}}}
    plan = fleet()  # every node of the fleet in the play
    nodes = [live(np["node"]) for np in plan["nodes"].values()]
    out = wide.cluster_wide_plan(plan, nodes, split_daemonsets(), policies + [look_alike], bindings)
    assert out["refusals"] == []
    selectors = {(p["kind"], p["label_selector"]) for p in out["prune"]}
    assert (
        "ValidatingAdmissionPolicy",
        "app.kubernetes.io/managed-by=gpusplit,gpusplit.io/guard",
    ) in selectors
    assert (
        "ValidatingAdmissionPolicyBinding",
        "app.kubernetes.io/managed-by=gpusplit,gpusplit.io/guard",
    ) in selectors
    assert ("DaemonSet", wide.PLUGIN_SELECTOR) in selectors and (
        "ConfigMap",
        wide.PLUGIN_SELECTOR,
    ) in selectors
    assert (
        "DeviceClass",
        "app.kubernetes.io/managed-by=gpusplit,app.kubernetes.io/name=gpusplit-sharing",
    ) in selectors
    # every prune selector proves ownership by gpusplit's label, and each guard object matches its own
    assert all("app.kubernetes.io/managed-by=gpusplit" in p["label_selector"] for p in out["prune"])
    for obj in policies + bindings:
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpusplit"
        assert "gpusplit.io/guard" in obj["metadata"]["labels"]
    assert out["listed"] == ["ValidatingAdmissionPolicy gpusplit-ish"]
    assert any("not gpusplit's" in line and "gpusplit-ish" in line for line in out["lines"])
    assert any("feature_gates.yml" in line for line in out["lines"])


def test_leftover_split_plugins_of_nodes_gone_from_the_inventory_are_named():
    plan = one_node_plan("a-dp")
    name = plan["nodes"]["a-dp"]["node"]
    # c-op's node is gone from the cluster and carries nothing; its DaemonSet was left behind: it still refuses,
    # as a split plugin of a node outside the play
    out = wide.cluster_wide_plan(plan, [live(name)], split_daemonsets())
    assert out["still_split"] == ["c-op"]


def test_gpusplits_namespaces_are_looked_into_and_system_ones_never():
    namespaces = [
        {"metadata": {"name": "gpusplit-system", "labels": {"app.kubernetes.io/managed-by": "gpusplit"}}},
        {"metadata": {"name": "kube-system", "labels": {"app.kubernetes.io/managed-by": "gpusplit"}}},
        {"metadata": {"name": "team-a", "labels": {}}},
    ]
    plan = fleet()
    nodes = [live(np["node"]) for np in plan["nodes"].values()]
    out = wide.cluster_wide_plan(plan, nodes, [], namespaces=namespaces)
    assert out["namespaces"] == ["gpusplit-system"]
    assert set(out["namespace_queries"]) == {f"gpusplit-system/{k}" for _, k in wide.NAMESPACE_KINDS}
    assert all(q["namespace"] == "gpusplit-system" for q in out["namespace_queries"].values())


def pod(name, labels=None):
    return {"metadata": {"name": name, "namespace": "gpusplit-system", "labels": labels or {}}}


def test_a_namespace_is_deleted_only_when_nothing_of_anyone_elses_is_left():
    gpusplits = {
        "app.kubernetes.io/managed-by": "gpusplit",
        "app.kubernetes.io/name": "gpusplit-device-plugin",
    }
    found = {
        "gpusplit-system/Pod": [pod("gpusplit-dp-a-xyz", gpusplits)],  # terminating with its DaemonSet
        "gpusplit-system/ConfigMap": [pod("kube-root-ca.crt")],
        "gpusplit-system/ServiceAccount": [pod("default")],
        "other/Pod": [pod("train-0")],
        "other/ServiceAccount": [pod("default"), pod("trainer")],
    }
    delete, kept = wide.namespaces_to_delete(["gpusplit-system", "other"], found)
    assert delete == ["gpusplit-system"]
    assert kept == [
        "namespace other kept: not only gpusplit's objects are left in it (Pod train-0, ServiceAccount trainer)"
    ]
    out = run_step(
        "unsplit_namespaces", {"namespaces": ["gpusplit-system", "other"], "found": found}, StepContext()
    )
    assert out == {"delete": delete, "lines": kept}


def test_the_cluster_step_adds_the_whole_cluster_only_when_asked():
    plan = one_node_plan("a-dp")
    name = plan["nodes"]["a-dp"]["node"]
    inputs = {
        "plan": plan,
        "to": "kubernetes",
        "nodes": [live(name), live("c-op")],
        "daemonsets": [STOCK_EXCLUDED],
    }
    assert run_step("unsplit_cluster", inputs, StepContext())["cluster"]["wide"] is None
    out = run_step("unsplit_cluster", {**inputs, "cluster_wide": "true"}, StepContext())["cluster"]
    assert out["wide"]["still_split"] == ["c-op"]
    assert any("gpusplit_unsplit_cluster=true" in r for r in out["refusals"])
    assert any(line.startswith("whole cluster:") for line in out["lines"])


@pytest.mark.parametrize("value", ["maybe", 2, [True]])
def test_a_whole_cluster_setting_that_is_no_boolean_is_refused(value):
    with pytest.raises(unsplit.UnsplitError, match="gpusplit_unsplit_cluster: .* is not a boolean"):
        unsplit.check_settings("kubernetes", cluster=value)


@pytest.mark.parametrize(("value", "expected"), [(True, True), ("yes", True), ("false", False), (0, False)])
def test_the_whole_cluster_setting_reads_as_ansible_reads_a_boolean(value, expected):
    assert unsplit.check_settings("kubernetes", cluster=value)["cluster"] is expected


# ---------------------------------------------------------------------------------------------
# a stock plugin kept off the node by its Helm release's values (gpusplit_unsplit_helm_wait_seconds)


def helm_excluded_case():
    plan = one_node_plan()
    name = plan["nodes"]["a-dp"]["node"]
    node = live(name)  # gpusplit.io/split=true set by someone else: the release's exclusion still holds
    node["metadata"]["managedFields"] = []
    return plan, name, node, helm_owned(STOCK_EXCLUDED)


def test_without_a_wait_the_helm_release_is_refused_with_the_values_line_to_take_out():
    plan, name, node, ds = helm_excluded_case()
    out = unsplit.cluster_plan(plan, "kubernetes", [node], [ds])
    [refusal] = out["refusals"]
    assert "Take the line '- {key: gpusplit.io/split, operator: NotIn, values: ['true']}' out of" in refusal
    assert "helm upgrade -n kube-system ndp" in refusal and "gpusplit_unsplit_helm_wait_seconds" in refusal
    assert "take the label gpusplit.io/split=true, which is not gpusplit's, off the node" in refusal
    assert out["helm_waits"] == [] and refusal.endswith("Nothing was changed.")


def test_with_a_wait_the_run_says_what_to_change_and_waits_for_that_release():
    plan, name, node, ds = helm_excluded_case()
    out = unsplit.cluster_plan(plan, "kubernetes", [node], [ds], helm_wait=300)
    assert out["refusals"] == []
    [wait] = out["helm_waits"]
    assert wait["node"] == name and wait["daemonset"] == "kube-system/nvidia-device-plugin"
    assert wait["release"] == "ndp" and out["nodes"][0]["stock"] == ["kube-system/nvidia-device-plugin"]
    assert any("the run waits up to 300s for it" in line for line in out["lines"])
    # still kept off: the release is unchanged
    assert unsplit.helm_still_off([wait], [ds]) == [wait]
    # the expression taken out of the release's values (helm upgrade): the plugin may run there
    lifted = json.loads(json.dumps(ds))
    lifted["spec"]["template"]["spec"].pop("affinity")
    assert unsplit.helm_still_off([wait], [lifted]) == []
    # a release uninstalled meanwhile is still off the node
    assert unsplit.helm_still_off([wait], []) == [wait]


def test_the_wait_step_polls_the_release_until_it_lets_the_plugin_on():
    plan, name, node, ds = helm_excluded_case()
    [wait] = unsplit.cluster_plan(plan, "kubernetes", [node], [ds], helm_wait=60)["helm_waits"]
    lifted = json.loads(json.dumps(ds))
    lifted["spec"]["template"]["spec"].pop("affinity")
    answers = iter([[ds], [ds], [lifted]])
    context = StepContext(run_module=lambda name, args: {"resources": next(answers)}, sleep=lambda s: None)
    out = run_step("unsplit_wait", {"nodes": [wait], "until": "helm", "wait_seconds": 10}, context)
    assert out["ok"] and out["left"] == []
    stuck = StepContext(run_module=lambda name, args: {"resources": [ds]}, sleep=lambda s: None)
    out = run_step("unsplit_wait", {"nodes": [wait], "until": "helm", "wait_seconds": 3}, stuck)
    assert not out["ok"] and out["left"] == [name]


@pytest.mark.parametrize("value", ["-1", "soon", "٣", True, 86401])
def test_a_helm_wait_that_is_no_number_of_seconds_is_refused(value):
    with pytest.raises(
        unsplit.UnsplitError, match="gpusplit_unsplit_helm_wait_seconds: .* is not a whole number"
    ):
        unsplit.check_helm_wait(value)


def test_the_helm_wait_reads_whole_seconds():
    assert unsplit.check_helm_wait("120") == 120 and unsplit.check_helm_wait(0) == 0


# ---------------------------------------------------------------------------------------------
# a host of the play that was not reached (gpusplit_unsplit_force)


def test_without_force_a_host_not_reached_is_named_and_left_alone():
    plan = one_node_plan()
    context = StepContext(hostvars={"a-dp": {}, "gone-01": {}}, groups={"all": ["a-dp", "gone-01"]})
    out = run_step("unsplit_plan", {"plan": plan, "to": "host", "hosts": ["a-dp", "gone-01"]}, context)
    assert out["forced"] == []
    assert any(
        "gone-01: not reached" in line and "gpusplit_unsplit_force=true" in line for line in out["lines"]
    )


def test_with_force_a_host_not_reached_has_its_cluster_side_taken_back_and_its_files_left():
    plan = one_node_plan()
    name = plan["nodes"]["a-dp"]["node"]
    context = StepContext(
        hostvars={"a-dp": {}, "gone-01": {"gpusplit_node_name": "gone-node"}},
        groups={"all": ["a-dp", "gone-01"]},
    )
    planned = run_step(
        "unsplit_plan", {"plan": plan, "to": "host", "hosts": ["a-dp", "gone-01"], "force": "true"}, context
    )
    assert planned["forced"] == [{"host": "gone-01", "node": "gone-node"}]
    assert list(planned["hosts"]) == ["a-dp"]  # no host file of gone-01 is touched
    inputs = {
        "plan": plan,
        "to": "host",
        "nodes": [live(name), live("gone-node", tainted=True)],
        "daemonsets": [],
        "forced": planned["forced"],
    }
    out = run_step("unsplit_cluster", inputs, StepContext())["cluster"]
    assert out["refusals"] == [] and out["forced"] == ["gone-node"]
    assert [n["node"] for n in out["nodes"]] == [name]  # not verified: its GPUs were not discovered
    patch = next(p for p in out["node_patches"] if p["metadata"]["name"] == "gone-node")
    assert patch["metadata"]["labels"] == {"gpusplit.io/split": "true"}
    assert {t["name"] for t in out["taint_nodes"]} == {"gone-node"}
    assert "gone-node" in out["prune"][0]["label_selector"] and name in out["prune"][0]["label_selector"]
    assert any("taken back anyway (gpusplit_unsplit_force)" in line for line in out["lines"])
    # the whole cluster counts it as covered by the play
    wide = run_step("unsplit_cluster", {**inputs, "cluster_wide": True}, StepContext())["cluster"]
    assert wide["wide"]["still_split"] == [] and wide["refusals"] == []
    without = run_step("unsplit_cluster", {**inputs, "forced": [], "cluster_wide": True}, StepContext())[
        "cluster"
    ]
    assert without["wide"]["still_split"] == ["gone-node"]


def test_a_forced_host_whose_node_is_gone_takes_nothing_back():
    plan = one_node_plan()
    name = plan["nodes"]["a-dp"]["node"]
    out = unsplit.cluster_plan(
        plan, "kubernetes", [live(name)], [STOCK_EXCLUDED], forced=[{"host": "x", "node": "x"}]
    )
    assert out["forced"] == [] and "x" not in out["prune"][0]["label_selector"]
    assert any("no such node in the cluster: nothing taken back" in line for line in out["lines"])


def test_a_force_setting_that_is_no_boolean_is_refused():
    with pytest.raises(unsplit.UnsplitError, match="gpusplit_unsplit_force: 'perhaps'"):
        unsplit.check_settings("host", force="perhaps")
