"""The split device plugin's config file: the plugin's own schema, one ConfigMap per shared node, mounted by its DaemonSet."""

from __future__ import annotations

import os
import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_fleet
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import sharing_render
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render

K8S = "1.37"
REFERENCE_DIR = Path(
    os.environ.get("GPUSPLIT_REFERENCE_DIR") or Path(__file__).resolve().parents[5] / "shared" / "reference"
)
CHART_DS = REFERENCE_DIR / "charts" / "nvidia-device-plugin" / "templates" / "daemonset-device-plugin.yml"

# What the device plugin v0.20.0 accepts in its config file (api/config/v1: config.go Config, sharing.go
# Sharing, replicas.go ReplicatedResources / ReplicatedResource and their UnmarshalJSON)
CONFIG_KEYS = {"version", "flags", "resources", "sharing", "imex"}
SHARING_KEYS = {"timeSlicing", "mps"}
REPLICATED_KEYS = {"renameByDefault", "failRequestsGreaterThanOne", "resources"}
RESOURCE_KEYS = {"name", "rename", "devices", "replicas"}


def gpu(i):
    return {
        "uuid": f"GPU-0000000{i}-0000-4000-8000-00000000000{i}",
        "index": i,
        "minor_number": i,
        "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0",
        "name": "NVIDIA H100 80GB HBM3",
        "memory_total_mib": 81559,
        "mig_mode": {"current": "disabled", "pending": None},
        "mig_devices": [],
        "health": {"status": "ok", "reasons": []},
        "processes": [],
    }


FOUR = [gpu(i) for i in range(4)]


def fleet(**sharing):
    hosts = {
        "shared": {
            "facts": FOUR,
            "mode": "device_plugin",
            "split": {"host_count": 2},
            "sharing": sharing or None,
        },
        "plain": {"facts": FOUR, "mode": "device_plugin", "split": {"host_count": 2}},
    }
    return plan_fleet(hosts)


def check_plugin_schema(config):
    """The rules of the plugin's own parser (api/config/v1), so a file it would refuse fails here."""
    assert set(config) <= CONFIG_KEYS
    assert config["version"] == "v1"
    assert set(config["sharing"]) <= SHARING_KEYS
    for replicated in config["sharing"].values():
        assert set(replicated) <= REPLICATED_KEYS
        assert isinstance(replicated["renameByDefault"], bool)
        assert isinstance(replicated["failRequestsGreaterThanOne"], bool)
        assert replicated["resources"], "no resources specified"
        for resource in replicated["resources"]:
            assert set(resource) <= RESOURCE_KEYS
            assert re.match(r"^nvidia\.com/[a-z0-9.-]+$", resource["name"])
            assert isinstance(resource["replicas"], int) and resource["replicas"] >= 2


def test_a_shared_node_gets_its_config_map_before_its_daemonset():
    plan = fleet(time_slicing={"replicas": 4, "rename": True, "fail_requests_greater_than_one": True})
    objects = render.render_fleet(plan)
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("ConfigMap", "gpusplit-dp-shared"),
        ("DaemonSet", "gpusplit-dp-plain"),
        ("DaemonSet", "gpusplit-dp-shared"),
    ]
    cm = objects[0]
    for obj in objects:
        assert kubernetes_validate.validate(obj, K8S, strict=True) == K8S
    assert cm["metadata"]["namespace"] == "kube-system"
    assert cm["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "gpusplit",
        "app.kubernetes.io/name": "gpusplit-device-plugin",
        "gpusplit.io/node": "shared",
    }
    config = yaml.safe_load(cm["data"]["config.yaml"])
    check_plugin_schema(config)
    assert config == {
        "version": "v1",
        "sharing": {
            "timeSlicing": {
                "renameByDefault": True,
                "failRequestsGreaterThanOne": True,
                "resources": [{"name": "nvidia.com/gpu", "replicas": 4}],
            }
        },
    }


def test_no_uuid_of_either_share_is_in_the_config():
    plan = fleet(time_slicing={"replicas": 4})
    [cm] = render.render_config_maps(plan)
    text = yaml.safe_dump(cm)
    node = plan["nodes"]["shared"]
    assert not any(u in text for u in node["host_uuids"] + node["kubernetes_uuids"])


def test_the_daemonset_mounts_the_config_and_rolls_when_it_changes():
    plan = fleet(time_slicing={"replicas": 4})
    ds = render.render_split_daemonset(plan["nodes"]["shared"])
    spec = ds["spec"]["template"]["spec"]
    [container] = spec["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["CONFIG_FILE"] == "/config/config.yaml"
    assert {"name": "plugin-config", "mountPath": "/config", "readOnly": True} in container["volumeMounts"]
    assert {"name": "plugin-config", "configMap": {"name": "gpusplit-dp-shared"}} in spec["volumes"]
    assert ds["metadata"]["annotations"]["gpusplit.io/sharing"] == "time-slicing x4"
    digest = ds["spec"]["template"]["metadata"]["annotations"]["gpusplit.io/plugin-config-sha256"]
    assert re.match(r"^[0-9a-f]{64}$", digest)
    other = render.render_split_daemonset(fleet(time_slicing={"replicas": 2})["nodes"]["shared"])
    assert other["spec"]["template"]["metadata"]["annotations"]["gpusplit.io/plugin-config-sha256"] != digest
    assert env["NVIDIA_VISIBLE_DEVICES"] == ",".join(plan["nodes"]["shared"]["kubernetes_uuids"])


def test_a_node_without_sharing_mounts_nothing():
    plan = fleet()
    assert render.render_config_maps(plan) == []
    ds = render.render_split_daemonset(plan["nodes"]["plain"])
    container = ds["spec"]["template"]["spec"]["containers"][0]
    assert "CONFIG_FILE" not in {e["name"] for e in container["env"]}
    assert [v["name"] for v in ds["spec"]["template"]["spec"]["volumes"]] == ["kubelet-device-plugins-dir"]
    assert "gpusplit.io/plugin-config-sha256" not in ds["spec"]["template"]["metadata"]["annotations"]
    assert "gpusplit.io/sharing" not in ds["metadata"]["annotations"]
    assert "gpusplit.io/sharing" not in ds["spec"]["template"]["metadata"]["annotations"]
    assert sharing_render.plugin_config(plan["nodes"]["plain"]) is None


def test_the_mount_is_where_the_plugins_chart_puts_its_config():
    """The real chart (nvidia-device-plugin 0.20.0) points CONFIG_FILE at /config/config.yaml in /config."""
    if not CHART_DS.is_file():
        pytest.skip(f"reference chart not found ({CHART_DS}); set GPUSPLIT_REFERENCE_DIR")
    text = CHART_DS.read_text()
    assert re.search(r"- name: CONFIG_FILE\s+value: " + re.escape(sharing_render.CONFIG_FILE) + r"\s", text)
    assert f"mountPath: {sharing_render.CONFIG_DIR}\n" in text


def test_a_shared_node_is_labelled_for_diagnose():
    plan = fleet(time_slicing={"replicas": 4, "fail_requests_greater_than_one": True})
    labels = render.node_labels(plan["nodes"]["shared"])
    assert labels["gpusplit.io/time-slicing-replicas"] == "4"
    assert labels["gpusplit.io/time-slicing-fail-requests-greater-than-one"] == "true"
    assert not any(
        k.startswith("gpusplit.io/time-slicing") for k in render.node_labels(plan["nodes"]["plain"])
    )
