"""DRA mode (plugins/module_utils/_dra/dra.py): DeviceTaintRules, claims, chart values, preflight,
published slices, the controller's message, isolation. Every rendered object is validated
against the Kubernetes 1.37 schemas; the chart values against the chart's real values.yaml."""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpusplit.k8s.plugins.filter import dra as dra_filters
from ansible_collections.gpusplit.k8s.plugins.module_utils._dra import dra
from ansible_collections.gpusplit.k8s.plugins.module_utils._dra.dra import DraError
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import (
    PlanError,
    plan_fleet,
    plan_node,
)

K8S = "1.37"
ROOT = Path(__file__).resolve().parents[5]
FIXTURES = ROOT / "tests" / "fixtures" / "gpus"
REFERENCE_DIR = Path(
    os.environ.get("GPUSPLIT_REFERENCE_DIR") or Path(__file__).resolve().parents[6] / "shared" / "reference"
)
DRA_REFERENCE = REFERENCE_DIR / "kubernetes-sigs_dra-driver-nvidia-gpu"
NONE_MESSAGE = (
    "3 published devices selected. 1 allocated device selected. 1 pod would be evicted in 1 namespace "
    "if the effect was NoExecute. This information will not be updated again. Recreate the DeviceTaintRule "
    "to trigger an update."
)


def validate(obj):
    assert kubernetes_validate.validate(obj, K8S, strict=True) == K8S


def gpu(i, minor=None, health="ok", host_no=1):
    return {
        "uuid": f"GPU-{host_no:08x}-{i:04x}-4000-8000-{host_no * 16 + i:012x}",
        "index": i,
        "minor_number": i if minor is None else minor,
        "pci_bus_id": f"0000:{0x18 + 0x10 * i:02x}:00.0",
        "name": "NVIDIA H100 80GB HBM3",
        "memory_total_mib": 81559,
        "mig_mode": {"current": "disabled", "pending": None},
        "mig_devices": [],
        "health": {"status": health, "reasons": [] if health == "ok" else ["uncorrected ECC errors"]},
        "processes": [],
    }


def fixture(name):
    return json.loads((FIXTURES / f"{name}.json").read_text())


@pytest.fixture(scope="module")
def chart_reference():
    path = DRA_REFERENCE / "values.yaml"
    if not path.is_file():
        pytest.skip(f"chart values not found ({path}); set GPUSPLIT_REFERENCE_DIR")
    return yaml.safe_load(path.read_text())


def dra_fleet():
    """gpu-a: 4 GPUs, minor numbers reversed, 2 kept for the host, GPU 3 degraded (excluded)."""
    gpus_a = [gpu(i, minor=3 - i) for i in range(4)]
    gpus_a[3]["health"] = {"status": "degraded", "reasons": ["row remapping failed"]}
    return plan_fleet(
        {
            "gpu-a": {"facts": gpus_a, "mode": "dra", "split": {"host_count": 2}},
            "gpu-b": {
                "facts": [gpu(i, host_no=2) for i in range(2)],
                "mode": "device_plugin",
                "split": {"count": 1},
            },
            "gpu-c": {
                "facts": [gpu(i, host_no=3) for i in range(2)],
                "mode": "dra",
                "split": {"host_count": 0},
            },
        }
    )


# --------------------------------------------------------------------------------------------
# names and DeviceTaintRules


def test_shared_names_are_those_of_render():
    from ansible_collections.gpusplit.k8s.plugins.plugin_utils import render

    assert dra.MANAGED_BY == render.MANAGED_BY
    assert dra.LABEL_MANAGED_BY == render.LABEL_MANAGED_BY
    assert dra.LABEL_NAME == render.LABEL_NAME
    assert dra.LABEL_NODE == render.LABEL_NODE
    assert dra.LABEL_MODE == render.LABEL_MODE
    assert dra.ANNOTATION_HOST == render.ANNOTATION_HOST
    assert render.APP_NAME in dra.DEVICE_PLUGIN_LABELS[dra.LABEL_NAME]


def test_the_roles_prune_selector_is_the_plans():
    role_vars = yaml.safe_load((ROOT / "roles" / "dra_split" / "vars" / "main.yml").read_text())
    assert role_vars["dra_split_prune_selector"] == dra.PLAN_RULES_SELECTOR
    assert "gpusplit-isolate" not in dra.PLAN_RULES_SELECTOR  # isolation rules are never pruned


def test_device_name_is_the_minor_number():
    assert dra.device_name(3) == "gpu-3"
    assert dra.device_name("7") == "gpu-7"
    for bad in (None, -1, "x", True, 1.5):
        with pytest.raises(DraError):
            dra.device_name(bad)


def test_rule_names_are_deterministic_dns_labels_and_distinct():
    assert dra.taint_rule_name("host", "gpu-a", "gpu-1") == "gpusplit-host-gpu-a-gpu-1"
    assert dra.taint_rule_name("excluded", "gpu-a", "gpu-1") == "gpusplit-excluded-gpu-a-gpu-1"
    assert dra.taint_rule_name("isolate", "gpu-a", "gpu-1") == "gpusplit-isolate-gpu-a-gpu-1"
    long_a = "node-" + "a" * 70 + ".dc1.example.com"
    long_b = "node-" + "a" * 70 + ".dc2.example.com"
    names = {dra.taint_rule_name("host", n, "gpu-0") for n in (long_a, long_b, "Gpu-A", "gpu-a")}
    assert len(names) == 4
    for name in names:
        assert len(name) <= 63 and re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", name)
    assert dra.taint_rule_name("host", long_a, "gpu-0") == dra.taint_rule_name("host", long_a, "gpu-0")
    with pytest.raises(DraError):
        dra.taint_rule_name("other", "n", "gpu-0")


