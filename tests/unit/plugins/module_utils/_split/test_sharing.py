"""Sharing the Kubernetes share: gpusplit_sharing read and refused before any change, and what the plan carries."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError
from ansible_collections.gpusplit.k8s.plugins.module_utils._split import sharing
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import (
    PlanError,
    plan_fleet,
    plan_node,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.verify import verify_node
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.split_render import render_template

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"


def gpu(i, name=H100, mig=False, migs=()):
    return {
        "uuid": f"GPU-0000000{i}-0000-4000-8000-00000000000{i}",
        "index": i,
        "minor_number": i,
        "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0",
        "name": name,
        "memory_total_mib": 81559,
        "mig_mode": {"current": "enabled" if mig else "disabled", "pending": None},
        "mig_devices": list(migs),
        "health": {"status": "ok", "reasons": []},
        "processes": [],
    }


def mig(parent, gi, profile):
    return {
        "uuid": f"MIG-0000000{parent}-0000-4000-8000-0000000000{gi:02d}",
        "index": gi,
        "profile": profile,
        "gpu_instance_id": gi,
        "compute_instance_id": 0,
        "memory_total_mib": 9856,
    }


FOUR = [gpu(i) for i in range(4)]
TS4 = {"time_slicing": {"replicas": 4}}


def refusal(sharing_value, mode="device_plugin", **kwargs):
    with pytest.raises(PlanError) as exc:
        plan_node("gpu-a", FOUR, mode, {"host_count": 2}, sharing=sharing_value, **kwargs)
    return exc.value.errors


def test_time_slicing_multiplies_the_kubernetes_share_only():
    plan = plan_node("gpu-a", FOUR, "device_plugin", {"host_count": 2}, sharing=TS4)
    assert plan["kubernetes_uuids"] == [FOUR[2]["uuid"], FOUR[3]["uuid"]]
    assert plan["resources"] == {"nvidia.com/gpu": 8}
    assert plan["resource_name"] == "nvidia.com/gpu"
    assert plan["kubernetes_count"] == 2  # GPUs, not replicas
    assert plan["sharing"] == {
        "strategy": "time-slicing",
        "replicas": 4,
        "rename": False,
        "fail_requests_greater_than_one": False,
        "resources": [{"name": "nvidia.com/gpu", "devices": 2, "advertised_as": "nvidia.com/gpu"}],
    }


def test_rename_advertises_the_shared_name_and_nothing_unshared():
    value = {"time_slicing": {"replicas": 3, "rename": True, "fail_requests_greater_than_one": True}}
    plan = plan_node("gpu-a", FOUR, "gpu_operator", {"host_count": 2}, sharing=value)
    assert plan["resources"] == {"nvidia.com/gpu": 0, "nvidia.com/gpu.shared": 6}
    assert plan["resource_name"] == "nvidia.com/gpu.shared"
    assert (
        sharing.sharing_text(plan["sharing"])
        == "time-slicing x3 (nvidia.com/gpu.shared, failRequestsGreaterThanOne)"
    )


def test_mixed_mig_shares_each_profile():
    facts = [gpu(0), gpu(1, A100, mig=True, migs=[mig(1, 1, "3g.40gb"), mig(1, 2, "1g.10gb")])]
    plan = plan_node(
        "gpu-a",
        facts,
        "device_plugin",
        {"host_count": 1},
        mig_strategy="mixed",
        sharing={"time_slicing": {"replicas": 2, "rename": True}},
    )
    assert plan["resources"] == {
        "nvidia.com/gpu": 0,
        "nvidia.com/mig-1g.10gb": 0,
        "nvidia.com/mig-1g.10gb.shared": 2,
        "nvidia.com/mig-3g.40gb": 0,
        "nvidia.com/mig-3g.40gb.shared": 2,
    }
    assert plan["resource_name"] == ["nvidia.com/mig-1g.10gb.shared", "nvidia.com/mig-3g.40gb.shared"]


def test_no_sharing_and_an_empty_mapping_change_nothing():
    for value in (None, {}):
        plan = plan_node("gpu-a", FOUR, "device_plugin", {"host_count": 2}, sharing=value)
        assert plan["sharing"] is None
        assert plan["resources"] == {"nvidia.com/gpu": 2}


def test_an_empty_kubernetes_share_shares_nothing():
    plan = plan_node("gpu-a", FOUR, "device_plugin", {"count": 0}, sharing=TS4)
    assert plan["sharing"] is None
    assert plan["resources"] == {"nvidia.com/gpu": 0}


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ({"time_slicing": {"replicas": 1}}, "replicas: expected a whole number of at least 2, got 1"),
        ({"time_slicing": {"replicas": 2.5}}, "replicas: expected a whole number of at least 2, got 2.5"),
        ({"time_slicing": {"replicas": "4"}}, "replicas: expected a whole number of at least 2, got '4'"),
        (
            {"time_slicing": {"replicas": True}},
            "replicas: expected a whole number of at least 2, got a boolean",
        ),
        ({"time_slicing": {}}, "replicas is required"),
        ({"time_slicing": {"replicas": 4, "slices": 2}}, "unknown key(s) slices (known: replicas, rename"),
        ({"time_slicing": {"replicas": 4, "rename": "gpu-small"}}, "ignores a resource name of one's own"),
        ({"time_slicing": {"replicas": 4, "rename": "yes"}}, "ignores a resource name"),
        (
            {"time_slicing": {"replicas": 4, "fail_requests_greater_than_one": "yes"}},
            "fail_requests_greater_than_one: expected true or false, got string",
        ),
        ({"time_slicing": [4]}, "time_slicing: expected a mapping with replicas, got list"),
        ({"timeslicing": {"replicas": 4}}, "unknown key(s) timeslicing (known: time_slicing, mps)"),
        ({"time_slicing": {"replicas": 4}, "mps": {"replicas": 2}}, "set exactly one of time_slicing, mps"),
        ([4], "expected a mapping with time_slicing or mps, got list"),
        ({"mps": {"replicas": 4}}, "MPS control daemon runs privileged"),
    ],
)
def test_bad_sharing_is_refused_naming_the_field(value, words):
    errors = refusal(value)
    assert any(e.startswith("gpu-a: gpusplit_sharing") and words in e for e in errors), errors


@pytest.mark.parametrize(
    ("mode", "words"),
    [("dra", "replicas has no meaning in mode dra"), ("none", "runs no split device plugin")],
)
def test_sharing_in_a_mode_without_the_split_plugin_is_refused(mode, words):
    errors = refusal(TS4, mode=mode)
    assert any(words in e for e in errors), errors


def test_fleet_collects_sharing_refusals_of_every_host():
    hosts = {
        "a": {
            "facts": FOUR,
            "mode": "device_plugin",
            "split": {"host_count": 2},
            "sharing": {"time_slicing": {"replicas": 0}},
        },
        "b": {"facts": FOUR, "mode": "device_plugin", "split": {"host_count": 2}, "sharing": {"mps": {}}},
        "c": {"facts": FOUR, "mode": "device_plugin", "split": {"host_count": 2}, "sharing": TS4},
    }
    with pytest.raises(PlanError) as exc:
        plan_fleet(hosts)
    assert [e.split(":", 1)[0] for e in exc.value.errors] == ["a", "b"]
    del hosts["a"], hosts["b"]
    assert plan_fleet(hosts)["nodes"]["c"]["resources"] == {"nvidia.com/gpu": 8}


def test_advertised_difference_names_what_the_node_shows():
    plan = plan_node(
        "gpu-a",
        FOUR,
        "device_plugin",
        {"host_count": 2},
        sharing={"time_slicing": {"replicas": 4, "rename": True}},
    )
    assert sharing.advertised_difference(plan, {"nvidia.com/gpu": 0, "nvidia.com/gpu.shared": 8}) is None
    assert (
        "one per device: the split plugin runs without its sharing config"
        in sharing.advertised_difference(plan, {"nvidia.com/gpu": 2})
    )
    assert (
        "2 replicas per device: the split plugin runs an older sharing config"
        in sharing.advertised_difference(plan, {"nvidia.com/gpu.shared": 4})
    )
    assert (
        sharing.advertised_difference(plan_node("gpu-a", FOUR, "device_plugin", {"host_count": 2}), {})
        is None
    )


# --------------------------------------------------------------------------------------------
# mode dra: the DRA driver's GpuConfig in a DeviceClass of the time-sliced Kubernetes GPUs


def dra_plan(value, facts=FOUR, host="gpu-a", host_count=2):
    return plan_node(host, facts, "dra", {"host_count": host_count}, sharing=value)


def test_dra_time_slicing_names_the_kubernetes_gpus_and_counts_devices_as_published():
    plan = dra_plan({"time_slicing": {"interval": "Medium"}})
    assert plan["dra_sharing"] == {
        "strategy": "time-slicing",
        "interval": "Medium",
        "device_class": "gpusplit-time-slicing-medium",
        "uuids": [FOUR[2]["uuid"], FOUR[3]["uuid"]],
    }
    unshared = dra_plan(None)
    assert "dra_sharing" not in unshared
    # one device per GPU in the ResourceSlices, shared or not: what verify expects is unchanged
    assert plan["sharing"] is None
    for key in ("resources", "dra_devices", "kubernetes_uuids", "host_uuids"):
        assert plan[key] == unshared[key], key


@pytest.mark.parametrize("value", [{"time_slicing": {}}, {"time_slicing": None}])
def test_dra_time_slicing_takes_the_drivers_default_interval(value):
    assert dra_plan(value)["dra_sharing"]["interval"] == "Default"


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (TS4, ["replicas has no meaning in mode dra", "one ResourceClaim", "keys of mode dra: interval"]),
        (
            {"time_slicing": {"replicas": 2, "rename": True, "fail_requests_greater_than_one": True}},
            ["replicas, rename, fail_requests_greater_than_one have no meaning in mode dra"],
        ),
        ({"time_slicing": {"interval": "Medium", "slice": 1}}, ["unknown key(s) slice (known: interval)"]),
        (
            {"time_slicing": {"interval": "medium"}},
            ["'medium' is not one of", "Default, Short, Medium, Long"],
        ),
        ({"time_slicing": {"interval": 2}}, ["interval: 2 is not one of"]),
        ({"time_slicing": ["Medium"]}, ["time_slicing: expected a mapping (interval, or nothing), got list"]),
        ({"mps": {"replicas": 2}}, ["gpusplit_sharing.mps: MPS through the NVIDIA DRA driver", "MPSSupport"]),
        ({"time_slicing": {}, "mps": {}}, ["set exactly one of time_slicing, mps"]),
    ],
)
def test_dra_sharing_refusals_name_the_host_and_what_to_fix(value, words):
    errors = refusal(value, mode="dra")
    assert len(errors) == 1, errors
    assert errors[0].startswith("gpu-a: gpusplit_sharing")
    for w in words:
        assert w in errors[0], (w, errors[0])


def test_dra_mps_refusal_says_how_the_driver_enables_its_gate():
    [error] = refusal({"mps": {}}, mode="dra")
    assert "feature gate" in error and "gpusplit_dra_driver_settings.feature_gates" in error


def test_dra_time_slicing_leaves_mig_enabled_gpus_out_with_a_warning():
    facts = [gpu(0), gpu(1), gpu(2, name=A100, mig=True, migs=[mig(2, 1, "3g.40gb")]), gpu(3)]
    plan = dra_plan({"time_slicing": {}}, facts=facts)
    assert plan["dra_sharing"]["uuids"] == [facts[3]["uuid"]]
    assert any(facts[2]["uuid"] in w and "MIG enabled" in w for w in plan["warnings"]), plan["warnings"]
    only_mig = [gpu(0), gpu(1, name=A100, mig=True, migs=[mig(1, 1, "3g.40gb")])]
    assert dra_plan({"time_slicing": {}}, facts=only_mig, host_count=1)["dra_sharing"] is None


def dra_classes(*plans):
    return sharing.dra_device_class_contexts(plans)


def test_dra_device_classes_select_only_the_time_sliced_kubernetes_gpus_per_interval():
    a = dra_plan({"time_slicing": {"interval": "Long"}})
    b = dra_plan({"time_slicing": {}}, host="gpu-b", host_count=3)
    c = dra_plan({"time_slicing": {"interval": "Long"}}, host="gpu-c", host_count=1)
    none = dra_plan(None, host="gpu-d")
    classes = dra_classes(a, b, c, none)
    assert [k["name"] for k in classes] == ["gpusplit-time-slicing-default", "gpusplit-time-slicing-long"]
    by_name = {k["name"]: k for k in classes}
    long_uuids = a["dra_sharing"]["uuids"] + c["dra_sharing"]["uuids"]
    for name, uuids in (
        ("gpusplit-time-slicing-long", long_uuids),
        ("gpusplit-time-slicing-default", b["dra_sharing"]["uuids"]),
    ):
        expression = by_name[name]["expression"]
        assert expression.startswith(
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu' && "
            "device.attributes['gpu.nvidia.com'].uuid in ["
        )
        listed = expression.rsplit("[", 1)[1].rstrip("]").split(", ")
        assert listed == sorted(f"'{u}'" for u in set(uuids))  # once each (the fixtures share UUIDs)
    # the host shares (a: GPUs 0-1, c: GPU 0) are in no class
    assert FOUR[0]["uuid"] not in by_name["gpusplit-time-slicing-long"]["expression"]
    assert by_name["gpusplit-time-slicing-long"]["config"] == [
        {
            "driver": "gpu.nvidia.com",
            "parameters": {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": "GpuConfig",
                "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
            },
        }
    ]
    assert by_name["gpusplit-time-slicing-long"]["labels"] == {
        "app.kubernetes.io/managed-by": "gpusplit",
        "app.kubernetes.io/name": "gpusplit-sharing",
    }
    assert dra_classes(none) == []


def test_dra_device_class_refuses_a_selector_longer_than_the_api_server_takes():
    plan = dra_plan({"time_slicing": {}})
    plan["dra_sharing"]["uuids"] = [f"GPU-{i:08d}-0000-4000-8000-000000000000" for i in range(250)]
    with pytest.raises(GpusplitError) as exc:
        dra_classes(plan)
    [error] = exc.value.errors
    assert "DeviceClass gpusplit-time-slicing-default: 250 time-sliced GPUs" in error
    assert "more than the 10240" in error
    plan["dra_sharing"]["uuids"] = plan["dra_sharing"]["uuids"][:200]
    assert len(dra_classes(plan)[0]["expression"]) <= sharing.CEL_EXPRESSION_MAX


def test_cel_string_escapes_quotes_and_backslashes():
    assert sharing._cel_string("GPU-1") == "'GPU-1'"
    assert sharing._cel_string("a'b\\c") == "'a\\'b\\\\c'"


def test_the_dra_device_class_renders_as_the_api_objects_fields():
    [context] = dra_classes(dra_plan({"time_slicing": {"interval": "Short"}}))
    obj = render_template("deviceclass.yaml.j2", **context)
    assert obj["apiVersion"] == "resource.k8s.io/v1" and obj["kind"] == "DeviceClass"
    assert obj["metadata"] == {"name": "gpusplit-time-slicing-short", "labels": context["labels"]}
    assert obj["spec"] == {
        "selectors": [{"cel": {"expression": context["expression"]}}],
        "config": [{"opaque": context["config"][0]}],
    }


def test_a_time_sliced_dra_node_verifies_with_nothing_advertised():
    plan = dra_plan({"time_slicing": {}})
    node = {"metadata": {"name": "gpu-a"}, "status": {"allocatable": {"cpu": "8"}}}
    report = verify_node(plan, node, [], [])
    assert report["verdict"] == "OK", report["reasons"]
    assert report["expected_resources"] == {"nvidia.com/gpu": 0}
    node["status"]["allocatable"]["nvidia.com/gpu"] = "2"  # a device plugin advertising the share
    assert verify_node(plan, node, [], [])["verdict"] == "FAIL"
