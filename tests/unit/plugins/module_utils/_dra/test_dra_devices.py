"""The DeviceClass and the lab's published devices (plugins/module_utils/_dra/devices.py). The rendered
ResourceSlice: tests/unit/plugins/plugin_utils/test_dra_render.py."""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._dra.devices import (
    dra_pci_bus_id,
    lab_mig_device_name,
)


def test_pci_bus_id_is_the_extended_bdf():
    assert dra_pci_bus_id("00000000:1B:00.0") == "0000:1b:00.0"
    assert dra_pci_bus_id("1b:00.0") == "0000:1b:00.0"
    assert dra_pci_bus_id("nope") is None


def test_lab_mig_device_names_follow_the_drivers_scheme():
    assert lab_mig_device_name(1, "1g.10gb", 19, 6) == "gpu-1-mig-1g10gb-19-6"
    assert lab_mig_device_name(0, "1g.10gb+me", 20, 0) == "gpu-0-mig-1g10gb-me-20-0"