def test_host_share_rules_taint_host_and_excluded_devices_by_minor():
    plan = dra_fleet()
    a = plan["nodes"]["gpu-a"]
    # host_count 2 keeps GPUs 0 and 1 (by bus id); their minors are 3 and 2
    assert a["dra_devices"] == ["gpu-3", "gpu-2"] and a["dra_excluded_devices"] == ["gpu-0"]
    rules = dra.host_share_rules(plan)
    names = [r["metadata"]["name"] for r in rules]
    assert names == sorted(names)
    assert names == [
        "gpusplit-excluded-gpu-a-gpu-0",
        "gpusplit-host-gpu-a-gpu-2",
        "gpusplit-host-gpu-a-gpu-3",
    ]
    by_name = {r["metadata"]["name"]: r for r in rules}
    for rule in rules:
        validate(rule)
        assert rule["apiVersion"] == "resource.k8s.io/v1" and rule["kind"] == "DeviceTaintRule"
        assert rule["spec"]["taint"]["effect"] == "NoSchedule"
        assert "timeAdded" not in rule["spec"]["taint"]
        assert rule["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpusplit"
        assert rule["metadata"]["labels"]["app.kubernetes.io/name"] == "gpusplit-host-share"
        assert rule["metadata"]["labels"]["gpusplit.io/node"] == "gpu-a"
    host3 = by_name["gpusplit-host-gpu-a-gpu-3"]
    assert host3["spec"]["deviceSelector"] == {"driver": "gpu.nvidia.com", "pool": "gpu-a", "device": "gpu-3"}
    assert host3["spec"]["taint"] == {
        "key": "gpusplit.io/host-share",
        "value": "reserved",
        "effect": "NoSchedule",
    }
    assert host3["metadata"]["annotations"]["gpusplit.io/gpu-uuid"] == a["host_uuids"][0]
    assert host3["metadata"]["annotations"]["gpusplit.io/pci-bus-id"] == "00000000:18:00.0"
    excl = by_name["gpusplit-excluded-gpu-a-gpu-0"]
    assert excl["spec"]["taint"] == {
        "key": "gpusplit.io/excluded",
        "value": "degraded",
        "effect": "NoSchedule",
    }
    assert "row remapping failed" in excl["metadata"]["annotations"]["gpusplit.io/reason"]
    assert excl["metadata"]["labels"]["gpusplit.io/taint-purpose"] == "excluded"
    # the selector the role prunes with selects them all
    selector = dict(kv.split("=") for kv in dra.PLAN_RULES_SELECTOR.split(","))
    assert all(selector.items() <= r["metadata"]["labels"].items() for r in rules)


def test_host_share_rules_ignore_other_modes_and_a_node_without_host_share():
    plan = dra_fleet()
    assert not [r for r in dra.host_share_rules(plan) if r["spec"]["deviceSelector"]["pool"] != "gpu-a"]
    assert dra.host_share_rules({"nodes": {"gpu-b": plan["nodes"]["gpu-b"]}}) == []


def test_host_share_rules_with_noexecute_and_refused_effects():
    plan = dra_fleet()
    assert {r["spec"]["taint"]["effect"] for r in dra.host_share_rules(plan, "NoExecute")} == {"NoExecute"}
    with pytest.raises(DraError, match="PreferNoSchedule"):
        dra.host_share_rules(plan, "PreferNoSchedule")


def test_host_share_rules_refuse_a_stale_plan():
    plan = copy.deepcopy(dra_fleet())
    plan["nodes"]["gpu-a"]["dra_devices"] = ["gpu-3"]
    with pytest.raises(DraError, match="re-run the planner"):
        dra.host_share_rules(plan)


def test_host_share_rules_from_a_real_fixture_use_minor_not_index():
    ws = fixture("workstation")["gpus"]  # index 0 is minor 1 and the other way round
    plan = plan_node("ws", ws, "dra", {"host_count": 1})
    [rule] = dra.host_share_rules(plan)
    host_gpu = next(g for g in ws if g["uuid"] == plan["host_uuids"][0])
    assert rule["spec"]["deviceSelector"]["device"] == f"gpu-{host_gpu['minor_number']}"
    assert host_gpu["minor_number"] != host_gpu["index"]


def test_isolation_rule_effects():
    located = {"host": "h", "node": "n", "uuid": "GPU-1", "minor_number": 5, "pci_bus_id": "00000000:18:00.0"}
    for effect in dra.EFFECTS:
        rule = dra.isolation_rule(located, effect, "ecc errors")
        validate(rule)
        assert rule["metadata"]["name"] == "gpusplit-isolate-n-gpu-5"
        assert rule["metadata"]["labels"]["app.kubernetes.io/name"] == "gpusplit-isolate"
        taint = rule["spec"]["taint"]
        assert taint["key"] == "gpusplit.io/unhealthy" and taint["effect"] == effect
        assert taint["value"].startswith("ecc-errors-")  # a label value: the blank is replaced, hashed
        assert rule["metadata"]["annotations"]["gpusplit.io/reason"] == "ecc errors"
    assert dra.isolation_rule(located)["spec"]["taint"]["effect"] == "None"
    assert dra.isolation_rule(located)["spec"]["taint"]["value"] == "isolated"
    with pytest.raises(DraError):
        dra.isolation_rule(located, "Evict")
    with pytest.raises(DraError, match="no minor number"):
        dra.isolation_rule({**located, "minor_number": None})


def test_rules_table():
    text = dra.rules_table(dra.host_share_rules(dra_fleet()))
    assert "gpu-a" in text and "gpusplit.io/host-share=reserved" in text and "3 DeviceTaintRule(s)" in text
    assert "no DeviceTaintRule" in dra.rules_table([])


# --------------------------------------------------------------------------------------------
# DeviceClass, ResourceSlice, claims


def test_device_class_is_the_charts():
    dc = dra.render_device_class()
    validate(dc)
    assert dc["metadata"]["name"] == "gpu.nvidia.com"
    [sel] = dc["spec"]["selectors"]
    assert sel["cel"]["expression"].startswith("device.driver == 'gpu.nvidia.com'")
    assert "type == 'gpu'" in sel["cel"]["expression"]
    ext = dra.render_device_class(
        "x.gpu.nvidia.com", extended_resource_name="nvidia.com/gpu", labels={"a": "b"}
    )
    validate(ext)
    assert ext["spec"]["extendedResourceName"] == "nvidia.com/gpu"


@pytest.mark.parametrize("name", ["dgx-h100", "workstation", "h200", "gpu-lost", "a100-mig", "nogpu"])
def test_resource_slice_publishes_what_the_driver_would(name):
    doc = fixture(name)
    rs = dra.render_resource_slice("lab-node", doc["gpus"], 1, doc.get("driver_version"))
    validate(rs)
    spec = rs["spec"]
    assert spec["driver"] == "gpu.nvidia.com" and spec["nodeName"] == "lab-node"
    assert spec["pool"] == {"name": "lab-node", "generation": 1, "resourceSliceCount": 1}
    published = [
        g for g in doc["gpus"] if not g.get("lost") and (g.get("mig_mode") or {}).get("current") != "enabled"
    ]
    whole = [d for d in spec["devices"] if d["attributes"]["type"] == {"string": "gpu"}]
    assert [d["name"] for d in whole] == sorted(
        (f"gpu-{g['minor_number']}" for g in published), key=lambda n: int(n[4:])
    )
    # a MIG-enabled GPU is published as its MIG devices, each naming its parent
    migs = [d for d in spec["devices"] if d["attributes"]["type"] == {"string": "mig"}]
    mig_gpus = [g for g in doc["gpus"] if (g.get("mig_mode") or {}).get("current") == "enabled"]
    assert len(migs) == sum(len(g["mig_devices"]) for g in mig_gpus)
    for dev in migs:
        parent = next(g for g in mig_gpus if g["uuid"] == dev["attributes"]["parentUUID"]["string"])
        assert dev["name"].startswith(f"gpu-{parent['minor_number']}-mig-")
        assert dev["attributes"]["uuid"]["string"] in {m["uuid"] for m in parent["mig_devices"]}
    for dev in whole:
        g = next(g for g in published if f"gpu-{g['minor_number']}" == dev["name"])
        attrs = dev["attributes"]
        assert attrs["uuid"] == {"string": g["uuid"]}
        assert attrs["productName"] == {"string": g["name"]}
        assert attrs["type"] == {"string": "gpu"}
        assert re.match(
            r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$",
            attrs["resource.kubernetes.io/pciBusID"]["string"],
        )
        assert attrs["driverVersion"]["version"] == "570.172.8"  # strict semver, no leading zero
        assert dev["capacity"]["memory"]["value"] == f"{g['memory_total_mib']}Mi"


def test_pci_bus_id_is_the_extended_bdf():
    assert dra.dra_pci_bus_id("00000000:1B:00.0") == "0000:1b:00.0"
    assert dra.dra_pci_bus_id("1b:00.0") == "0000:1b:00.0"
    assert dra.dra_pci_bus_id("nope") is None


def test_claim_template_and_claim_validate_with_tolerations():
    tolerations = [
        dra.host_share_toleration(),
        {
            "key": "gpusplit.io/unhealthy",
            "operator": "Equal",
            "value": "ecc",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        },
        {"operator": "Exists"},
    ]
    rct = dra.render_claim("one-gpu", "ns", tolerations=tolerations)
    validate(rct)
    [req] = rct["spec"]["spec"]["devices"]["requests"]
    assert req["name"] == "gpu"
    assert req["exactly"]["deviceClassName"] == "gpu.nvidia.com"
    assert req["exactly"]["count"] == 1 and req["exactly"]["allocationMode"] == "ExactCount"
    assert req["exactly"]["tolerations"][0] == {
        "key": "gpusplit.io/host-share",
        "operator": "Exists",
        "effect": "NoSchedule",
    }
    assert req["exactly"]["tolerations"][1]["tolerationSeconds"] == 300
    claim = dra.render_claim(
        "shared",
        "ns",
        count=2,
        kind="ResourceClaim",
        selectors=["device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H200'"],
        labels={"a": "b"},
    )
    validate(claim)
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["count"] == 2
    assert "tolerations" not in claim["spec"]["devices"]["requests"][0]["exactly"]


@pytest.mark.parametrize(
    "bad",
    [
        {"operator": "Sometimes"},
        {"key": "a", "operator": "Exists", "value": "x"},
        {"operator": "Equal", "value": "x"},
        {"key": "bad key!"},
        {"key": "a", "effect": "PreferNoSchedule"},
        {"key": "a", "effect": "NoSchedule", "tolerationSeconds": 5},
        {"key": "a", "colour": "red"},
        "a",
    ],
)
def test_bad_tolerations_are_refused(bad):
    with pytest.raises(DraError):
        dra.render_claim("c", "ns", tolerations=[bad])


def test_bad_claims_are_refused():
    for kwargs in ({"count": 0}, {"count": True}, {"kind": "Pod"}):
        with pytest.raises(DraError):
            dra.render_claim("c", "ns", **kwargs)


# --------------------------------------------------------------------------------------------
# chart values


def test_chart_values_keys_exist_in_the_charts_values(chart_reference):
    for settings in (
        None,
        {"driver_root": "/run/nvidia/driver", "feature_gates": {"NVMLDeviceHealthCheck": True}},
        {
            "image_repository": "mirror.example.com/dra-driver-nvidia-gpu",
            "image_tag": "v0.4.1",
            "compute_domains": True,
        },
        {"extra_values": {"logVerbosity": "6", "kubeletPlugin": {"priorityClassName": "x"}}},
    ):
        values = dra.chart_values(settings)
        assert dra.unknown_value_paths(values, chart_reference) == [], settings
    assert dra.unknown_value_paths({"kubeletPlugin": {"nodeSelectr": {}}, "bogus": 1}, chart_reference) == [
        "kubeletPlugin.nodeSelectr",
        "bogus",
    ]


def test_chart_values_pass_the_charts_own_validation_and_run_only_on_dra_nodes(chart_reference):
    values = dra.chart_values()
    assert values["gpuResourcesEnabledOverride"] is True
    assert values["resources"]["gpus"]["enabled"] is True
    assert values["nvidiaDriverRoot"] == "/"
    # Helm merges maps and replaces lists: the effective values
    merged = dra.deep_merge(chart_reference, values)
    # templates/validation.yaml of chart 0.4.1: both refusals must not fire
    assert not (merged["resources"]["gpus"]["enabled"] and not merged["gpuResourcesEnabledOverride"])
    assert not (merged["resources"]["computeDomains"]["enabled"] and not merged["webhook"]["enabled"])
    plugin = merged["kubeletPlugin"]
    assert plugin["nodeSelector"] == {"gpusplit.io/mode": "dra"}
    terms = plugin["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [{"matchExpressions": [{"key": "gpusplit.io/mode", "operator": "In", "values": ["dra"]}]}]
    # the chart's tolerations stay (nvidia.com/gpu NoSchedule, as gpusplit's node taint)
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in plugin["tolerations"]


def test_chart_values_settings_are_checked():
    for bad in (
        {"driver_root": "run/nvidia"},
        {"compute_domains": "yes"},
        {"feature_gates": {"X": "on"}},
        {"extra_values": []},
        {"colour": "red"},
        "x",
    ):
        with pytest.raises(DraError):
            dra.chart_values(bad)


def test_the_chart_version_is_pinned_once_and_matches_the_reference():
    defaults = yaml.safe_load((ROOT / "roles" / "dra_driver" / "defaults" / "main.yml").read_text())
    assert defaults["gpusplit_dra_chart_name"] == "dra-driver-nvidia-gpu"
    assert defaults["gpusplit_dra_chart_repo"] == "oci://registry.k8s.io/dra-driver-nvidia/charts"
    sources = REFERENCE_DIR / "SOURCES.md"
    if not sources.is_file():
        pytest.skip("SOURCES.md not found")
    match = re.search(r"dra-driver-nvidia-gpu Helm chart \(chart version ([0-9.]+)\)", sources.read_text())
    assert match and defaults["gpusplit_dra_chart_version"] == match.group(1) == "0.4.1"
    # nowhere else
    hits = [
        p
        for p in list((ROOT / "roles").rglob("*.yml"))
        + list((ROOT / "playbooks").glob("*.yml"))
        + list((ROOT / "plugins" / "module_utils").rglob("*.py"))
        + list((ROOT / "plugins" / "plugin_utils").rglob("*.py"))
        if "0.4.1" in p.read_text()
    ]
    assert hits == [ROOT / "roles" / "dra_driver" / "defaults" / "main.yml"] or set(hits) == {
        ROOT / "roles" / "dra_driver" / "defaults" / "main.yml",
        ROOT / "roles" / "dra_driver" / "meta" / "argument_specs.yml",
    }


# --------------------------------------------------------------------------------------------
# preflight

APIS_137 = {
    "resource.k8s.io/v1": {
        k: {}
        for k in ("DeviceClass", "DeviceTaintRule", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice")
    },
    "v1": {"Pod": {}},
}
GOOD_CLUSTER = {"git_version": "v1.37.2", "apis": APIS_137}
CTD2 = {
    "config_text": "version = 3\n",
    "config_path": "/etc/containerd/config.toml",
    "version": "",
    "imports": [],
}


def hosts(**over):
    base = {"gpu-a": {"node": "node-a", "driver_version": "570.172.08", "containerd": dict(CTD2)}}
    base["gpu-a"].update(over)
    return base


def plugin_pod(node, image="nvcr.io/nvidia/k8s-device-plugin:v0.20.0", labels=None, phase="Running"):
    return {
        "metadata": {"name": "dp-x", "namespace": "kube-system", "labels": labels or {}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": image}]},
        "status": {"phase": phase},
    }


def test_preflight_all_good():
    report = dra.preflight(GOOD_CLUSTER, hosts(), [])
    assert report["ok"] and report["errors"] == []
    assert {c["check"] for c in report["checks"]} == set(dra.PREFLIGHT_CHECKS)
    table = dra.preflight_table(report)
    assert "0 failed" in table and "containerd 2.x enables CDI by default" in table


@pytest.mark.parametrize(
    ("version", "ok"),
    [
        ("v1.37.2", True),
        ("v1.34.2", True),
        ("v1.34.1", False),
        ("v1.33.9", False),
        ("v1.35.0+k3s1", True),
        ("v1.34.2-eks-4096722", True),
        ("garbage", False),
        (None, False),
    ],
)
def test_preflight_kubernetes_version(version, ok):
    report = dra.preflight({"git_version": version, "apis": APIS_137}, hosts(), [])
    assert report["ok"] is ok, report["errors"]


def test_preflight_needs_resource_v1_and_device_taint_rules():
    old = {
        "git_version": "v1.36.3",
        "apis": {
            "resource.k8s.io/v1": {
                k: {} for k in ("DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice")
            },
            "resource.k8s.io/v1beta2": {"DeviceTaintRule": {}},
        },
    }
    report = dra.preflight(old, hosts(), [])
    assert not report["ok"]
    assert any("DeviceTaintRule" in e and "v1beta2" in e for e in report["errors"])
    assert dra.preflight(old, hosts(), [], need_taint_rules=False)["ok"]
    none = dra.preflight({"git_version": "v1.37.2", "apis": {"resource.k8s.io/v1beta1": {}}}, hosts(), [])
    assert any("does not serve resource.k8s.io/v1" in e for e in none["errors"])


@pytest.mark.parametrize(
    ("driver", "ok"),
    [
        ("570.172.08", True),
        ("565.57.01", True),
        ("560.35.03", False),
        ("470.256.02", False),
        (None, False),
        ("weird", False),
    ],
)
def test_preflight_driver_version(driver, ok):
    report = dra.preflight(GOOD_CLUSTER, hosts(driver_version=driver), [])
    assert report["ok"] is ok


CTD17 = 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "pause"\n'


@pytest.mark.parametrize(
    ("text", "version", "imports", "expected"),
    [
        ("version = 3\n", None, [], True),
        ("version = 3\n[plugins.'io.containerd.cri.v1.runtime']\n  enable_cdi = false\n", None, [], False),
        (CTD17, "containerd containerd.io 1.7.27 05044ec0", [], False),
        (CTD17.replace("sandbox_image", "enable_cdi = true\n  sandbox_image"), "1.7.27", [], True),
        (
            CTD17,
            "1.7.27",
            [
                (
                    "/etc/containerd/conf.d/cdi.toml",
                    '[plugins."io.containerd.grpc.v1.cri"]\nenable_cdi = true\n',
                )
            ],
            True,
        ),
        (CTD17, None, [], None),  # version 2 config, containerd unknown: cannot tell
        (
            CTD17,
            "containerd github.com/containerd/containerd/v2 v2.1.4 abc",
            [],
            True,
        ),  # 2.x migrates v2 configs
        (None, "v2.0.5", [], True),
        (None, "1.7.20", [], False),
        (None, None, [], None),
        ("version = 3\n", "1.6.33", [], False),
        ("[plugins.cri]\nenable_cdi = true\n", "1.7.1", [], True),
    ],
)
def test_containerd_cdi(text, version, imports, expected):
    assert dra.containerd_cdi(text, version, imports)["enabled"] is expected


def test_containerd_cdi_refusals_say_what_to_do():
    report = dra.preflight(GOOD_CLUSTER, hosts(containerd={"config_text": CTD17, "version": "1.7.27"}), [])
    [err] = report["errors"]
    assert "gpu-a: CDI" in err and "enable_cdi = true" in err and "io.containerd.grpc.v1.cri" in err
    broken = dra.preflight(GOOD_CLUSTER, hosts(containerd={"config_text": "version = [", "version": ""}), [])
    assert any("not valid TOML" in e for e in broken["errors"])
    missing = dra.preflight(GOOD_CLUSTER, hosts(containerd=None), [])
    assert any("not inspected" in e for e in missing["errors"])


def test_containerd_imports_are_absolute():
    text = 'version = 2\nimports = ["conf.d/*.toml", "/etc/other.toml"]\n'
    assert dra.containerd_imports(text, "/etc/containerd/config.toml") == [
        "/etc/containerd/conf.d/*.toml",
        "/etc/other.toml",
    ]
    assert dra.containerd_imports(None) == [] and dra.containerd_imports("version = 3\n") == []


@pytest.mark.parametrize(
    ("pod", "refused"),
    [
        (plugin_pod("node-a"), True),  # stock / operator image
        (
            plugin_pod(
                "node-a", image="example/other", labels={"app.kubernetes.io/name": "gpusplit-device-plugin"}
            ),
            True,
        ),
        (plugin_pod("node-b"), False),  # another node
        (plugin_pod("node-a", phase="Succeeded"), False),
        (plugin_pod("node-a", image="cuda:12"), False),
    ],
)
def test_preflight_device_plugin_on_a_dra_node(pod, refused):
    report = dra.preflight(GOOD_CLUSTER, hosts(), [pod])
    assert report["ok"] is not refused
    if refused:
        assert "kube-system/dp-x" in report["errors"][0] and "node-a" in report["errors"][0]


def test_preflight_skip_is_said_and_unknown_skip_refused():
    report = dra.preflight(
        GOOD_CLUSTER, hosts(containerd={"config_text": None, "version": ""}), [], skip=["cdi"]
    )
    assert report["ok"]
    assert any(c["check"] == "cdi" and c["ok"] is None for c in report["checks"])
    assert any("skipped" in w for w in report["warnings"])
    assert not dra.preflight(GOOD_CLUSTER, hosts(), [], skip=["cdl"])["ok"]


def test_preflight_collects_every_refusal():
    report = dra.preflight(
        {"git_version": "v1.33.0", "apis": {}},
        hosts(driver_version="550.1", containerd={"config_text": CTD17, "version": "1.7.2"}),
        [plugin_pod("node-a")],
    )
    assert [c["check"] for c in report["checks"] if c["ok"] is False] == [
        "api",
        "kubernetes_version",
        "driver_version",
        "cdi",
        "device_plugin",
    ]


# --------------------------------------------------------------------------------------------
# published slices


def published_for(plan, node="gpu-a", swap=False, generation=1):
    node_plan = plan["nodes"][node]
    facts = [
        {
            "uuid": g["uuid"],
            "minor_number": g["minor_number"],
            "name": g["name"],
            "pci_bus_id": g["pci_bus_id"],
        }
        for g in node_plan["gpus"]
    ]
    if swap:
        facts[0]["minor_number"], facts[1]["minor_number"] = (
            facts[1]["minor_number"],
            facts[0]["minor_number"],
        )
    return dra.render_resource_slice(node_plan["node"], facts, generation)


def test_check_published_matches_and_warns_when_unpublished():
    plan = dra_fleet()
    result = dra.check_published(plan, [published_for(plan)])
    assert result["ok"]
    assert any("gpu-c" in w and "not published" in w for w in result["warnings"])


def test_check_published_refuses_a_device_that_is_another_gpu():
    plan = dra_fleet()
    result = dra.check_published(plan, [published_for(plan, swap=True)])
    assert not result["ok"]
    assert "would hit another GPU" in result["errors"][0]
    # an older pool generation is not looked at
    assert dra.check_published(
        plan, [published_for(plan, swap=True, generation=1), published_for(plan, generation=2)]
    )["ok"]


# --------------------------------------------------------------------------------------------
# the controller's report


def test_parse_the_controllers_none_message():
    impact = dra.parse_eviction_message(NONE_MESSAGE)
    assert impact == {
        "published_devices": 3,
        "allocated_devices": 1,
        "pods_would_be_evicted": 1,
        "pods_pending_eviction": None,
        "namespaces": 1,
        "pods_evicted": None,
        "final": True,
    }
    plural = dra.parse_eviction_message(
        "1 published device selected. 0 allocated devices selected. 0 pods would be evicted in 0 different namespaces "
        "if the effect was NoExecute. This information will not be updated again."
    )
    assert (
        plural["published_devices"],
        plural["allocated_devices"],
        plural["pods_would_be_evicted"],
        plural["namespaces"],
    ) == (1, 0, 0, 0)


def test_parse_the_controllers_noexecute_messages():
    pending = dra.parse_eviction_message(
        "2 pods need to be evicted in 2 different namespaces. 1 pod evicted since starting the controller."
    )
    assert (pending["pods_pending_eviction"], pending["namespaces"], pending["pods_evicted"]) == (2, 2, 1)
    one = dra.parse_eviction_message("1 pod needs to be evicted in 1 namespace.")
    assert (one["pods_pending_eviction"], one["namespaces"]) == (1, 1)
    other = dra.parse_eviction_message("Eviction only happens for the NoExecute effect.")
    assert all(v in (None, False) for v in other.values())
    assert dra.parse_eviction_message(None)["published_devices"] is None


def rule_with(effect, generation, cond_generation=None, status="False", message=NONE_MESSAGE):
    cond = {
        "type": "EvictionInProgress",
        "status": status,
        "reason": "NoEffect",
        "message": message,
        "observedGeneration": cond_generation,
        "lastTransitionTime": "2026-11-29T07:34:17Z",
    }
    return {
        "metadata": {"name": "r", "generation": generation},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": "n", "device": "gpu-1"},
            "taint": {"key": "k", "effect": effect},
        },
        "status": {"conditions": [cond] if cond_generation is not None else []},
    }


def test_rule_report_and_settled():
    report = dra.rule_report(rule_with("None", 1, 1))
    assert report["current"] and report["impact"]["published_devices"] == 3 and report["since"]
    assert dra.rule_settled(rule_with("None", 1, 1))
    assert not dra.rule_settled(rule_with("None", 2, 1))  # the condition is about the previous effect
    assert not dra.rule_settled(rule_with("None", 1))
    assert dra.rule_settled(rule_with("NoExecute", 2, 2, "True"))
    assert not dra.rule_settled(rule_with("NoExecute", 2, 2, "True"), wait_eviction=True)
    assert dra.rule_settled(rule_with("NoExecute", 2, 2, "False"), wait_eviction=True)
    assert dra.rule_report(None)["current"] is False


# --------------------------------------------------------------------------------------------
# isolation


def fleet_input():
    return {
        "gpu-a": {"facts": [gpu(i) for i in range(4)], "mode": "device_plugin", "split": {"host_count": 1}},
        "gpu-b": {
            "facts": [gpu(i, minor=7 - i, host_no=2) for i in range(2)],
            "mode": "dra",
            "split": {"count": 1},
            "node_name": "node-b.example.com",
        },
    }


def test_locate_gpu():
    fi = fleet_input()
    uuid = fi["gpu-b"]["facts"][1]["uuid"]
    found = dra.locate_gpu(fi, uuid.upper().replace("GPU-", "gpu-"))
    assert found["host"] == "gpu-b" and found["node"] == "node-b.example.com" and found["mode"] == "dra"
    assert found["device"] == "gpu-6" and found["uuid"] == uuid
    with pytest.raises(DraError, match=r"not on any host .*gpu-a, gpu-b"):
        dra.locate_gpu(fi, "GPU-00000000-0000-0000-0000-000000000000")
    with pytest.raises(DraError, match="MIG"):
        dra.locate_gpu(fi, "MIG-12345678-1234-1234-1234-123456789abc")
    fi["gpu-c"] = copy.deepcopy(fi["gpu-b"])
    with pytest.raises(DraError, match="several hosts"):
        dra.locate_gpu(fi, uuid)


def test_isolation_replans_without_the_gpu_and_leaves_the_input_alone():
    fi = fleet_input()
    before = copy.deepcopy(fi)
    victim = fi["gpu-a"]["facts"][2]["uuid"]  # in the Kubernetes share
    normal = plan_fleet({"gpu-a": fi["gpu-a"]})["nodes"]["gpu-a"]
    isolated = plan_fleet(dra.isolation_fleet_input(fi, "gpu-a", victim, "xid 79"))["nodes"]["gpu-a"]
    assert fi == before
    assert normal["kubernetes_count"] == 3 and isolated["kubernetes_count"] == 2
    assert victim in normal["kubernetes_uuids"] and victim not in isolated["kubernetes_uuids"]
    assert isolated["host_uuids"] == normal["host_uuids"]
    [excluded] = isolated["excluded"]
    assert excluded["uuid"] == victim and "isolated by isolate_gpu.yml (xid 79)" in excluded["reason"]
    assert isolated["resources"]["nvidia.com/gpu"] == 2


def test_isolation_of_a_gpu_the_split_names_for_kubernetes_is_refused_by_the_planner():
    fi = fleet_input()
    victim = fi["gpu-a"]["facts"][1]["uuid"]
    fi["gpu-a"]["split"] = {"uuids": [victim]}
    with pytest.raises(PlanError, match="lost"):
        plan_fleet(dra.isolation_fleet_input(fi, "gpu-a", victim))
    with pytest.raises(DraError):
        dra.isolate_facts(fi["gpu-a"]["facts"], "GPU-00000000-0000-0000-0000-000000000000")
    with pytest.raises(DraError):
        dra.isolation_fleet_input(fi, "gpu-z", victim)


# --------------------------------------------------------------------------------------------
# the filter plugin and the module


def test_filters_are_named_and_wrap_refusals():
    filters = dra_filters.FilterModule().filters()
    assert all(name.startswith("gpusplit_dra_") for name in filters)
    others = set()
    for path in (ROOT / "plugins" / "filter").glob("*.py"):
        if path.name != "dra.py":
            others |= set(re.findall(r"^def (gpusplit_\w+)\(", path.read_text(), re.M))
    assert not set(filters) & others
    with pytest.raises(AnsibleFilterError, match="gpusplit DRA refused"):
        filters["gpusplit_dra_isolation_rule"]({"host": "h", "node": "n", "minor_number": 1}, "Evict")
    with pytest.raises(AnsibleFilterError, match="split plan refused"):
        filters["gpusplit_dra_host_rules"]("not a plan")
    assert filters["gpusplit_dra_parse_eviction"](NONE_MESSAGE)["published_devices"] == 3
    results = [{"source": "/a.toml", "content": "ZW5hYmxlX2NkaSA9IHRydWUK"}, {"skipped": True}]
    assert filters["gpusplit_dra_slurped_files"](results) == [
        {"path": "/a.toml", "text": "enable_cdi = true\n"}
    ]


def test_device_taint_rule_module_documents_its_arguments():
    from ansible_collections.gpusplit.k8s.plugins.modules import device_taint_rule as mod

    doc = yaml.safe_load(mod.DOCUMENTATION)
    assert doc["module"] == "device_taint_rule"
    assert set(doc["options"]) == {
        "definition",
        "name",
        "state",
        "wait",
        "wait_eviction",
        "wait_timeout",
        "refresh",
        "report_first",
        "field_manager",
    }
    assert doc["extends_documentation_fragment"] == [
        "gpusplit.k8s.cluster",  # kubeconfig, context
        "gpusplit.k8s.attributes.check_mode_no_diff",
    ]
    yaml.safe_load(mod.EXAMPLES)
    yaml.safe_load(mod.RETURN)


# --------------------------------------------------------------------------------------------
# MIG-enabled GPUs in mode dra: rules by the names the driver publishes


def mig_fleet(host_uuids):
    doc = fixture("a100-mig")
    return plan_fleet(
        {
            "mig-a": {
                "facts": doc["gpus"],
                "mode": "dra",
                "split": {"host_uuids": host_uuids},
                "node_name": "node-m",
            }
        }
    ), doc


def test_lab_mig_device_names_follow_the_drivers_scheme():
    assert dra.lab_mig_device_name(1, "1g.10gb", 19, 6) == "gpu-1-mig-1g10gb-19-6"
    assert dra.lab_mig_device_name(0, "1g.10gb+me", 20, 0) == "gpu-0-mig-1g10gb-me-20-0"


def test_host_share_rules_cover_the_published_mig_devices_of_a_reserved_mig_gpu():
    doc = fixture("a100-mig")
    parent = doc["gpus"][0]  # MIG enabled, two 3g.40gb devices
    plan, _ = mig_fleet([parent["uuid"]])
    assert any("MIG enabled" in w for w in plan["warnings"] + plan["nodes"]["mig-a"].get("warnings", []))
    without = dra.host_share_rules(plan)
    assert [r["spec"]["deviceSelector"]["device"] for r in without] == ["gpu-0"]
    rs = dra.render_resource_slice("node-m", doc["gpus"], 1, doc.get("driver_version"))
    published_migs = sorted(
        d["name"]
        for d in rs["spec"]["devices"]
        if d["attributes"].get("parentUUID", {}).get("string") == parent["uuid"]
    )
    assert len(published_migs) == 2
    rules = dra.host_share_rules(plan, slices=[rs])
    devices = sorted(r["spec"]["deviceSelector"]["device"] for r in rules)
    assert devices == sorted(["gpu-0", *published_migs])
    for rule in rules:
        validate(rule)
        assert rule["spec"]["deviceSelector"]["pool"] == "node-m"
        assert rule["metadata"]["annotations"]["gpusplit.io/gpu-uuid"] == parent["uuid"]
        assert rule["spec"]["taint"]["key"] == "gpusplit.io/host-share"
    assert len({r["metadata"]["name"] for r in rules}) == len(rules)
    # the other MIG GPU (Kubernetes share) gets nothing
    other = doc["gpus"][1]["uuid"]
    assert all(r["metadata"]["annotations"]["gpusplit.io/gpu-uuid"] != other for r in rules)


def test_check_published_warns_while_a_reserved_mig_gpu_is_unpublished():
    doc = fixture("a100-mig")
    plan, _ = mig_fleet([doc["gpus"][0]["uuid"]])
    whole_only = [g for g in doc["gpus"] if g["mig_mode"]["current"] != "enabled"]
    early = dra.render_resource_slice("node-m", whole_only, 1, doc.get("driver_version"))
    result = dra.check_published(plan, [early])
    assert result["ok"]
    assert any("MIG enabled" in w and "publishes none of its MIG devices" in w for w in result["warnings"])
    full = dra.render_resource_slice("node-m", doc["gpus"], 1, doc.get("driver_version"))
    result = dra.check_published(plan, [full])
    assert result["ok"] and not any("MIG" in w for w in result["warnings"])
    [node] = result["nodes"]
    assert len(node["mig_devices"][doc["gpus"][0]["uuid"]]) == 2


def test_isolation_rules_of_a_mig_gpu_and_of_a_lost_one():
    doc = fixture("a100-mig")
    fi = {"mig-a": {"facts": doc["gpus"], "mode": "dra", "split": {"count": 1}, "node_name": "node-m"}}
    located = dra.locate_gpu(fi, doc["gpus"][1]["uuid"])
    assert located["mig_enabled"] is True
    with pytest.raises(DraError, match="publishes none of its MIG devices"):
        dra.isolation_rules(located, "None", "ecc", slices=[])
    rs = dra.render_resource_slice("node-m", doc["gpus"], 1, doc.get("driver_version"))
    rules = dra.isolation_rules(located, "NoExecute", "ecc", slices=[rs])
    assert [r["spec"]["deviceSelector"]["device"] for r in rules][0] == "gpu-1"
    assert len(rules) == 1 + len(doc["gpus"][1]["mig_devices"])
    assert all(r["spec"]["taint"]["effect"] == "NoExecute" for r in rules)
    # a whole GPU: one rule
    whole = dra.locate_gpu(fi, doc["gpus"][2]["uuid"])
    assert [r["spec"]["deviceSelector"]["device"] for r in dra.isolation_rules(whole, slices=[rs])] == [
        "gpu-2"
    ]
    # a lost GPU is not published: nothing to taint
    assert dra.isolation_rules({**whole, "health": "lost"}, slices=[rs]) == []


def test_rules_of_gpu_finds_ours_by_annotation():
    fi = fleet_input()
    located = dra.locate_gpu(fi, fi["gpu-b"]["facts"][0]["uuid"])
    mine = dra.isolation_rule(located, "None", "ecc")
    other_gpu = dra.isolation_rule(dra.locate_gpu(fi, fi["gpu-b"]["facts"][1]["uuid"]), "None")
    host_rule = dra.render_taint_rule("host", "node-b.example.com", "gpu-7", uuid=located["uuid"])
    foreign = copy.deepcopy(mine)
    foreign["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "someone-else"
    foreign["metadata"]["name"] = "not-ours"
    rules = [mine, other_gpu, host_rule, foreign]
    assert dra.rules_of_gpu(rules, located["uuid"].lower()) == [mine["metadata"]["name"]]
    assert dra.rules_of_gpu(rules, located["uuid"], "host") == [host_rule["metadata"]["name"]]
    with pytest.raises(DraError, match="purpose"):
        dra.rules_of_gpu(rules, located["uuid"], "bogus")


# --------------------------------------------------------------------------------------------
# isolation targets from the facts' health


def test_isolation_findings_follow_the_facts():
    doc = fixture("gpu-lost")
    from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.facts import compute_health

    for g in doc["gpus"]:
        g["health"] = compute_health(g, ["GPU is lost"] if g.get("lost") else [])
    found = {g["minor_number"]: dra.isolation_findings(g) for g in doc["gpus"]}
    assert found[0] == []
    assert found[1] == ["2 uncorrected ECC error(s) since the driver loaded"]
    assert found[2] == ["GPU is lost"]
    assert found[3] == ["row remapping failed: the GPU cannot repair its memory any more"]
    # pending repairs and corrected errors alone are not a reason
    pending = {
        **doc["gpus"][0],
        "remapped_rows": {"pending": True, "failure": False},
        "ecc": {"uncorrected_volatile": 0},
    }
    assert dra.isolation_findings(pending) == []


def test_isolation_targets_by_uuid_or_by_health():
    doc = fixture("gpu-lost")
    from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.facts import compute_health

    for g in doc["gpus"]:  # as the facts module reports them
        g["health"] = compute_health(g, ["GPU is lost"] if g.get("lost") else [])
    fi = {
        "sick": {"facts": doc["gpus"], "mode": "dra", "split": {"host_count": 0}},
        "well": {
            "facts": fixture("workstation")["gpus"],
            "mode": "device_plugin",
            "split": {"host_count": 1},
        },
    }
    targets = dra.isolation_targets(fi, unhealthy=True)
    assert [t["minor_number"] for t in targets] == [1, 2, 3]
    assert {t["host"] for t in targets} == {"sick"}
    assert all(t["why"] for t in targets)
    [one] = dra.isolation_targets(fi, uuid=doc["gpus"][0]["uuid"])
    assert one["minor_number"] == 0 and "named by gpusplit_isolate_uuid" in one["why"][0]
    with pytest.raises(DraError, match="one of the two"):
        dra.isolation_targets(fi)
    with pytest.raises(DraError, match="one of the two"):
        dra.isolation_targets(fi, uuid=doc["gpus"][0]["uuid"], unhealthy=True)
    assert dra.isolation_targets({"well": fi["well"]}, unhealthy=True) == []


def test_isolating_several_gpus_of_one_host_excludes_each():
    fi = fleet_input()
    victims = [fi["gpu-a"]["facts"][2]["uuid"], fi["gpu-a"]["facts"][3]["uuid"]]
    isolated = plan_fleet(dra.isolation_fleet_input(fi, "gpu-a", victims, "ecc"))["nodes"]["gpu-a"]
    assert isolated["kubernetes_count"] == 1
    assert sorted(e["uuid"] for e in isolated["excluded"]) == sorted(victims)


def test_diagnostic_claim_reaches_only_the_isolated_gpu():
    fi = fleet_input()
    located = dra.locate_gpu(fi, fi["gpu-b"]["facts"][0]["uuid"])
    claim = dra.diagnostic_claim("burn-in", "diag", located)
    validate(claim)
    [request] = claim["spec"]["devices"]["requests"]
    exactly = request["exactly"]
    assert exactly["tolerations"] == [
        {"operator": "Exists", "key": "gpusplit.io/unhealthy"},
        {"operator": "Exists", "key": "gpusplit.io/excluded"},
    ]
    assert exactly["selectors"] == [
        {"cel": {"expression": f"device.attributes['gpu.nvidia.com'].uuid == '{located['uuid']}'"}}
    ]
    assert dra.isolation_toleration("NoExecute") == {
        "operator": "Exists",
        "key": "gpusplit.io/unhealthy",
        "effect": "NoExecute",
    }
    with pytest.raises(DraError, match="MIG enabled"):
        dra.diagnostic_claim("x", "diag", {**located, "mig_enabled": True})
    with pytest.raises(DraError, match="not a GPU UUID"):
        dra.diagnostic_claim("x", "diag", {**located, "uuid": "MIG-1"})
