"""Gang jobs in the shape of each release (plugins/plugin_utils/gang_job_render.py, templates/podgroup.yaml.j2):
a v1alpha1 Workload with pod groups on 1.35, a v1alpha2 PodGroup on 1.36, a v1beta1 or v1alpha3 PodGroup on
1.37, picked from what the cluster serves (kubernetes.core.k8s_cluster_info's answer), each validated strictly
against that release's schemas (kubernetes-validate), or refused naming the gates that serve one."""

from __future__ import annotations

import kubernetes_validate
import pytest

from ansible_collections.gpusplit.k8s.plugins.filter import workload as workload_filters
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import gang_job_render as workload

JOB = {"name": "train", "namespace": "ml", "replicas": 3, "gpus_per_pod": 1}


def cluster_info(release, **apis):
    """kubernetes.core.k8s_cluster_info's answer: the server's version and what it serves."""
    return {
        "version": {"server": {"kubernetes": {"gitVersion": f"v{release}"}}},
        "apis": {"v1": {"Pod": {}}, "scheduling.k8s.io/v1": {"PriorityClass": {}}, **apis},
    }


# what each release serves with GenericWorkload and its runtime-config on (k8s.io/kubernetes
# pkg/registry/scheduling/rest/storage_scheduling.go of v1.35.4, v1.36.3, v1.37.2)
ON = {
    "1.35.4": {"scheduling.k8s.io/v1alpha1": {"Workload": {}}},
    "1.36.3": {"scheduling.k8s.io/v1alpha2": {"Workload": {}, "PodGroup": {}}},
    "1.37.2": {"scheduling.k8s.io/v1beta1": {"Workload": {}, "PodGroup": {}}},
}


def validate(obj, minor):
    return kubernetes_validate.validate(obj, minor, strict=True)


