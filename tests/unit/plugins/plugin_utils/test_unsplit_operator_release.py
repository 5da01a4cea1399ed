"""The GPU Operator release gpusplit installed itself: the role gpu_operator names it in the ClusterPolicy's record
(gpu_operator.install_marker, original_record), and the whole-cluster unsplit uninstalls it with
gpusplit_unsplit_releases (unsplit_cluster.releases_plan), while a release gpusplit did not install is listed and
left. Against the small server-side-apply model of test_unsplit_clusterpolicy."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpusplit.k8s.plugins.plugin_utils import gpu_operator as G
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import unsplit_cluster as W
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.role_steps import StepContext, run_step
from ansible_collections.gpusplit.k8s.tests.unit.plugins.plugin_utils.test_gpu_operator import VM, fleet
from ansible_collections.gpusplit.k8s.tests.unit.plugins.plugin_utils.test_unsplit_clusterpolicy import (
    Server,
    chart_policy,
    site,
    unsplit,
)
from ansible_collections.gpusplit.k8s.tests.unit.plugins.plugin_utils.test_unsplit_releases import (
    OPERATOR,
    cluster_inputs,
    read,
)

RELEASE = {"namespace": OPERATOR["namespace"], "release": OPERATOR["name"]}


def installed_by_gpusplit():
    """site.yml on a cluster without the operator (gpusplit_operator_install auto): the first decision finds no
    ClusterPolicy, helm installs the chart, the second decision (role gpu_operator, "Decide again") is applied."""
    before = G.operator_config(fleet(), {}, [], {**VM})
    assert before["helm"] and before["objects"] == []
    server = Server(chart_policy(mig={"strategy": "mixed"}))
    hostvars = {host: {} for host in fleet()["nodes"]}
    out = run_step(
        "operator_config",
        {
            "plan": fleet(),
            "settings": VM,
            "clusterpolicies": [server.live()],
            "nodes": [],
            "helm_release": RELEASE,
            "clusterpolicies_before": [],
        },
        StepContext(hostvars=hostvars),
    )
    (obj,) = [o for o in out["config"]["objects"] if o["kind"] == "ClusterPolicy"]
    server.apply(obj, "gpusplit")
    return server


def record(server):
    return json.loads(server.obj["metadata"]["annotations"][G.ANNOTATION_ORIGINAL])


def test_the_record_names_the_release_gpusplit_installed_and_later_runs_keep_it():
    server = installed_by_gpusplit()
    assert record(server)[G.RECORD_INSTALLED] == RELEASE
    assert "toolkit.env" in record(server)  # the fields' record as before
    # a later site.yml finds the ClusterPolicy (no install of its own): the mark stays and nothing is written
    writes = server.writes
    site(server)
    assert record(server)[G.RECORD_INSTALLED] == RELEASE and server.writes == writes


@pytest.mark.parametrize(
    "release, before",
    [
        (RELEASE, [chart_policy()]),  # gpusplit_operator_install helm over a ClusterPolicy that was there
        (None, []),  # helm did not run
    ],
)
def test_a_release_gpusplit_did_not_install_gets_no_mark(release, before):
    assert G.install_marker(release, before) is None
    server = Server(chart_policy())
    obj = G.operator_config(fleet(), {}, [server.live()], {**VM}, installed=G.install_marker(release, before))
    (cp,) = [o for o in obj["objects"] if o["kind"] == "ClusterPolicy"]
    assert G.RECORD_INSTALLED not in json.loads(cp["metadata"]["annotations"][G.ANNOTATION_ORIGINAL])


def test_a_release_without_namespace_or_name_is_refused():
    with pytest.raises(G.OperatorError, match="give the namespace and release"):
        G.install_marker({"namespace": "gpu-operator"}, [])


def test_the_mark_alone_is_recorded_where_gpusplit_sets_no_field():
    text = G.original_record(chart_policy(), {}, "gpusplit", RELEASE)
    obj = G.render_clusterpolicy("p", {}, text)
    assert "spec" not in obj
    assert json.loads(obj["metadata"]["annotations"][G.ANNOTATION_ORIGINAL]) == {G.RECORD_INSTALLED: RELEASE}


def test_the_release_gpusplit_installed_is_listed_with_its_uninstall_and_uninstalled_only_when_asked():
    server = installed_by_gpusplit()
    listed = W.releases_plan([read(OPERATOR, {})], False, [server.live()])
    assert listed["uninstall"] == []
    assert listed["lines"] == [
        "whole cluster: helm release gpu-operator/gpu-operator (GPU Operator, gpusplit's): left: helm uninstall "
        "-n gpu-operator gpu-operator, or run again with gpusplit_unsplit_releases=true"
    ]
    out = W.releases_plan([read(OPERATOR, {})], True, [server.live()])
    assert out["uninstall"] == [{"namespace": "gpu-operator", "name": "gpu-operator"}]
    assert out["lines"][0].endswith("(GPU Operator, gpusplit's): uninstalled once the nodes are verified")


@pytest.mark.parametrize(
    "item",
    [
        {**OPERATOR, "name": "gpu-operator-user"},  # another release of the chart
        {**OPERATOR, "namespace": "nvidia"},  # the same name in another namespace
    ],
)
def test_a_release_the_mark_does_not_name_stays_listed_and_left(item):
    server = installed_by_gpusplit()
    out = W.releases_plan([read(item, {})], True, [server.live()])
    assert out["uninstall"] == []
    assert "(GPU Operator): not proven gpusplit's" in out["lines"][0] and out["lines"][0].endswith(
        "if it is no longer wanted"
    )


def test_an_unreadable_record_proves_nothing():
    server = installed_by_gpusplit()
    live = server.live()
    live["metadata"]["annotations"][G.ANNOTATION_ORIGINAL] = "{not json"
    assert W.releases_plan([read(OPERATOR, {})], True, [live])["uninstall"] == []


def test_the_unsplit_keeps_only_the_mark_so_a_later_run_can_still_uninstall_the_release():
    server = installed_by_gpusplit()
    plan = unsplit(server)
    # the fields go back, the record keeps only the mark, and gpusplit's manager holds only that annotation
    assert record(server) == {G.RECORD_INSTALLED: RELEASE}
    assert "keeps only the Helm release gpusplit installed (gpu-operator/gpu-operator)" in plan["lines"][0]
    assert [p for p, owners in server.owners.items() if "gpusplit" in owners] == [
        ("metadata", "annotations", G.ANNOTATION_ORIGINAL)
    ]
    # the run after it (gpusplit_unsplit_releases=true): nothing more on the ClusterPolicy, the release proven
    assert W.clusterpolicy_plan([server.live()], "gpusplit") == {
        "restore": [],
        "release": [],
        "manager": W.RESTORE_MANAGER,
        "lines": [],
    }
    assert W.releases_plan([read(OPERATOR, {})], True, [server.live()])["uninstall"] == [
        {"namespace": "gpu-operator", "name": "gpu-operator"}
    ]


def test_the_cluster_step_uninstalls_the_operator_release_gpusplit_installed_and_a_second_run_does_nothing():
    server = installed_by_gpusplit()
    out = run_step(
        "unsplit_cluster",
        cluster_inputs(
            releases=[read(OPERATOR, {})],
            clusterpolicies=[server.live()],
            uninstall_releases=True,
            cluster_wide=True,
        ),
        StepContext(),
    )["cluster"]
    assert out["refusals"] == []
    assert out["wide"]["releases"]["uninstall"] == [{"namespace": "gpu-operator", "name": "gpu-operator"}]
    # once uninstalled (the ClusterPolicy went with the chart): nothing is read, nothing said or done
    again = run_step(
        "unsplit_cluster",
        cluster_inputs(
            releases=[read(OPERATOR, present=False)],
            clusterpolicies=[],
            uninstall_releases=True,
            cluster_wide=True,
        ),
        StepContext(),
    )["cluster"]
    assert again["wide"]["releases"] == {"uninstall": [], "lines": []}
    assert again["wide"]["clusterpolicy"]["lines"] == []
