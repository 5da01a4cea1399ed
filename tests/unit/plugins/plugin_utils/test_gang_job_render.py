"""Gang jobs (plugins/plugin_utils/gang_job_render.py, templates/podgroup.yaml.j2, plugins/filter/workload.py):
the 1.37 objects validate strictly against the Kubernetes 1.37 schemas (kubernetes-validate), the 1.36
ones against 1.36, and the two PodGroup shapes differ where k8s.io/api says they do."""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpusplit.k8s.plugins.filter import workload as workload_filters
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import gang_job_render as workload

GPU = "nvidia.com/gpu"
TOLERATION = {"key": "gpusplit.io/gang-test", "operator": "Exists", "effect": "NoSchedule"}
JOB = {
    "name": "train",
    "namespace": "ml",
    "replicas": 4,
    "min_count": 4,
    "gpus_per_pod": 1,
    "node_selector": {"gpusplit.io/pool": "a100"},
    "tolerations": [TOLERATION],
    "command": ["python", "-m", "train"],
    "image": "registry.example/train:1.0",
}


def validate(obj, version):
    # raises kubernetes_validate.ValidationError with the path of the first problem
    return kubernetes_validate.validate(obj, version, strict=True)


def test_gang_job_on_137_is_a_podgroup_and_its_pods():
    objects = workload.render_gang_job(JOB, "1.37.2")
    assert [o["kind"] for o in objects] == ["PodGroup", "Pod", "Pod", "Pod", "Pod"]
    group = objects[0]
    assert group["apiVersion"] == "scheduling.k8s.io/v1beta1"
    assert group["metadata"] == {
        "name": "train",
        "namespace": "ml",
        "labels": {"app.kubernetes.io/managed-by": "gpusplit", "gpusplit.io/podgroup": "train"},
    }
    assert group["spec"] == {"schedulingPolicy": {"gang": {"minCount": 4}}}
    for index, pod in enumerate(objects[1:]):
        assert pod["apiVersion"] == "v1"
        assert pod["metadata"]["name"] == f"train-{index}"
        assert pod["metadata"]["labels"]["gpusplit.io/member-index"] == str(index)
        assert pod["spec"]["schedulingGroup"] == {"podGroupName": "train"}
        assert pod["spec"]["nodeSelector"] == {"gpusplit.io/pool": "a100"}
        assert pod["spec"]["tolerations"] == [TOLERATION]
        (container,) = pod["spec"]["containers"]
        assert container["resources"] == {"requests": {GPU: "1"}, "limits": {GPU: "1"}}
        assert container["command"] == ["python", "-m", "train"]


def test_137_objects_validate_strictly():
    for obj in workload.render_gang_job(JOB, "1.37"):
        assert validate(obj, "1.37") == "1.37"
    basic = workload.render_gang_job({**JOB, "policy": "basic", "min_count": None, "gpus_per_pod": 2}, "1.37")
    assert basic[0]["spec"]["schedulingPolicy"] == {"basic": {}}
    for obj in basic:
        validate(obj, "1.37")
    linked = workload.render_podgroup({**JOB, "workload": {"name": "trainer", "template": "workers"}}, "1.37")
    assert linked["spec"]["workloadRef"] == {"workloadName": "trainer", "templateName": "workers"}
    validate(linked, "1.37")


def test_136_objects_have_the_v1alpha2_shape_and_validate_there():
    objects = workload.render_gang_job(
        {**JOB, "workload": {"name": "trainer", "template": "workers"}}, "v1.36.3"
    )
    group = objects[0]
    assert group["apiVersion"] == "scheduling.k8s.io/v1alpha2"
    assert group["spec"] == {
        "podGroupTemplateRef": {"workload": {"workloadName": "trainer", "podGroupTemplateName": "workers"}},
        "schedulingPolicy": {"gang": {"minCount": 4}},
    }
    for obj in objects:
        assert validate(obj, "1.36") == "1.36"


def test_the_two_shapes_are_not_interchangeable():
    v137 = workload.render_podgroup({**JOB, "workload": {"name": "w", "template": "t"}}, "1.37")
    v136 = workload.render_podgroup({**JOB, "workload": {"name": "w", "template": "t"}}, "1.36")
    # the 1.36 reference inside a 1.37 object is refused by the 1.37 schema ...
    wrong = {**v137, "spec": dict(v136["spec"])}
    with pytest.raises(kubernetes_validate.ValidationError, match="podGroupTemplateRef"):
        validate(wrong, "1.37")
    # ... and 1.37 does not know v1alpha2 at all (it serves scheduling.k8s.io v1, v1beta1, v1alpha3)
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        validate(v136, "1.37")


