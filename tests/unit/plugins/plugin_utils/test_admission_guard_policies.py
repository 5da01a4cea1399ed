"""The admission guard's DRA-claim and privileged-pod policies (rendered objects; the CEL itself is
exercised against the lab's real kube-apiserver in tests/integration/test_admission_guard.py)."""

from __future__ import annotations

import kubernetes_validate
import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._dra.names import PURPOSES
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import admission_guard as ag
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import workload_checks as wl
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.role_steps import StepContext, run_step

K8S = "1.37"


def by_kind(objects):
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def test_defaults_render_the_claim_policy_only():
    objects = ag.guard_objects()
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("ValidatingAdmissionPolicy", "gpusplit-visible-devices-dra-claims"),
        ("ValidatingAdmissionPolicyBinding", "gpusplit-visible-devices-dra-claims"),
    ]
    for obj in objects:
        kubernetes_validate.validate(obj, K8S, strict=True)
        # the env guard's prune label: absent removes these too
        assert obj["metadata"]["labels"]["gpusplit.io/guard"] == "gpusplit-visible-devices"
    policy = objects[0]
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == ["resource.k8s.io"] and rule["apiVersions"] == ["v1"]
    assert rule["resources"] == ["resourceclaims", "resourceclaimtemplates"]
    assert rule["operations"] == ["CREATE", "UPDATE"]
    assert policy["spec"]["failurePolicy"] == "Fail"


def test_the_owned_keys_come_from_the_dra_names():
    assert set(ag.OWNED_TAINT_KEYS) == {p[2] for p in PURPOSES.values()}
    assert set(ag.OWNED_TAINT_KEYS) == {
        "gpusplit.io/host-share",
        "gpusplit.io/excluded",
        "gpusplit.io/unhealthy",
    }
    policy = ag.claim_objects({"extra_taint_keys": ["example.com/reserved"]})[0]
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert variables["owned"] == (
        '["gpusplit.io/host-share", "gpusplit.io/excluded", "gpusplit.io/unhealthy", "example.com/reserved"]'
    )


def test_every_request_shape_and_the_keyless_toleration_are_checked():
    policy = ag.claim_objects()[0]
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    offences = variables["offences"]
    assert "r.exactly.tolerations" in offences and "r.firstAvailable" in offences
    assert "s.tolerations" in offences
    # a toleration without a key tolerates everything: it is an offence too
    assert "!has(t.key) || t.key == ''" in offences
    # the template's claim spec is spec.spec
    assert (
        "request.resource.resource == 'resourceclaimtemplates' ? dyn(object.spec).spec" in variables["spec"]
    )
    assert variables["before"].startswith("oldObject == null ? [] : ")
    (validation,) = policy["spec"]["validations"]
    assert validation["expression"] == "variables.offences.all(o, o in variables.before)"


def test_the_message_says_who_may():
    policy = ag.claim_objects(
        {"allowed_namespaces": ["ops", "kube-system"], "allow_label": "example.com/gpu-admin"}
    )[0]
    (validation,) = policy["spec"]["validations"]
    who = (
        "only the namespaces kube-system, ops and namespaces labelled example.com/gpu-admin=true "
        "(an administrator adds one through gpusplit_guard_allowed_namespaces of the admission_guard role)"
    )
    assert who in validation["messageExpression"]
    assert ag.who(ag.settings({"allowed_namespaces": [], "allow_label": ""})) == "no namespace"


def test_privileged_enforce_adds_the_pod_policy():
    objects = by_kind(ag.guard_objects({"name": "g", "privileged": "enforce", "dra_claims": False}))
    assert sorted(objects) == [
        ("ValidatingAdmissionPolicy", "g-privileged"),
        ("ValidatingAdmissionPolicyBinding", "g-privileged"),
    ]
    policy = objects[("ValidatingAdmissionPolicy", "g-privileged")]
    for obj in objects.values():
        kubernetes_validate.validate(obj, K8S, strict=True)
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["pods", "pods/ephemeralcontainers"]
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert variables["gpuTaint"] == '"nvidia.com/gpu"'
    assert variables["splitLabels"] == (
        '["gpusplit.io/split", "gpusplit.io/mode", "gpusplit.io/kubernetes-gpus", '
        '"gpusplit.io/host-gpus", "nvidia.com/gpu.present"]'
    )
    for list_name in ("containers", "initContainers", "ephemeralContainers"):
        assert f"object.spec.{list_name}" in variables["offenders"]
    assert "'SYS_ADMIN', 'CAP_SYS_ADMIN', 'ALL'" in variables["offenders"]
    assert "['In', 'Exists', 'Gt', 'Lt']" in variables["reach"]  # NotIn/DoesNotExist avoid split nodes
    for mode in ("off", "report"):
        assert ag.guard_objects({"privileged": mode, "dra_claims": False}) == []


def test_the_binding_is_the_env_guards():
    settings = {"name": "g", "allowed_namespaces": ["ops"], "match_labels": {"team": "a"}}
    _, env_binding = wl.guard_objects(settings)
    _, claim_binding = ag.claim_objects(settings)
    assert claim_binding["spec"]["matchResources"] == env_binding["spec"]["matchResources"]
    assert claim_binding["spec"]["policyName"] == "g-dra-claims"


@pytest.mark.parametrize(
    "settings, text",
    [
        ({"privileged": "yes"}, "privileged 'yes' is not one of off, report, enforce"),
        ({"dra_claims": "true"}, "dra_claims 'true' must be true or false"),
        ({"extra_taint_keys": ["bad key"]}, "extra_taint_keys"),
        ({"gpu_taint_key": ""}, "gpu_taint_key '' is not a taint key"),
        ({"forbidden_env": ["X"]}, "unknown key(s) forbidden_env"),
        ({"allowed_namespaces": ["Not_A_Name"]}, "allowed_namespaces"),
    ],
)
def test_bad_settings_are_refused(settings, text):
    with pytest.raises(wl.LintError) as err:
        ag.guard_objects(settings)
    assert text in str(err.value)
    refused = run_step("guard_objects", {"policies": settings}, StepContext())
    assert refused["failed"] and refused["msg"].startswith("gpusplit admission guard refused")
