"""A stand-in for what the NVIDIA DRA driver puts into the lab cluster: its DeviceClass and ResourceSlices.

LAB HARNESS ONLY: the lab has no GPUs and no kubelet, so no DRA driver runs; tests/integration/dra_harness.py
publishes these in its place. ``device_class_context`` is the DeviceClass the chart installs as
gpu.nvidia.com; ``slice_devices`` and ``resource_slice_context`` are what the driver's kubelet plugin
would publish for a node's GPU facts. gpusplit never applies these to a real cluster, so none of this
is part of the collection. Rendered from templates/deviceclass.yaml.j2 and templates/resourceslice.yaml.j2
with the collection's renderer (``render_device_class``, ``render_resource_slice``).
"""

from __future__ import annotations

import re

from ansible_collections.gpusplit.k8s.plugins.module_utils._dra.names import (
    DEVICE_CLASS,
    DRIVER,
    DraError,
    device_name,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.ids import sysfs_pci_address_or_none
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.versions import format_version, parse_version
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.split_render import render_template

DEVICE_CLASS_TEMPLATE = "deviceclass.yaml.j2"
RESOURCE_SLICE_TEMPLATE = "resourceslice.yaml.j2"
# the selector of the chart's DeviceClass gpu.nvidia.com (whole GPUs, not MIG devices)
DEVICE_CLASS_SELECTOR = (
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
)


def device_class_context(
    name=DEVICE_CLASS, expression=DEVICE_CLASS_SELECTOR, extended_resource_name=None, labels=None
):
    """The DeviceClass of whole NVIDIA GPUs, as the chart installs it (templates/deviceclass.yaml.j2)."""
    return {
        "name": name,
        "expression": expression,
        "extended_resource_name": extended_resource_name or "",
        "labels": dict(labels or {}),
    }


def semver(text):
    """``570.172.08`` -> ``570.172.8``: a version attribute must be strict semver (no leading zeros)."""
    version = parse_version(text, inside=True) if text else None
    return format_version(version) if version else None


# GPU instance profile ids and memory-slice sizes of an A100 80GB, as
# `nvidia-smi mig -lgip` lists them (NVIDIA MIG user guide, "A100 MIG profiles"); the harness
# needs them to name MIG devices the way the driver does. gpusplit itself never predicts MIG
# device names: it reads them from the published ResourceSlices (parentUUID attribute).
_LAB_MIG_PROFILES = {
    "1g.10gb": (19, 1),
    "1g.10gb+me": (20, 1),
    "1g.20gb": (15, 2),
    "2g.20gb": (14, 2),
    "3g.40gb": (9, 4),
    "4g.40gb": (5, 4),
    "7g.80gb": (0, 8),
}
_LAB_MIG_PROFILE_FALLBACK = (99, 1)


def lab_mig_device_name(parent_minor, profile, profile_id, placement_start):
    """The DRA driver's MIG device name: ``gpu-<parent minor>-mig-<profile without dots>-<profile id>-<start>``.

    (kubernetes-sigs/dra-driver-nvidia-gpu, cmd/gpu-kubelet-plugin/mig.go, ToCanonicalName.)
    """
    pname = re.sub(r"[^a-z0-9-]", "-", str(profile).replace(".", "").lower()).strip("-")
    return f"gpu-{int(parent_minor)}-mig-{pname}-{int(profile_id)}-{int(placement_start)}"


def _published_device(name, kind, uuid, gpu, memory, driver_version, **extra):
    """One device as the harness publishes it: the parent GPU's product name and bus id."""
    return {
        "name": name,
        "type": kind,
        "uuid": uuid,
        "product_name": gpu.get("name") or "",
        "pci_bus_id": sysfs_pci_address_or_none(gpu.get("pci_bus_id")),
        "memory": f"{int(memory)}Mi" if isinstance(memory, int) and not isinstance(memory, bool) else "",
        "driver_version": driver_version or "",
        **extra,
    }


def _lab_mig_devices(gpu, driver_version):
    devices, start = [], 0
    for mig in sorted(gpu.get("mig_devices") or [], key=lambda m: m.get("gpu_instance_id") or 0):
        profile_id, size = _LAB_MIG_PROFILES.get(str(mig.get("profile")), _LAB_MIG_PROFILE_FALLBACK)
        name = lab_mig_device_name(gpu["minor_number"], mig.get("profile") or "mig", profile_id, start)
        devices.append(
            _published_device(
                name,
                "mig",
                mig.get("uuid") or "",
                gpu,
                mig.get("memory_total_mib"),
                driver_version,
                parent_uuid=gpu["uuid"],
                profile=str(mig.get("profile") or ""),
            )
        )
        start += size
    return devices


def slice_devices(gpus, driver_version=None):
    """The devices the driver would publish for these GPU facts.

    Lost GPUs are not published; a MIG-enabled GPU is published as its MIG devices (type ``mig``,
    with ``parentUUID``, ``profile`` and the MIG ``uuid``), not as ``gpu-<minor>``.
    """
    devices = []
    driver_version = semver(driver_version)
    for gpu in gpus or []:
        if gpu.get("lost") or (gpu.get("health") or {}).get("status") == "lost":
            continue
        if gpu.get("minor_number") is None:
            continue
        if str((gpu.get("mig_mode") or {}).get("current") or "").lower() == "enabled":
            devices.extend(_lab_mig_devices(gpu, driver_version))
            continue
        name = device_name(gpu["minor_number"])
        devices.append(
            _published_device(name, "gpu", gpu["uuid"], gpu, gpu.get("memory_total_mib"), driver_version)
        )
    return sorted(devices, key=lambda d: (int(d["name"].split("-")[1]), d["name"]))


def resource_slice_context(node, gpus, generation=1, driver_version=None, labels=None):
    """The ResourceSlice the driver would publish for ``node`` (templates/resourceslice.yaml.j2)."""
    name = f"{node}-{DRIVER}"
    if len(name) > 253:
        raise DraError(f"ResourceSlice name {name!r} is longer than 253 characters")
    return {
        "name": name,
        "node": str(node),
        "driver": DRIVER,
        "generation": int(generation),
        "devices": slice_devices(gpus, driver_version),
        "labels": dict(labels or {}),
    }


def render_device_class(*args, **kwargs):
    """The DeviceClass of whole NVIDIA GPUs, as the chart installs it.

    The arguments of device_class_context (name, expression, extended_resource_name, labels).
    """
    return render_template(DEVICE_CLASS_TEMPLATE, **device_class_context(*args, **kwargs))


def render_resource_slice(*args, **kwargs):
    """The ResourceSlice the driver would publish for ``node``.

    The arguments of resource_slice_context (node, gpus, generation, driver_version, labels).
    """
    return render_template(RESOURCE_SLICE_TEMPLATE, **resource_slice_context(*args, **kwargs))