def test_a_policy_field_the_api_lacks_is_caught_by_the_schema():
    group = workload.render_podgroup(JOB, "1.37")
    group["spec"]["schedulingPolicy"]["gang"]["maxCount"] = 8
    with pytest.raises(kubernetes_validate.ValidationError, match="maxCount"):
        validate(group, "1.37")


def test_cpu_only_members_have_no_resources_block():
    pod = workload.render_member_pod({**JOB, "gpus_per_pod": 0}, 2, "1.37")
    assert "resources" not in pod["spec"]["containers"][0]
    assert pod["metadata"]["name"] == "train-2"
    validate(pod, "1.37")


def test_defaults():
    objects = workload.render_gang_job({"name": "solo"})
    assert len(objects) == 2
    assert objects[0]["spec"]["schedulingPolicy"] == {"gang": {"minCount": 1}}
    pod = objects[1]
    assert pod["metadata"]["namespace"] == "default"
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["containers"][0]["image"] == workload.DEFAULT_IMAGE
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {GPU: "1"}
    assert "nodeSelector" not in pod["spec"] and "tolerations" not in pod["spec"]


def test_values_are_quoted_not_injected():
    tricky = {**JOB, "labels": {"team": "a: b"}, "command": ["sh", "-c", 'echo "x: {y}"\nexit 0']}
    pod = workload.render_member_pod(tricky, 0, "1.37")
    assert pod["metadata"]["labels"]["team"] == "a: b"
    assert pod["spec"]["containers"][0]["command"][2] == 'echo "x: {y}"\nexit 0'


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"min_count": 5}, "min_count 5 > replicas 4: the gang could never reach its quorum"),
        ({"min_count": 0}, "min_count must be >= 1"),
        ({"gpus_per_pod": 0.5}, "gpus_per_pod (requests = limits, whole GPUs) must be an integer"),
        ({"gpus_per_pod": "1.5"}, "must be an integer"),
        ({"gpus_per_pod": True}, "must be an integer"),
        ({"replicas": 0}, "replicas must be >= 1"),
        ({"policy": "all"}, "policy must be one of gang, basic"),
        ({"policy": "basic"}, "min_count applies to policy gang only"),
        ({"name": "Train_1"}, "must be a DNS subdomain"),
        ({"namespace": "a.b"}, "is not a DNS label"),
        ({"workload": {"name": "w"}}, "workload must be {name, template}"),
        ({"tolerations": {"key": "x"}}, "tolerations must be a list"),
        ({"gpu": 1}, "unknown gang job keys: gpu"),
    ],
)
def test_refusals_name_the_problem(change, message):
    with pytest.raises(workload.WorkloadError) as exc:
        workload.render_gang_job({**JOB, **change}, "1.37")
    assert any(message in e for e in exc.value.errors), exc.value.errors


def test_every_problem_is_reported_at_once():
    with pytest.raises(workload.WorkloadError) as exc:
        workload.resolve_job({"name": "", "replicas": -1, "policy": "x"})
    assert len(exc.value.errors) == 3


@pytest.mark.parametrize(
    ("version", "api"),
    [
        ("1.37", "scheduling.k8s.io/v1beta1"),
        ("v1.37.2", "scheduling.k8s.io/v1beta1"),
        ("1.36.3", "scheduling.k8s.io/v1alpha2"),
    ],
)
def test_podgroup_api_version(version, api):
    assert workload.podgroup_api_version(version) == api


def test_135_and_unknown_versions_are_refused():
    with pytest.raises(workload.WorkloadError, match="1.35 has no PodGroup API"):
        workload.podgroup_api_version("1.35.4")
    with pytest.raises(workload.WorkloadError, match="1.38 is not supported"):
        workload.podgroup_api_version("1.38.0")
    with pytest.raises(workload.WorkloadError, match="cannot read a Kubernetes version"):
        workload.podgroup_api_version("latest")


def test_filters():
    f = workload_filters.FilterModule().filters()
    objects = f["gang_job"](JOB, "1.37")
    assert objects == workload.render_gang_job(JOB, "1.37")
    with pytest.raises(AnsibleFilterError, match="gang job refused:\n- min_count 9 > replicas 4"):
        f["gang_job"]({**JOB, "min_count": 9})


def test_rendered_job_is_applyable_yaml():
    text = yaml.safe_dump_all(workload.render_gang_job(JOB, "1.37"))
    docs = list(yaml.safe_load_all(text))
    assert [d["kind"] for d in docs] == ["PodGroup"] + ["Pod"] * 4
