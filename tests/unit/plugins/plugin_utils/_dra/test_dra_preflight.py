"""The DRA preflight (plugins/plugin_utils/_dra/preflight.py): API, versions, CDI in containerd, device plugins."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.names import APP_NAME, LABEL_NAME
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.read import project
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._dra.preflight import (
    DEVICE_PLUGIN_LABELS,
    PREFLIGHT_CHECKS,
    containerd_cdi,
    containerd_imports,
    preflight,
    preflight_table,
)
from ansible_collections.gpusplit.k8s.tests.unit.fieldreads import (
    field_paths,
    query_fields,
    recorded,
    uncovered,
)

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
    report = preflight(GOOD_CLUSTER, hosts(), [])
    assert report["ok"] and report["errors"] == []
    assert {c["check"] for c in report["checks"]} == set(PREFLIGHT_CHECKS)
    table = preflight_table(report)
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
    report = preflight({"git_version": version, "apis": APIS_137}, hosts(), [])
    assert report["ok"] is ok, report["errors"]


RESOURCE_V1 = {k: {} for k in ("DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice")}


def test_preflight_takes_device_taint_rules_in_the_version_the_cluster_serves():
    # 1.36 with DRADeviceTaintRules and resource.k8s.io/v1beta2 on: the rules are written in v1beta2
    gated = {
        "git_version": "v1.36.3",
        "apis": {"resource.k8s.io/v1": RESOURCE_V1, "resource.k8s.io/v1beta2": {"DeviceTaintRule": {}}},
    }
    report = preflight(gated, hosts(), [])
    assert report["ok"], report["errors"]
    check = next(c for c in report["checks"] if c["check"] == "device_taint_rules")
    assert check["detail"] == "DeviceTaintRule served in resource.k8s.io/v1beta2"


def test_preflight_refuses_device_taint_rules_naming_the_gates_of_the_release():
    bare = {"git_version": "v1.36.3", "apis": {"resource.k8s.io/v1": RESOURCE_V1}}
    report = preflight(bare, hosts(), [])
    assert not report["ok"]
    (error,) = report["errors"]
    assert "needs DeviceTaintRule in resource.k8s.io/v1 or resource.k8s.io/v1beta2" in error
    assert "DRADeviceTaintRules (beta, off by default" in error
    assert "--runtime-config=resource.k8s.io/v1beta2=true" in error
    assert preflight(bare, hosts(), [], need_taint_rules=False)["ok"]
    alpha = {
        "git_version": "v1.35.4",
        "apis": {"resource.k8s.io/v1": RESOURCE_V1, "resource.k8s.io/v1alpha3": {"DeviceTaintRule": {}}},
    }
    (error,) = preflight(alpha, hosts(), [])["errors"]
    assert "only in resource.k8s.io/v1alpha3, which gpusplit does not write" in error
    none = preflight({"git_version": "v1.37.2", "apis": {"resource.k8s.io/v1beta1": {}}}, hosts(), [])
    assert any("DRA claims and classes needs" in e and "resource.k8s.io/v1" in e for e in none["errors"])


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
    report = preflight(GOOD_CLUSTER, hosts(driver_version=driver), [])
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
    assert containerd_cdi(text, version, imports)["enabled"] is expected


def test_containerd_cdi_refusals_say_what_to_do():
    report = preflight(GOOD_CLUSTER, hosts(containerd={"config_text": CTD17, "version": "1.7.27"}), [])
    [err] = report["errors"]
    assert "gpu-a: CDI" in err and "enable_cdi = true" in err and "io.containerd.grpc.v1.cri" in err
    broken = preflight(GOOD_CLUSTER, hosts(containerd={"config_text": "version = [", "version": ""}), [])
    assert any("not valid TOML" in e for e in broken["errors"])
    missing = preflight(GOOD_CLUSTER, hosts(containerd=None), [])
    assert any("not inspected" in e for e in missing["errors"])


def test_containerd_imports_are_absolute():
    text = 'version = 2\nimports = ["conf.d/*.toml", "/etc/other.toml"]\n'
    assert containerd_imports(text, "/etc/containerd/config.toml") == [
        "/etc/containerd/conf.d/*.toml",
        "/etc/other.toml",
    ]
    assert containerd_imports(None) == [] and containerd_imports("version = 3\n") == []


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
    report = preflight(GOOD_CLUSTER, hosts(), [pod])
    assert report["ok"] is not refused
    if refused:
        assert "kube-system/dp-x" in report["errors"][0] and "node-a" in report["errors"][0]


def test_preflight_skip_is_said_and_unknown_skip_refused():
    report = preflight(GOOD_CLUSTER, hosts(containerd={"config_text": None, "version": ""}), [], skip=["cdi"])
    assert report["ok"]
    assert any(c["check"] == "cdi" and c["ok"] is None for c in report["checks"])
    assert any("skipped" in w for w in report["warnings"])
    assert not preflight(GOOD_CLUSTER, hosts(), [], skip=["cdl"])["ok"]


def test_preflight_collects_every_refusal():
    report = preflight(
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


def test_the_split_device_plugin_is_recognised_as_a_device_plugin():
    assert APP_NAME in DEVICE_PLUGIN_LABELS[LABEL_NAME]


POD_FIELDS = query_fields("roles/dra_driver/tasks/preflight_checks.yml", "pods")


def test_the_pods_query_keeps_every_field_the_preflight_reads():
    """dra_driver reads every pod once with only the query's fields (cluster_read ``fields``), where it read
    each DRA node's pods whole: the preflight given whole pods reads nothing else, and decides the same on
    the projected ones (pods on other nodes, finished ones, other images, gpusplit's label)."""

    def whole(pod, **more):
        meta = pod["metadata"]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                **meta,
                "uid": "u",
                "resourceVersion": "9",
                "managedFields": [{"manager": "kubelet"}],
            },
            "spec": {
                **pod["spec"],
                "initContainers": [{"name": "init", "image": "busybox"}],
                "volumes": [{"name": "v", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}],
                **more,
            },
            "status": {**pod["status"], "podIP": "10.0.0.9", "conditions": [{"type": "Ready"}]},
        }

    pods = [
        whole(plugin_pod("node-a")),
        whole(plugin_pod("node-b")),
        whole(plugin_pod("node-a", phase="Succeeded")),
        whole(plugin_pod("node-a", image="cuda:12")),
        whole(
            plugin_pod(
                "node-a", image="example/x", labels={"app.kubernetes.io/name": "gpusplit-device-plugin"}
            )
        ),
    ]
    watched, reads = recorded(pods)
    report = preflight(GOOD_CLUSTER, hosts(), watched)
    assert not report["ok"] and "kube-system/dp-x" in report["errors"][0]
    assert uncovered(reads, POD_FIELDS) == []
    kept = [project(p, field_paths(POD_FIELDS)) for p in pods]
    assert preflight(GOOD_CLUSTER, hosts(), kept) == report
    assert "volumes" not in kept[0]["spec"] and "podIP" not in kept[0]["status"]


