"""The upgrade preflight's objects the target cannot read back (gate_preflight.unreadable_kinds and
unreadable_objects) and the role steps that call them."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.gate_preflight import (
    DELETE_UNREADABLE_VARIABLE,
    UnreadableObjectsError,
    object_label,
    unreadable_kinds,
    unreadable_objects,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.gates import (
    REGISTERED_API_VERSIONS,
    CatalogError,
)
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.role_steps import StepContext, run_step


def resource(name, namespaced=True):
    return {"name": name, "namespaced": namespaced, "preferred": True}


# what a 1.36 apiserver with GenericWorkload, DRADeviceTaintRules and their runtime-config serves (in part)
SERVED_1_36 = {
    "v1": {"Pod": resource("pods")},
    "scheduling.k8s.io/v1": {"PriorityClass": resource("priorityclasses", False)},
    "scheduling.k8s.io/v1alpha2": {"Workload": resource("workloads"), "PodGroup": resource("podgroups")},
    "resource.k8s.io/v1": {"DeviceClass": resource("deviceclasses", False)},
    "resource.k8s.io/v1beta2": {"DeviceTaintRule": resource("devicetaintrules", False)},
    "apps/v1": {"DaemonSet": resource("daemonsets")},
}


def podgroup(ns, name, version="scheduling.k8s.io/v1alpha2"):
    return {"apiVersion": version, "kind": "PodGroup", "metadata": {"namespace": ns, "name": name}}


def test_the_v1alpha2_kinds_are_unreadable_on_1_37_and_nothing_else():
    assert unreadable_kinds(SERVED_1_36, "v1.37.2") == [
        {"api_version": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup"},
        {"api_version": "scheduling.k8s.io/v1alpha2", "kind": "Workload"},
    ]
    # the same cluster staying on 1.36 (a patch release): every version it serves is registered
    assert unreadable_kinds(SERVED_1_36, "1.36.9") == []


def test_every_served_version_the_target_lacks_counts_from_the_catalog():
    # 1.35's v1alpha1 Workload on the way to 1.36 (which registers v1alpha2 only) is unreadable as well
    served = {"scheduling.k8s.io/v1alpha1": {"Workload": resource("workloads")}}
    assert "v1alpha1" not in REGISTERED_API_VERSIONS["1.36"]["scheduling.k8s.io"]
    assert unreadable_kinds(served, "1.36.3") == [
        {"api_version": "scheduling.k8s.io/v1alpha1", "kind": "Workload"}
    ]
    # groups the catalog does not describe are not judged
    assert unreadable_kinds({"example.com/v9": {"Thing": resource("things")}}, "1.37.2") == []


def test_bad_input_is_refused_naming_it():
    with pytest.raises(CatalogError, match="not covered by the gpusplit feature-gate catalog"):
        unreadable_kinds(SERVED_1_36, "1.30.0")
    with pytest.raises(CatalogError, match="served APIs: expected a map"):
        unreadable_kinds(["scheduling.k8s.io/v1alpha2"], "1.37.2")
    kinds = unreadable_kinds(SERVED_1_36, "1.37.2")
    with pytest.raises(
        CatalogError, match="scheduling.k8s.io/v1alpha2 PodGroup: expected objects as mappings"
    ):
        unreadable_objects(kinds, {"scheduling.k8s.io/v1alpha2 PodGroup": ["train"]}, "1.37.2")


def test_existing_objects_are_refused_each_named():
    kinds = unreadable_kinds(SERVED_1_36, "1.37.2")
    found = {
        "scheduling.k8s.io/v1alpha2 PodGroup": [podgroup("team-b", "eval"), podgroup("team-a", "train")],
        "scheduling.k8s.io/v1alpha2 Workload": [],
    }
    with pytest.raises(UnreadableObjectsError) as err:
        unreadable_objects(kinds, found, "1.37.2")
    text = str(err.value)
    assert "Kubernetes 1.37 does not register scheduling.k8s.io/v1alpha2" in text
    assert (
        "PodGroup team-a/train (scheduling.k8s.io/v1alpha2); PodGroup team-b/eval (scheduling.k8s.io/v1alpha2)"
        in text
    )
    assert f"{DELETE_UNREADABLE_VARIABLE}=true" in text and text.endswith("Nothing was changed.")


def test_with_the_variable_exactly_those_are_returned_for_deletion():
    kinds = unreadable_kinds(SERVED_1_36, "1.37.2")
    found = {
        "scheduling.k8s.io/v1alpha2 PodGroup": [podgroup("team-a", "train")],
        "scheduling.k8s.io/v1alpha2 Workload": [
            {
                "apiVersion": "scheduling.k8s.io/v1alpha2",
                "kind": "Workload",
                "metadata": {"namespace": "a", "name": "w"},
            }
        ],
        # a query nobody asked for is not deleted
        "apps/v1 DaemonSet": [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"namespace": "a", "name": "d"}}
        ],
    }
    refs = unreadable_objects(kinds, found, "1.37.2", delete=True)
    assert refs == [
        {
            "api_version": "scheduling.k8s.io/v1alpha2",
            "kind": "PodGroup",
            "name": "train",
            "namespace": "team-a",
        },
        {"api_version": "scheduling.k8s.io/v1alpha2", "kind": "Workload", "name": "w", "namespace": "a"},
    ]
    assert object_label({"api_version": "g/v", "kind": "K", "name": "n"}) == "K n (g/v)"
    # none exist: nothing to refuse, nothing to delete
    assert unreadable_objects(kinds, {}, "1.37.2") == []


def test_the_role_steps_refuse_or_list_them():
    listed = run_step("cp_upgrade_unreadable_kinds", {"apis": SERVED_1_36, "target": "1.37.2"}, StepContext())
    assert sorted(listed["queries"]) == [
        "scheduling.k8s.io/v1alpha2 PodGroup",
        "scheduling.k8s.io/v1alpha2 Workload",
    ]
    query = listed["queries"]["scheduling.k8s.io/v1alpha2 PodGroup"]
    assert query["api_version"] == "scheduling.k8s.io/v1alpha2" and query["kind"] == "PodGroup"
    found = {"scheduling.k8s.io/v1alpha2 PodGroup": [podgroup("team-a", "train")]}
    inputs = {"kinds": listed["kinds"], "found": found, "target": "1.37.2"}
    refused = run_step("cp_upgrade_unreadable_objects", {**inputs, "delete": False}, StepContext())
    assert refused["failed"] and "PodGroup team-a/train (scheduling.k8s.io/v1alpha2)" in refused["msg"]
    bad = run_step("cp_upgrade_unreadable_objects", {**inputs, "delete": "yes"}, StepContext())
    assert bad["failed"] and f"{DELETE_UNREADABLE_VARIABLE}: expected true or false" in bad["msg"]
    deleted = run_step("cp_upgrade_unreadable_objects", {**inputs, "delete": True}, StepContext())
    assert deleted["labels"] == ["PodGroup team-a/train (scheduling.k8s.io/v1alpha2)"]
    assert deleted["definitions"] == [
        {
            "apiVersion": "scheduling.k8s.io/v1alpha2",
            "kind": "PodGroup",
            "metadata": {"name": "train", "namespace": "team-a"},
        }
    ]