def test_135_gang_is_a_v1alpha1_workload_with_one_pod_group_and_pods_naming_it():
    objects = workload.render_gang_job(JOB, cluster_info("1.35.4", **ON["1.35.4"]))
    assert [o["kind"] for o in objects] == ["Workload", "Pod", "Pod", "Pod"]
    group = objects[0]
    assert group["apiVersion"] == "scheduling.k8s.io/v1alpha1"
    assert group["spec"] == {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": 3}}}]}
    for pod in objects[1:]:
        assert pod["spec"]["workloadRef"] == {"name": "train", "podGroup": "workers"}
        assert "schedulingGroup" not in pod["spec"]  # a 1.36 field: 1.35's schema refuses it
    for obj in objects:
        assert validate(obj, "1.35") == "1.35"
    basic = workload.render_podgroup({**JOB, "policy": "basic"}, "1.35")
    assert basic["spec"]["podGroups"] == [{"name": "workers", "policy": {"basic": {}}}]
    validate(basic, "1.35")


def test_a_1_36_member_pod_is_refused_by_the_1_35_schema():
    pod = workload.render_member_pod(JOB, 0, "1.36")
    with pytest.raises(kubernetes_validate.ValidationError, match="schedulingGroup"):
        validate(pod, "1.35")


@pytest.mark.parametrize(
    ("release", "api_version", "kind", "minor"),
    [
        ("1.35.4", "scheduling.k8s.io/v1alpha1", "Workload", "1.35"),
        ("1.36.3", "scheduling.k8s.io/v1alpha2", "PodGroup", "1.36"),
        ("1.37.2", "scheduling.k8s.io/v1beta1", "PodGroup", "1.37"),
    ],
)
def test_the_shape_follows_what_the_cluster_serves(release, api_version, kind, minor):
    objects = workload.render_gang_job(JOB, cluster_info(release, **ON[release]))
    assert (objects[0]["apiVersion"], objects[0]["kind"]) == (api_version, kind)
    for obj in objects:
        validate(obj, minor)
    # the filter takes the same answer
    f = workload_filters.FilterModule().filters()["gang_job"]
    assert f(JOB, cluster_info(release, **ON[release])) == objects


def test_137_with_only_v1alpha3_on_gets_a_v1alpha3_podgroup_of_the_v1beta1_shape():
    info = cluster_info("1.37.2", **{"scheduling.k8s.io/v1alpha3": {"Workload": {}, "PodGroup": {}}})
    linked = {**JOB, "workload": {"name": "trainer", "template": "workers"}}
    group = workload.render_podgroup(linked, info)
    assert group["apiVersion"] == "scheduling.k8s.io/v1alpha3"
    assert group["spec"]["workloadRef"] == {"workloadName": "trainer", "templateName": "workers"}
    validate(group, "1.37")
    # both served: v1beta1 first
    both = cluster_info("1.37.2", **{**ON["1.37.2"], "scheduling.k8s.io/v1alpha3": {"PodGroup": {}}})
    assert workload.gang_api_version(both) == "scheduling.k8s.io/v1beta1"


@pytest.mark.parametrize(
    ("release", "gates"),
    [
        ("1.35.4", ("GenericWorkload (alpha", "GangScheduling (alpha", "scheduling.k8s.io/v1alpha1=true")),
        ("1.36.3", ("GenericWorkload (alpha", "GangScheduling (alpha", "scheduling.k8s.io/v1alpha2=true")),
        ("1.37.2", ("GenericWorkload (beta", "scheduling.k8s.io/v1beta1=true")),
    ],
)
def test_a_cluster_serving_no_gang_api_is_refused_naming_the_gates_of_its_release(release, gates):
    with pytest.raises(workload.WorkloadError) as err:
        workload.render_gang_job(JOB, cluster_info(release))
    (text,) = err.value.errors
    assert text.startswith("a gang job needs PodGroup in scheduling.k8s.io/v1beta1")
    assert f"Kubernetes v{release} serves none of them" in text
    for words in gates:
        assert words in text
    if release == "1.37.2":
        assert "GangScheduling" not in text  # merged into GenericWorkload in 1.37
    assert text.endswith("Nothing was changed.")


def test_136_serving_only_a_workload_is_not_taken_for_135():
    # a v1alpha2 Workload has pod group templates, not 1.35's pod groups: no gang is written in it
    info = cluster_info("1.36.3", **{"scheduling.k8s.io/v1alpha2": {"Workload": {}}})
    with pytest.raises(workload.WorkloadError, match="serves none of them"):
        workload.gang_api_version(info)


def test_group_versions_and_releases_named_by_the_caller():
    assert workload.gang_api_version("1.35") == "scheduling.k8s.io/v1alpha1"
    assert workload.gang_api_version("v1.36.3") == "scheduling.k8s.io/v1alpha2"
    assert workload.gang_api_version("scheduling.k8s.io/v1alpha3") == "scheduling.k8s.io/v1alpha3"
    with pytest.raises(workload.WorkloadError, match="not 'scheduling.k8s.io/v1alpha9'"):
        workload.gang_api_version("scheduling.k8s.io/v1alpha9")
    with pytest.raises(workload.WorkloadError, match="1.34 is not supported for gang jobs"):
        workload.gang_api_version("1.34.0")


def test_workload_link_on_135_is_refused():
    with pytest.raises(workload.WorkloadError, match="leave workload out"):
        workload.render_gang_job({**JOB, "workload": {"name": "w", "template": "t"}}, "1.35")


# control_plane_health's answer for kube-scheduler, asked for both gates: its kubernetes_feature_enabled values,
# null where the release registers no such gate (GangScheduling on 1.37)
def scheduler(**gates):
    return {"healthy": False, "feature_gates": {"kube-scheduler": gates}}


@pytest.mark.parametrize("release", ["1.35.4", "1.36.3"])
def test_a_scheduler_without_gang_scheduling_is_refused_naming_the_gate(release):
    info = cluster_info(release, **ON[release])
    with pytest.raises(workload.WorkloadError) as err:
        workload.render_gang_job(JOB, info, scheduler(GenericWorkload=1.0, GangScheduling=0.0))
    (text,) = err.value.errors
    assert f"Kubernetes v{release} serves the API, but GangScheduling on kube-scheduler is off" in text
    assert "GangScheduling (alpha, off by default; kube-scheduler)" in text
    assert "gpusplit_feature_gates {GenericWorkload: true, GangScheduling: true}" in text
    assert text.endswith("Nothing was changed.")
    # with the gate on the same job renders, in the release's shape
    objects = workload.render_gang_job(JOB, info, scheduler(GenericWorkload=1.0, GangScheduling=1.0))
    assert objects == workload.render_gang_job(JOB, info)
    # the filter takes control_plane_health's answer as its second argument
    f = workload_filters.FilterModule().filters()["gang_job"]
    assert f(JOB, info, scheduler(GenericWorkload=True, GangScheduling=True)) == objects


def test_137_needs_no_gang_scheduling_but_generic_workload_on_the_scheduler():
    info = cluster_info("1.37.2", **ON["1.37.2"])
    # 1.37 registers no GangScheduling: its metric is absent (null), and nothing asks for it
    assert workload.render_gang_job(JOB, info, scheduler(GenericWorkload=1.0, GangScheduling=None))
    with pytest.raises(workload.WorkloadError, match="GenericWorkload on kube-scheduler is off"):
        workload.render_gang_job(JOB, info, {"kube-scheduler": {"GenericWorkload": False}})


def test_a_scheduler_that_does_not_report_the_gate_is_refused_saying_how_to_read_it():
    info = cluster_info("1.36.3", **ON["1.36.3"])
    for gates in ({}, scheduler(GenericWorkload=1.0), {"kube-apiserver": {"GangScheduling": True}}):
        with pytest.raises(workload.WorkloadError) as err:
            workload.render_gang_job(JOB, info, gates)
        (text,) = err.value.errors
        assert "do not say whether kube-scheduler runs with" in text and "GangScheduling" in text, text
        assert "gpusplit.k8s.control_plane_health" in text and "GangScheduling: true" in text


def test_gates_of_the_wrong_shape_or_without_a_release_are_refused_with_the_spec_errors():
    info = cluster_info("1.35.4", **ON["1.35.4"])
    with pytest.raises(workload.WorkloadError) as err:
        workload.render_gang_job({**JOB, "replicas": 0}, info, {"kube-scheduler": {"GangScheduling": "on"}})
    assert err.value.errors == [
        "gates.kube-scheduler.GangScheduling: expected true, false, 0 or 1, got string",
        "replicas must be >= 1, got 0",
    ]
    with pytest.raises(workload.WorkloadError) as err:
        workload.render_gang_job(
            {**JOB, "replicas": 0}, info, scheduler(GenericWorkload=0.0, GangScheduling=1.0)
        )
    # every reason at once: the gate and the spec
    assert len(err.value.errors) == 2 and "GenericWorkload on kube-scheduler is off" in err.value.errors[0]
    assert err.value.errors[1] == "replicas must be >= 1, got 0"
    with pytest.raises(workload.WorkloadError, match="gates: expected"):
        workload.render_gang_job(JOB, info, ["GangScheduling"])
    with pytest.raises(workload.WorkloadError, match="needs the cluster's release"):
        workload.render_gang_job(
            JOB, "scheduling.k8s.io/v1alpha2", scheduler(GenericWorkload=1, GangScheduling=1)
        )
    # a release named by the caller is checked like the cluster's answer
    with pytest.raises(workload.WorkloadError, match="GangScheduling on kube-scheduler is off"):
        workload.render_podgroup(JOB, "1.36", scheduler(GenericWorkload=1, GangScheduling=0))