def test_preflight_on_136_refuses_a_served_rule_api_while_a_component_runs_without_the_gate():
    # the runtime-config alone serves v1beta2 DeviceTaintRules; kube-scheduler without DRADeviceTaintRules
    # would not keep claims off the tainted devices (k8s.io/kubernetes v1.36.3 kube_features.go: the gate is
    # read by kube-scheduler and kube-controller-manager)
    served = {
        "git_version": "v1.36.3",
        "apis": {"resource.k8s.io/v1": RESOURCE_V1, "resource.k8s.io/v1beta2": {"DeviceTaintRule": {}}},
    }
    half = {
        **served,
        "gates": {
            "kube-scheduler": {"DRADeviceTaintRules": False},
            "kube-controller-manager": {"DRADeviceTaintRules": True},
        },
    }
    report = preflight(half, hosts(), [])
    assert not report["ok"]
    (error,) = report["errors"]
    assert "serves the API, but DRADeviceTaintRules on kube-scheduler is off" in error
    assert "{DRADeviceTaintRules: true}" in error and error.endswith("Nothing was changed.")
    on = {**served, "gates": {"kube-scheduler": {"DRADeviceTaintRules": True}}}
    assert preflight(on, hosts(), [])["ok"]
    # 1.37: GA, no gate to check
    v137 = {
        "git_version": "v1.37.2",
        "apis": {"resource.k8s.io/v1": {**RESOURCE_V1, "DeviceTaintRule": {}}},
        "gates": {"kube-scheduler": {"DRADeviceTaintRules": False}},
    }
    assert preflight(v137, hosts(), [])["ok"]
