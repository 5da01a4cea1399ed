"""_control_plane/api_versions: the group/version of each versioned API, from what the cluster serves, or a refusal."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.api_versions import (
    APIS,
    ApiVersionError,
    choose,
    chosen_version,
    missing_gates,
    pick,
    pick_all,
    served_kinds,
    with_version,
)

RESOURCE_V1 = {"ResourceSlice": {}, "DeviceClass": {}, "ResourceClaim": {}, "ResourceClaimTemplate": {}}

# what each release's apiserver serves of these groups, out of the box and with gates on (the shapes of
# kubernetes.core.k8s_cluster_info's apis; the integration tests read them from the real apiservers)
SERVED = {
    "1.37.2": {
        "resource.k8s.io/v1": {**RESOURCE_V1, "DeviceTaintRule": {}},
        "admissionregistration.k8s.io/v1": {
            "ValidatingAdmissionPolicy": {},
            "ValidatingAdmissionPolicyBinding": {},
        },
        "policy/v1": {"PodDisruptionBudget": {}},
        "scheduling.k8s.io/v1": {"PriorityClass": {}},
    },
    "1.36.3": {
        "resource.k8s.io/v1": dict(RESOURCE_V1),
        "admissionregistration.k8s.io/v1": {
            "ValidatingAdmissionPolicy": {},
            "ValidatingAdmissionPolicyBinding": {},
        },
        "policy/v1": {"PodDisruptionBudget": {}},
        "scheduling.k8s.io/v1": {"PriorityClass": {}},
    },
    "1.35.4": {
        "resource.k8s.io/v1": dict(RESOURCE_V1),
        "resource.k8s.io/v1alpha3": {"DeviceTaintRule": {}},
        "admissionregistration.k8s.io/v1": {
            "ValidatingAdmissionPolicy": {},
            "ValidatingAdmissionPolicyBinding": {},
        },
        "policy/v1": {"PodDisruptionBudget": {}},
        "scheduling.k8s.io/v1": {"PriorityClass": {}},
    },
}


def test_every_use_names_kinds_and_versions_it_speaks():
    for use, entry in APIS.items():
        assert entry["kinds"] and entry["versions"], use
        assert all("/" in gv for gv in entry["versions"]), use


@pytest.mark.parametrize("release", sorted(SERVED))
def test_the_apis_every_release_serves_out_of_the_box(release):
    chosen = pick_all(("dra", "admission_policy", "eviction"), SERVED[release], release)
    assert chosen == {
        "dra": "resource.k8s.io/v1",
        "admission_policy": "admissionregistration.k8s.io/v1",
        "eviction": "policy/v1",
    }


def test_device_taint_rule_is_v1_on_137_and_v1beta2_on_136_with_its_runtime_config():
    assert pick("device_taint_rule", SERVED["1.37.2"], "v1.37.2") == "resource.k8s.io/v1"
    served = {**SERVED["1.36.3"], "resource.k8s.io/v1beta2": {**RESOURCE_V1, "DeviceTaintRule": {}}}
    assert pick("device_taint_rule", served, "v1.36.3") == "resource.k8s.io/v1beta2"


def test_device_taint_rule_on_136_without_the_gates_is_refused_naming_them():
    with pytest.raises(ApiVersionError) as err:
        pick("device_taint_rule", SERVED["1.36.3"], "v1.36.3")
    text = str(err.value)
    assert "needs DeviceTaintRule in resource.k8s.io/v1 or resource.k8s.io/v1beta2" in text
    assert "Kubernetes v1.36.3 serves none of them" in text
    assert "DRADeviceTaintRules (beta, off by default; kube-scheduler, kube-controller-manager)" in text
    assert "--runtime-config=resource.k8s.io/v1beta2=true" in text
    assert "gpusplit_feature_gates {DRADeviceTaintRules: true}" in text
    assert "1.37 as resource.k8s.io/v1 with no gate to turn on" in text
    assert text.endswith("Nothing was changed.")


def test_device_taint_rule_on_135_is_refused_naming_the_alpha_version_it_serves():
    with pytest.raises(ApiVersionError) as err:
        pick("device_taint_rule", SERVED["1.35.4"], "1.35.4")
    text = str(err.value)
    assert "serves DeviceTaintRule only in resource.k8s.io/v1alpha3, which gpusplit does not write" in text
    assert "Kubernetes 1.36 serves it as resource.k8s.io/v1beta2 with DRADeviceTaintRules on" in text
    assert "--runtime-config" not in text  # no gate of 1.35 would make gpusplit write the alpha rule


@pytest.mark.parametrize(
    ("release", "group_version"),
    [("1.37.2", "scheduling.k8s.io/v1beta1"), ("1.36.3", "scheduling.k8s.io/v1alpha2")],
)
def test_podgroup_follows_the_served_version(release, group_version):
    served = {**SERVED[release], group_version: {"PodGroup": {}, "Workload": {}}}
    assert pick("podgroup", served, release) == group_version
    assert pick("workload", served, release) == group_version


def test_podgroup_on_135_is_refused_and_workload_is_v1alpha1():
    served = {**SERVED["1.35.4"], "scheduling.k8s.io/v1alpha1": {"Workload": {}}}
    assert pick("workload", served, "1.35.4") == "scheduling.k8s.io/v1alpha1"
    with pytest.raises(ApiVersionError) as err:
        pick("podgroup", served, "1.35.4")
    assert "Kubernetes 1.35 has no PodGroup" in str(err.value)


def test_generic_workload_off_is_refused_with_the_gate_and_runtime_config_of_the_release():
    with pytest.raises(ApiVersionError) as err:
        pick("podgroup", SERVED["1.37.2"], "v1.37.2")
    text = str(err.value)
    assert "GenericWorkload (beta, off by default" in text
    assert "--runtime-config=scheduling.k8s.io/v1beta1=true" in text


def test_every_refusal_is_gathered():
    with pytest.raises(ApiVersionError) as err:
        pick_all(("device_taint_rule", "podgroup", "dra"), SERVED["1.36.3"], "1.36.3")
    assert str(err.value).count("Nothing was changed.") == 2


def test_an_unknown_release_or_no_version_still_refuses_plainly():
    with pytest.raises(ApiVersionError) as err:
        pick("device_taint_rule", {}, None)
    assert "the API server serves none of them" in str(err.value)
    with pytest.raises(ApiVersionError) as err:
        pick("device_taint_rule", {}, "v1.30.0")
    assert "On 1.30" not in str(err.value)


def test_malformed_discovery_counts_as_nothing_served():
    assert served_kinds(None) == {}
    assert served_kinds({"x/v1": "DeviceTaintRule", 3: {}, "resource.k8s.io/v1": ["DeviceTaintRule", 7]}) == {
        "resource.k8s.io/v1": ("DeviceTaintRule",)
    }
    with pytest.raises(ApiVersionError, match="unknown API use 'nope'"):
        pick("nope", {}, None)


def test_missing_gates_reads_the_components_that_use_them():
    enabled = {
        "kube-apiserver": {"DRADeviceTaintRules": False},
        "kube-scheduler": {"DRADeviceTaintRules": False},
        "kube-controller-manager": {"DRADeviceTaintRules": True},
    }
    # the apiserver does not read the gate (it serves the API through the runtime-config)
    assert missing_gates("device_taint_rule", "1.36.3", enabled) == ["DRADeviceTaintRules on kube-scheduler"]
    assert missing_gates("device_taint_rule", "1.37.2", enabled) == []
    gangs = {"kube-scheduler": {"GenericWorkload": True, "GangScheduling": False}}
    with pytest.raises(ApiVersionError) as err:
        pick("podgroup", {}, "1.36.3")
    assert "GangScheduling (alpha, off by default; kube-scheduler)" in str(err.value)
    assert "{GenericWorkload: true, GangScheduling: true}" in str(err.value)
    assert missing_gates("podgroup", "1.36.3", gangs) == ["GangScheduling on kube-scheduler"]
    assert missing_gates("podgroup", "1.37.2", gangs) == []


def test_choose_never_raises_and_says_why_per_use():
    chosen = choose(("dra", "device_taint_rule"), SERVED["1.36.3"], "v1.36.3")
    assert chosen["api_versions"] == {"dra": "resource.k8s.io/v1", "device_taint_rule": None}
    assert list(chosen["refusals"]) == ["device_taint_rule"]
    assert chosen["kubernetes_version"] == "v1.36.3"


def test_rules_are_written_in_the_served_version_of_the_same_shape():
    rule = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "spec": {"taint": {"key": "k"}}}
    moved = with_version([rule], "device_taint_rule", "resource.k8s.io/v1beta2")
    assert moved == [{**rule, "apiVersion": "resource.k8s.io/v1beta2"}]
    assert rule["apiVersion"] == "resource.k8s.io/v1"  # the input is left alone
    with pytest.raises(ApiVersionError, match="not 'resource.k8s.io/v1alpha3'"):
        with_version([rule], "device_taint_rule", "resource.k8s.io/v1alpha3")
    with pytest.raises(ApiVersionError, match="not an object of"):
        with_version([{"apiVersion": "v1", "kind": "Pod"}], "device_taint_rule", "resource.k8s.io/v1")


def test_gang_is_a_podgroup_where_served_else_the_135_workload():
    v135 = {**SERVED["1.35.4"], "scheduling.k8s.io/v1alpha1": {"Workload": {}}}
    assert pick("gang", v135, "v1.35.4") == "scheduling.k8s.io/v1alpha1"
    v137 = {**SERVED["1.37.2"], "scheduling.k8s.io/v1alpha3": {"Workload": {}, "PodGroup": {}}}
    assert pick("gang", v137, "v1.37.2") == "scheduling.k8s.io/v1alpha3"
    assert pick("podgroup", v137, "v1.37.2") == "scheduling.k8s.io/v1alpha3"
    with pytest.raises(ApiVersionError) as err:
        pick("gang", SERVED["1.35.4"], "v1.35.4")
    text = str(err.value)
    assert text.startswith(
        "a gang job needs PodGroup in scheduling.k8s.io/v1beta1 or scheduling.k8s.io/v1alpha3 or "
        "scheduling.k8s.io/v1alpha2, or Workload in scheduling.k8s.io/v1alpha1; Kubernetes v1.35.4 serves none"
    )
    assert "--runtime-config=scheduling.k8s.io/v1alpha1=true" in text
    assert "{GenericWorkload: true, GangScheduling: true}" in text


def test_chosen_version_takes_what_was_asked_only_where_it_is_served():
    v136 = {**SERVED["1.36.3"], "resource.k8s.io/v1beta2": {"DeviceTaintRule": {}}}
    assert chosen_version("device_taint_rule", None, v136, "v1.36.3") == "resource.k8s.io/v1beta2"
    assert chosen_version("device_taint_rule", "resource.k8s.io/v1beta2", v136) == "resource.k8s.io/v1beta2"
    with pytest.raises(
        ApiVersionError, match="resource.k8s.io/v1 was asked for, but the API server does not serve"
    ):
        chosen_version("device_taint_rule", "resource.k8s.io/v1", v136, "v1.36.3")
    with pytest.raises(ApiVersionError, match="not 'resource.k8s.io/v1alpha3'"):
        chosen_version("device_taint_rule", "resource.k8s.io/v1alpha3", SERVED["1.35.4"], "v1.35.4")
