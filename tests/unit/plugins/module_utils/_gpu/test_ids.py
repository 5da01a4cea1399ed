"""plugins/module_utils/_gpu/ids.py: the one spelling of PCI bus ids."""

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import ids


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("00000000:17:00.0", "00000000:17:00.0"),
        ("0000:17:00.0", "00000000:17:00.0"),
        (b"0000:9a:00.0", "00000000:9A:00.0"),
        (b"00000000:DB:00.0\x00\x00", "00000000:DB:00.0"),
        ("  0:3b:0.1 ", "00000000:3B:00.1"),
        ("10000:01:00.0", "00010000:01:00.0"),
    ],
)
def test_normalize_pci_bus_id(raw, expected):
    assert ids.require_pci_bus_id(raw) == expected


@pytest.mark.parametrize("raw", ["", "GPU-1234", "0000:17:00", "0000:17:00.8", "[N/A]", None])
def test_normalize_pci_bus_id_rejects_garbage(raw):
    with pytest.raises(ValueError):
        ids.require_pci_bus_id(raw)


def test_sysfs_pci_address():
    assert ids.sysfs_pci_address("00000000:9A:00.0") == "0000:9a:00.0"


def test_pci_bus_id_is_the_extended_bdf():
    # the spelling of resource.kubernetes.io/pciBusID that the DRA driver publishes
    assert ids.sysfs_pci_address_or_none("00000000:1B:00.0") == "0000:1b:00.0"
    assert ids.sysfs_pci_address_or_none("1b:00.0") == "0000:1b:00.0"
    assert ids.sysfs_pci_address_or_none("nope") is None
    with pytest.raises(ValueError, match="not a PCI bus id"):
        ids.sysfs_pci_address("nope")
