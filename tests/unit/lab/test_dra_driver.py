"""The lab's stand-in for the NVIDIA DRA driver (lab/dra_driver.py): the DeviceClass the chart installs and the
ResourceSlice the driver's kubelet plugin would publish, validated against the Kubernetes 1.37 schemas."""

from __future__ import annotations

import re

import pytest

from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._dra.dra_testdata import (
    fixture,
    validate,
)
from lab.dra_driver import lab_mig_device_name, render_device_class, render_resource_slice


def test_lab_mig_device_names_follow_the_drivers_scheme():
    assert lab_mig_device_name(1, "1g.10gb", 19, 6) == "gpu-1-mig-1g10gb-19-6"
    assert lab_mig_device_name(0, "1g.10gb+me", 20, 0) == "gpu-0-mig-1g10gb-me-20-0"


def test_device_class_is_the_charts():
    dc = render_device_class()
    validate(dc)
    assert dc["metadata"]["name"] == "gpu.nvidia.com"
    [sel] = dc["spec"]["selectors"]
    assert sel["cel"]["expression"].startswith("device.driver == 'gpu.nvidia.com'")
    assert "type == 'gpu'" in sel["cel"]["expression"]
    ext = render_device_class("x.gpu.nvidia.com", extended_resource_name="nvidia.com/gpu", labels={"a": "b"})
    validate(ext)
    assert ext["spec"]["extendedResourceName"] == "nvidia.com/gpu"


@pytest.mark.parametrize("name", ["dgx-h100", "workstation", "h200", "gpu-lost", "a100-mig", "nogpu"])
def test_resource_slice_publishes_what_the_driver_would(name):
    doc = fixture(name)
    rs = render_resource_slice("lab-node", doc["gpus"], 1, doc.get("driver_version"))
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
