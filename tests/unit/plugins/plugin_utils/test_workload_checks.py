"""Workload lint (pure, over manifests) and the admission guard's rendered objects."""

from __future__ import annotations

import copy

import kubernetes_validate
import pytest
import yaml

from ansible_collections.gpusplit.k8s.plugins.filter import workload_lint as lint_filter
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import workload_checks as wl
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.role_steps import StepContext, run_step

K8S = "1.37"
GPU_TOL = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def container(name="main", limits=None, requests=None, env=None, env_from=None):
    c = {"name": name, "image": "registry.example/train:1"}
    res = {}
    if limits is not None:
        res["limits"] = limits
    if requests is not None:
        res["requests"] = requests
    if res:
        c["resources"] = res
    if env:
        c["env"] = [{"name": k, "value": v} for k, v in env.items()]
    if env_from:
        c["envFrom"] = env_from
    return c


def pod_spec(*containers, tolerations=None, runtime_class=None, init=None, ephemeral=None):
    spec = {"containers": list(containers)}
    if tolerations:
        spec["tolerations"] = tolerations
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    if init:
        spec["initContainers"] = init
    if ephemeral:
        spec["ephemeralContainers"] = ephemeral
    return spec


def wrap(kind, spec, name="w", ns="team-a"):
    meta = {"name": name, "namespace": ns}
    template = {"metadata": {"labels": {"app": name}}, "spec": spec}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    if kind == "PodTemplate":
        return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": meta, "template": template}
    if kind == "CronJob":
        return {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": meta,
            "spec": {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": template}}},
        }
    api = "batch/v1" if kind == "Job" else "apps/v1"
    body = {"template": template}
    if kind != "Job":
        body["selector"] = {"matchLabels": {"app": name}}
    return {"apiVersion": api, "kind": kind, "metadata": meta, "spec": body}


def rules(findings):
    return sorted((f["rule"], f["container"]) for f in findings)


KINDS = ["Pod", "PodTemplate", "Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob"]


@pytest.mark.parametrize("kind", KINDS)
def test_clean_gpu_workload_of_every_kind(kind):
    obj = wrap(kind, pod_spec(container(limits={"nvidia.com/gpu": 2}), tolerations=[GPU_TOL]))
    kubernetes_validate.validate(obj, K8S, strict=True)  # the fixtures are real objects
    assert wl.lint([obj], gpu_taint=True) == []


@pytest.mark.parametrize("kind", KINDS)
def test_every_rule_fires_in_every_kind(kind):
    spec = pod_spec(
        container("a", requests={"nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "2"}),
        container("b", limits={"nvidia.com/gpu": "0.5"}, env={"NVIDIA_VISIBLE_DEVICES": "all"}),
        runtime_class="nvidia",
    )
    obj = wrap(kind, spec)
    findings = wl.lint([obj], gpu_taint=True)
    assert rules(findings) == [
        ("extended-resource-integer", "b"),
        ("extended-resource-requests-equal-limits", "a"),
        ("gpu-taint-toleration", None),
        ("runtime-class-nvidia", None),
        ("visible-devices-env", "b"),
    ]
    for f in findings:
        assert f["object"] == f"{kind}/team-a/w"
        assert f["message"] and f["fix"]
        assert f["severity"] == "error"


def test_requests_equal_limits_details():
    cases = {
        "request only": container(requests={"nvidia.com/gpu": "1"}),
        "differ": container(requests={"nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "2"}),
    }
    for label, c in cases.items():
        (f,) = wl.lint([wrap("Pod", pod_spec(c))])
        assert f["rule"] == "extended-resource-requests-equal-limits", label
    ok = [
        container(limits={"nvidia.com/gpu": "1"}),  # the request defaults to the limit
        container(requests={"nvidia.com/gpu": 1}, limits={"nvidia.com/gpu": "1"}),  # 1 == "1"
        container(requests={"nvidia.com/gpu": "1k"}, limits={"nvidia.com/gpu": "1000"}),
        container(requests={"cpu": "500m"}, limits={"cpu": "1"}),  # not an extended resource
    ]
    for c in ok:
        assert wl.lint([wrap("Pod", pod_spec(c))]) == [], c


@pytest.mark.parametrize("value", ["0.5", "500m", "1.5", "-1", "a lot"])
def test_non_integer_amounts(value):
    c = container(limits={"nvidia.com/gpu": value})
    (f,) = wl.lint([wrap("Pod", pod_spec(c))])
    assert f["rule"] == "extended-resource-integer"
    assert repr(value) in f["message"]
    assert f["fix"] == (
        "use a whole number, e.g. nvidia.com/gpu: 1 (for a share of a GPU: MIG devices, gpusplit_mig_strategy "
        "single or mixed, or time-sliced replicas of the Kubernetes share, gpusplit_sharing; docs/sharing.md)"
    )


def test_other_nvidia_extended_resources_follow_the_same_rules():
    c = container(requests={"nvidia.com/mig-1g.10gb": "1"}, limits={"nvidia.com/mig-1g.10gb": "2"})
    assert rules(wl.lint([wrap("Pod", pod_spec(c))])) == [("extended-resource-requests-equal-limits", "main")]


@pytest.mark.parametrize(
    "resource",
    ["amd.com/gpu", "example.com/foo", "gpu.intel.com/i915", "vendor.io/nic-vf", "kubernetes.io.example/x"],
)
def test_every_extended_resource_follows_the_same_rules(resource):
    differ = container(requests={resource: "1"}, limits={resource: "2"})
    assert rules(wl.lint([wrap("Pod", pod_spec(differ))])) == [
        ("extended-resource-requests-equal-limits", "main")
    ]
    (f,) = wl.lint([wrap("Pod", pod_spec(container(requests={resource: "1"})))])
    assert (f["rule"], f["fix"]) == (
        "extended-resource-requests-equal-limits",
        f"set resources.limits.{resource}: 1 (or only the limit: the request defaults to it)",
    )
    (f,) = wl.lint([wrap("Pod", pod_spec(container(limits={resource: "500m"})))])
    assert f["rule"] == "extended-resource-integer"
    assert f["message"] == f"container main: {resource} limit '500m' is not a whole number; " + (
        "an extended resource is counted in whole units"
    )
    assert (
        f["fix"] == f"use a whole number, e.g. {resource}: 1"
    )  # the GPU-share advice is for nvidia.com only
    assert wl.lint([wrap("Pod", pod_spec(container(requests={resource: 2}, limits={resource: "2"})))]) == []


@pytest.mark.parametrize(
    "resource",
    [
        "cpu",
        "memory",
        "ephemeral-storage",
        "hugepages-2Mi",
        "hugepages-1Gi",
        "kubernetes.io/batch-cpu",  # the kubernetes.io namespace is native
        "scheduling.kubernetes.io/foo",  # and so is every *.kubernetes.io
        "requests.example.com/foo",  # a quota name, never an extended resource
    ],
)
def test_native_resources_and_hugepages_may_differ_and_be_fractions(resource):
    c = container(requests={resource: "500m"}, limits={resource: "1"})
    assert wl.lint([wrap("Pod", pod_spec(c))]) == [], resource
    assert not wl.is_extended_resource(resource)


def test_is_extended_resource():
    for name in ("nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "amd.com/gpu", "example.com/foo"):
        assert wl.is_extended_resource(name), name


@pytest.mark.parametrize("name", ["NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"])
def test_visibility_env_in_every_container_list(name):
    spec = pod_spec(
        container("app"),
        init=[container("init", env={name: "0"})],
        ephemeral=[container("debug", env={name: "all"})],
    )
    findings = wl.lint([wrap("Pod", spec)])
    assert rules(findings) == [("visible-devices-env", "debug"), ("visible-devices-env", "init")]
    assert "ephemeralContainer debug sets" in [f for f in findings if f["container"] == "debug"][0]["message"]


def test_cuda_visible_devices_is_a_warning():
    """CUDA_VISIBLE_DEVICES selects among the container's own GPUs (issue 18): a warning, not an error."""
    spec = pod_spec(container("app", limits={"nvidia.com/gpu": 2}, env={"CUDA_VISIBLE_DEVICES": "0"}))
    (finding,) = wl.lint([wrap("Pod", spec)])
    assert (finding["rule"], finding["severity"], finding["container"]) == (
        "cuda-visible-devices-env",
        "warning",
        "app",
    )
    assert "reaches no other GPU" in finding["message"]
    assert wl.lint([wrap("Pod", spec, ns="kube-system")]) == []
    # an envFrom source that could carry it is a warning too; with the NVIDIA_ names as before
    env_from = [{"configMapRef": {"name": "cuda-only"}, "prefix": "CUDA_"}]
    (finding,) = wl.lint([wrap("Pod", pod_spec(container(env_from=env_from)))])
    assert finding["rule"] == "visible-devices-env-from" and "CUDA_VISIBLE_DEVICES" in finding["message"]


def test_pod_template_is_linted():
    """The PodTemplate kind (template.spec) is linted like the workloads (issue 18)."""
    obj = wrap("PodTemplate", pod_spec(container(env={"NVIDIA_VISIBLE_DEVICES": "all"})))
    kubernetes_validate.validate(obj, K8S, strict=True)
    assert rules(wl.lint([obj])) == [("visible-devices-env", "main")]
    assert wl.lint([obj])[0]["object"] == "PodTemplate/team-a/w"


def test_allowed_namespaces_may_set_env_and_runtime_class():
    spec = pod_spec(container(env={"NVIDIA_VISIBLE_DEVICES": "GPU-1"}), runtime_class="nvidia")
    assert wl.lint([wrap("DaemonSet", spec, ns="kube-system")]) == []
    assert wl.lint([wrap("DaemonSet", spec, ns="gpu-ops")], allowed_namespaces=["gpu-ops"]) == []
    # no namespace in the manifest: the default namespace is what it lands in
    obj = wrap("Pod", spec)
    del obj["metadata"]["namespace"]
    assert {f["rule"] for f in wl.lint([obj])} == {"visible-devices-env", "runtime-class-nvidia"}
    assert wl.lint([obj], allowed_namespaces=["default"]) == []


def test_env_from_is_a_warning_when_it_could_carry_the_names():
    env_from = [
        {"configMapRef": {"name": "all-keys"}},
        {"secretRef": {"name": "prefixed"}, "prefix": "NVIDIA_"},
        {"configMapRef": {"name": "harmless"}, "prefix": "APP_"},
    ]
    findings = wl.lint([wrap("Pod", pod_spec(container(env_from=env_from)))])
    assert [(f["rule"], f["severity"]) for f in findings] == [("visible-devices-env-from", "warning")] * 2
    assert "ConfigMap all-keys" in findings[0]["message"]
    assert "Secret prefixed with prefix NVIDIA_" in findings[1]["message"]
    assert "CUDA" not in findings[1]["message"]
    assert wl.lint([wrap("Pod", pod_spec(container(env_from=env_from)))], check_env_from=False) == []


def test_gpu_taint_toleration():
    gpu = container(limits={"nvidia.com/gpu": "1"})
    untolerated = wrap("Deployment", pod_spec(gpu))
    assert wl.lint([untolerated]) == []  # the fleet does not taint: nothing to tolerate
    (f,) = wl.lint([untolerated], gpu_taint=True)
    assert f["rule"] == "gpu-taint-toleration"
    assert "nvidia.com/gpu=present:NoSchedule" in f["message"]
    assert "{key: nvidia.com/gpu, operator: Equal, value: present, effect: NoSchedule}" in f["fix"]
    for tol in (
        GPU_TOL,
        {"operator": "Exists"},
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
    ):
        assert wl.lint([wrap("Deployment", pod_spec(gpu, tolerations=[tol]))], gpu_taint=True) == [], tol
    wrong = {"key": "nvidia.com/gpu", "value": "absent", "effect": "NoSchedule"}
    assert len(wl.lint([wrap("Deployment", pod_spec(gpu, tolerations=[wrong]))], gpu_taint=True)) == 1
    # no GPU asked: no toleration needed
    assert wl.lint([wrap("Deployment", pod_spec(container()))], gpu_taint=True) == []
    custom = {"key": "gpu", "value": "", "effect": "NoSchedule"}
    (f,) = wl.lint([untolerated], gpu_taint=custom)
    assert "operator: Exists" in f["fix"]
    with pytest.raises(wl.LintError):
        wl.lint([untolerated], gpu_taint={"value": "x"})


def dra_spec(claims=("gpu",), referenced=("gpu",), init_refs=(), tolerations=None):
    """A pod spec getting devices through DRA: pod-level claims, containers naming some of them."""
    main = container()
    if referenced:
        main["resources"] = {"claims": [{"name": n} for n in referenced]}
    init = None
    if init_refs:
        init = [dict(container("prep"), resources={"claims": [{"name": n} for n in init_refs]})]
    spec = pod_spec(main, tolerations=tolerations, init=init)
    spec["resourceClaims"] = [{"name": n, "resourceClaimTemplateName": f"{n}-template"} for n in claims]
    return spec


@pytest.mark.parametrize("kind", KINDS)
def test_gpu_taint_toleration_counts_dra_claims(kind):
    obj = wrap(kind, dra_spec())
    kubernetes_validate.validate(obj, K8S, strict=True)  # a real 1.37 object
    assert wl.lint([obj]) == []  # the fleet does not taint: nothing to tolerate
    (f,) = wl.lint([obj], gpu_taint=True)
    assert f["rule"] == "gpu-taint-toleration"
    assert f["message"] == (
        "gets devices through resource claim(s) gpu (DRA) but does not tolerate the fleet's GPU taint "
        "nvidia.com/gpu=present:NoSchedule: it would stay Pending"
    )
    assert "{key: nvidia.com/gpu, operator: Equal, value: present, effect: NoSchedule}" in f["fix"]
    assert wl.lint([wrap(kind, dra_spec(tolerations=[GPU_TOL]))], gpu_taint=True) == []


def test_dra_claims_only_when_a_container_names_them():
    # a claim no container names gives no container a device
    assert wl.dra_claims(dra_spec(referenced=())) == []
    assert wl.lint([wrap("Pod", dra_spec(referenced=()))], gpu_taint=True) == []
    # an init container's claim counts; only the named claims are listed, in the pod's order
    spec = dra_spec(claims=("a", "b", "c"), referenced=("c",), init_refs=("a",))
    assert wl.dra_claims(spec) == ["a", "c"]
    (f,) = wl.lint([wrap("Job", spec)], gpu_taint=True)
    assert f["message"].startswith("gets devices through resource claim(s) a, c (DRA)")
    # a pod with both GPUs and claims is told about its GPUs
    both = dra_spec()
    both["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    (f,) = wl.lint([wrap("Pod", both)], gpu_taint=True)
    assert f["message"].startswith("requests GPUs but")


def test_lists_multi_docs_and_other_kinds():
    bad = wrap("Pod", pod_spec(container(limits={"nvidia.com/gpu": "0.5"})))
    docs = [
        {
            "apiVersion": "v1",
            "kind": "List",
            "items": [bad, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}],
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "c"},
            "data": {"NVIDIA_VISIBLE_DEVICES": "all"},
        },
        None,
    ]
    assert rules(wl.lint(docs)) == [("extended-resource-integer", "main")]
    assert rules(wl.lint(bad)) == [("extended-resource-integer", "main")]  # a single manifest


def test_table_and_filter():
    bad = wrap("Job", pod_spec(container(env={"NVIDIA_VISIBLE_DEVICES": "all"})), name="etl")
    findings = lint_filter.workload_lint([bad])
    table = lint_filter.lint_table(findings)
    assert table.splitlines()[0].startswith("ERROR    Job/team-a/etl  [main]  visible-devices-env: ")
    assert table.splitlines()[-1] == "1 finding(s): 1 error(s), 0 warning(s)"
    assert wl.lint_table([]) == "no findings"
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError):
        lint_filter.FilterModule().filters()["workload_lint"]([bad], gpu_taint={"key": ""})


# --------------------------------------------------------------------------------------------
# the admission guard


def test_guard_objects_are_valid_1_37_objects():
    policy, binding = wl.guard_objects()
    for obj in (policy, binding):
        kubernetes_validate.validate(obj, K8S, strict=True)
    assert policy["kind"] == "ValidatingAdmissionPolicy"
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert policy["spec"]["failurePolicy"] == "Fail"
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["operations"] == ["CREATE", "UPDATE"]
    assert rule["resources"] == ["pods", "pods/ephemeralcontainers"]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"] == "gpusplit-visible-devices"
    assert binding["spec"]["validationActions"] == ["Deny"]
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert variables["forbidden"] == '["NVIDIA_VISIBLE_DEVICES"]'
    for list_name in ("containers", "initContainers", "ephemeralContainers"):
        assert f"object.spec.{list_name}" in variables["offenders"]
        assert f"oldObject.spec.{list_name}" in variables["before"]
    validation, mounts = policy["spec"]["validations"]
    assert validation["expression"] == "variables.offenders.all(o, o in variables.before)"
    assert "NVIDIA_VISIBLE_DEVICES" in validation["message"]
    for list_name in ("containers", "initContainers", "ephemeralContainers"):
        assert f"object.spec.{list_name}" in variables["mounts"]
        assert f"oldObject.spec.{list_name}" in variables["mountsBefore"]
    assert mounts["expression"] == "variables.mounts.all(o, o in variables.mountsBefore)"
    assert "/var/run/nvidia-container-devices" in mounts["message"]
    selector = binding["spec"]["matchResources"]["namespaceSelector"]
    assert selector == {
        "matchExpressions": [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": ["gpu-operator", "kube-system"],
            },
            {"key": "gpusplit.io/allow-visible-devices", "operator": "NotIn", "values": ["true"]},
        ]
    }
    for obj in (policy, binding):
        assert obj["metadata"]["labels"] == {
            "app.kubernetes.io/managed-by": "gpusplit",
            "app.kubernetes.io/name": "gpusplit-admission-guard",
            "gpusplit.io/guard": "gpusplit-visible-devices",
        }


def test_guard_settings_reach_the_objects():
    policy, binding = wl.guard_objects(
        {
            "name": "guard-test",
            "forbidden_env": ["NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"],
            "allowed_namespaces": ["ml-platform"],
            "allow_label": "",
            "match_labels": {"tenant": "blue"},
            "validation_actions": ["Warn", "Audit"],
        }
    )
    for obj in (policy, binding):
        kubernetes_validate.validate(obj, K8S, strict=True)
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert variables["forbidden"] == '["NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"]'
    assert binding["spec"]["validationActions"] == ["Warn", "Audit"]
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {
        "matchLabels": {"tenant": "blue"},
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["ml-platform"]}
        ],
    }
    _, open_binding = wl.guard_objects({"allowed_namespaces": [], "allow_label": ""})
    kubernetes_validate.validate(open_binding, K8S, strict=True)
    assert open_binding["spec"]["matchResources"]["namespaceSelector"] == {"matchExpressions": []}


@pytest.mark.parametrize(
    "settings",
    [
        {"name": "Bad_Name"},
        {"forbidden_env": []},
        {"forbidden_env": ["NVIDIA VISIBLE"]},
        {"forbidden_env": ['x"] || true || ["']},  # nothing reaches the CEL that is not a plain name
        {"allowed_namespaces": ["Kube_System"]},
        {"allow_label": "bad key!"},
        {"match_labels": {"tenant": "a b"}},
        {"validation_actions": ["Deny", "Warn"]},
        {"validation_actions": ["Block"]},
        {"unknown": 1},
    ],
)
def test_guard_refuses_bad_settings(settings):
    with pytest.raises(wl.LintError):
        wl.guard_objects(settings)


# the guard's CEL, evaluated by the CEL library the diagnose uses (common-expression-language);
# tests/integration/test_admission_guard.py runs the same policy in the lab's kube-apiserver


def admission(policy, pod, old=None, namespace="team-a"):
    """The messages of the validations that ``policy`` fails for ``pod`` (an UPDATE when ``old``)."""
    cel = pytest.importorskip("cel")
    from cel import stdlib

    context = cel.Context()
    stdlib.add_stdlib_to_context(context)
    context.add_variable("object", pod)
    context.add_variable("oldObject", old)
    context.add_variable("request", {"namespace": namespace})
    variables = {}
    for variable in policy["spec"]["variables"]:  # in order: a variable may read the ones before
        context.add_variable("variables", variables)
        variables[variable["name"]] = cel.evaluate(variable["expression"], context)
    context.add_variable("variables", variables)
    return [
        cel.evaluate(v["messageExpression"], context)
        for v in policy["spec"]["validations"]
        if cel.evaluate(v["expression"], context) is not True
    ]


def mounting(*paths, list_name="containers", env=None):
    mounts = [{"name": f"v{i}", "mountPath": path} for i, path in enumerate(paths)]
    spec = {"containers": [container("main", env=env)]}
    spec.setdefault(list_name, []).append({"name": "side", "image": "x", "volumeMounts": mounts})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"}, "spec": spec}


@pytest.mark.parametrize("list_name", ["containers", "initContainers", "ephemeralContainers"])
@pytest.mark.parametrize(
    "path",
    [
        "/var/run/nvidia-container-devices/all",
        "/var/run/nvidia-container-devices/GPU-d17388da-cce8-eb28-c8fa-9f8f1d69497d",
        "/var/run/nvidia-container-devices/0",
        "/var/run/nvidia-container-devices",  # the directory itself
        "/var/run/nvidia-container-devices/cdi/nvidia.com/gpu/all",
        # the toolkit cleans the path, then needs the root as a prefix, no separator after it
        "/var/run//nvidia-container-devices/./all",
        "/var/run/x/../nvidia-container-devices/all",
        "/var/run/nvidia-container-devicesall",
        "/var/run/nvidia-container-devices0/",
    ],
)
def test_guard_rejects_a_volume_mounted_where_the_toolkit_reads_devices(path, list_name):
    policy, _ = wl.guard_objects()
    (message,) = admission(policy, mounting("/data", path, list_name=list_name))
    kind = list_name[:-1]
    assert message.startswith(f"{kind} side mounts volume v1 at {path} of pod team-a/p: "), message
    assert (
        "reads a volume mounted under /var/run/nvidia-container-devices as a request for the GPU" in message
    )
    assert "mount the volume elsewhere" in message and "request nvidia.com/gpu instead" in message


@pytest.mark.parametrize(
    "path",
    [
        "/data",
        "/var/run",
        "/var/run/secrets/kubernetes.io/serviceaccount",
        "/opt/nvidia-container",
        "/dev/shm",
    ],
)
def test_guard_admits_volumes_mounted_elsewhere(path):
    policy, _ = wl.guard_objects()
    assert admission(policy, mounting(path)) == []


def test_guard_mount_rule_rejects_only_new_offenders_and_names_them_all():
    policy, _ = wl.guard_objects()
    before = mounting("/var/run/nvidia-container-devices/all")
    # an update of a pod admitted before the guard (a label, a finaliser) goes through
    assert admission(policy, before, old=before) == []
    # kubectl debug adding an ephemeral container with such a mount does not
    after = copy.deepcopy(before)
    after["spec"]["ephemeralContainers"] = [
        {
            "name": "dbg",
            "image": "x",
            "volumeMounts": [{"name": "v0", "mountPath": "/var/run/nvidia-container-devices/0"}],
        }
    ]
    (message,) = admission(policy, after, old=before)
    assert message.startswith(
        "ephemeralContainer dbg mounts volume v0 at /var/run/nvidia-container-devices/0 of pod"
    )
    # several mounts of one container, several containers: every one is named
    two = mounting("/var/run/nvidia-container-devices/0", "/var/run/nvidia-container-devices/1")
    two["spec"]["initContainers"] = [copy.deepcopy(two["spec"]["containers"][1])]
    (message,) = admission(policy, two)
    assert message.startswith(
        "container side mounts volume v0 at /var/run/nvidia-container-devices/0, volume v1 at "
        "/var/run/nvidia-container-devices/1; initContainer side mounts "
    ), message


def test_guard_env_and_mount_rules_each_say_what_to_fix():
    policy, _ = wl.guard_objects()
    both = mounting("/var/run/nvidia-container-devices/all", env={"NVIDIA_VISIBLE_DEVICES": "all"})
    env, mount = admission(policy, both)
    assert env.startswith("container main of pod team-a/p set NVIDIA_VISIBLE_DEVICES: ")
    assert mount.startswith("container side mounts volume v0 at /var/run/nvidia-container-devices/all")
    generated = mounting("/var/run/nvidia-container-devices/all")
    generated["metadata"] = {"generateName": "job-", "namespace": "team-a"}
    (message,) = admission(policy, generated)
    assert "of pod team-a/job-*: " in message
    # where the rule applies is the binding's (the env rule's exemptions): not the policy's business
    assert admission(policy, mounting("/var/run/nvidia-container-devices/all"), namespace="kube-system")


def test_the_mount_pattern_is_the_toolkits_root():
    assert wl.DEVICE_LIST_MOUNT_ROOT == "/var/run/nvidia-container-devices"
    assert wl.DEVICE_LIST_MOUNT_PATTERN == "(^|/)nvidia-container-devices"


def test_guard_step_and_yaml_round_trip():
    objs = run_step("guard_objects", {"guard": {"name": "g"}}, StepContext())["objects"]
    assert yaml.safe_load(yaml.safe_dump(objs)) == objs
    first = wl.guard_objects({"name": "g"})
    assert copy.deepcopy(objs[: len(first)]) == first  # deterministic, the guard first


# --------------------------------------------------------------------------------------------
# bad input (issue 18, cases 1 and 13): refused naming the object and path, never skipped


def lint_refusal(*args, **kwargs):
    with pytest.raises(wl.LintError) as err:
        wl.lint(*args, **kwargs)
    return err.value.errors


def test_yaml_text_is_refused_not_read_as_no_findings():
    text = yaml.safe_dump(wrap("Pod", pod_spec(container(env={"NVIDIA_VISIBLE_DEVICES": "all"}))))
    (msg,) = lint_refusal(text)
    assert msg.startswith("manifests: expected Kubernetes objects (a list of mappings), got a string")
    assert "from_yaml_all" in msg


@pytest.mark.parametrize(
    ("manifests", "msg"),
    [
        (7, "manifests: expected a list of Kubernetes objects (mappings), got integer"),
        (None, "manifests: expected a list of Kubernetes objects (mappings), got null"),
        (["kind: Pod"], "manifests[0]: expected a Kubernetes object (a mapping), got string"),
        (
            [{"metadata": {"name": "p"}}],
            "manifests[0]: ?/p has no kind; every Kubernetes object names its kind",
        ),
        (
            [{"kind": "List", "items": [{"kind": "Pod"}, 3]}],
            "manifests[0].items[1]: expected a Kubernetes object (a mapping), got integer",
        ),
        (
            [{"kind": "PodList", "items": "pods"}],
            "manifests[0]: PodList/(unnamed): items: expected a list, got string",
        ),
    ],
)
def test_what_is_not_a_kubernetes_object_is_refused(manifests, msg):
    assert lint_refusal(manifests) == [msg]


@pytest.mark.parametrize(
    ("options", "msg"),
    [
        ({"allowed_namespaces": 3}, "allowed_namespaces: expected a list of names, got integer 3"),
        ({"allowed_namespaces": [{"name": "x"}]}, "allowed_namespaces: expected a list of names, got list"),
        ({"default_namespace": None}, "default_namespace: expected a namespace name, got null"),
        ({"check_env_from": "no"}, "check_env_from: expected true or false, got string"),
        ({"gpu_taint": "nvidia.com/gpu"}, "gpu_taint: expected a taint with key and effect, or true/false"),
    ],
)
def test_bad_options_are_refused_by_name(options, msg):
    (got,) = lint_refusal([wrap("Pod", pod_spec(container()))], **options)
    assert got.startswith(msg)


def test_a_string_namespace_is_one_namespace_not_its_characters():
    spec = pod_spec(container(env={"NVIDIA_VISIBLE_DEVICES": "all"}))
    assert wl.lint([wrap("Pod", spec, ns="ops")], allowed_namespaces="ops") == []
    assert len(wl.lint([wrap("Pod", spec, ns="o")], allowed_namespaces="ops")) == 1


def test_case_13_env_item_string_and_limits_list():
    spec = pod_spec({"name": "c", "env": ["FOO"], "resources": {"limits": [1]}})
    assert lint_refusal([wrap("Pod", spec, name="p", ns="team")]) == [
        "Pod/team/p: spec.containers[0].env[0]: expected a mapping, got string",
        "Pod/team/p: spec.containers[0].resources.limits: expected a mapping, got list",
    ]


JSON_VALUES = [None, True, 3, 2.5, "x", ["x", 2], {"x": [1]}]
PYTHON_TEXT = (
    "object has no attribute",
    "not iterable",
    "unhashable",
    "NoneType",
    "_AnsibleTagged",
    "Traceback",
)


def _paths(value, path=()):
    """Every path to a value inside ``value`` (mappings and lists), the root excluded."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        yield (*path, key)
        yield from _paths(child, (*path, key))


def _replaced(obj, path, value):
    obj = copy.deepcopy(obj)
    cur = obj
    for key in path[:-1]:
        cur = cur[key]
    cur[path[-1]] = value
    return obj


FULL_POD = wrap(
    "Deployment",
    pod_spec(
        container(
            "a",
            limits={"nvidia.com/gpu": 1},
            requests={"nvidia.com/gpu": 1},
            env={"CUDA_VISIBLE_DEVICES": "0"},
            env_from=[{"configMapRef": {"name": "c"}, "prefix": "NVIDIA_"}],
        ),
        tolerations=[GPU_TOL],
        runtime_class="nvidia",
        init=[container("i", env={"NVIDIA_VISIBLE_DEVICES": "all"})],
    ),
)
FULL_POD["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "gpu"}]
FULL_POD["spec"]["template"]["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]


@pytest.mark.parametrize("path", list(_paths(FULL_POD)), ids=lambda p: ".".join(map(str, p)))
def test_every_field_of_every_json_type_is_linted_or_refused_by_name(path):
    """The class behind case 13: any field of a workload, of any JSON type, gives findings or a
    LintError naming the object and the field; never a Python error."""
    for value in JSON_VALUES:
        obj = _replaced(FULL_POD, path, value)
        try:
            findings = wl.lint([obj], gpu_taint=True)
        except wl.LintError as exc:
            text = str(exc)
            assert "Deployment/" in text or "?/" in text, (path, value, text)
            assert not any(p in text for p in PYTHON_TEXT), (path, value, text)
        else:
            assert isinstance(findings, list)
            wl.lint_table(findings)
