# Copyright: gpusplit contributors
# Apache-2.0
"""How gpusplit spells a GPU's identifiers (PCI bus id, UUID). Private to the collection.

One spelling everywhere: the GPU facts, the planner, the renderers and verify compare these
strings, so they all normalise through this module.
"""

from __future__ import annotations

import functools
import re

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError

_PCI_RE = re.compile(
    r"^(?:(?P<domain>[0-9a-f]{1,8}):)?(?P<bus>[0-9a-f]{1,2}):(?P<dev>[0-9a-f]{1,2})\.(?P<fn>[0-7])$"
)


def to_text(value):
    """NVML strings come back as str from nvidia-ml-py's wrappers but as bytes from its structures."""
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return str(value).rstrip("\x00").strip()


def _pci_parts(value):
    text = to_text(value)
    return None if text is None else _pci_parts_of_text(text)


# A fleet's GPUs share a handful of bus ids (the same boards in every server): the planner reads each
# of them thousands of times at fleet scale (tests/bench/test_bench_plan.py), so the parse is cached.
@functools.lru_cache(maxsize=4096)
def _pci_parts_of_text(text):
    match = _PCI_RE.match(text.lower())
    if match is None:
        return None
    return (int(match.group("domain") or "0", 16),) + tuple(
        int(match.group(k), 16) for k in ("bus", "dev", "fn")
    )


@functools.lru_cache(maxsize=4096)
def _canonical_pci(parts):
    return "{:08X}:{:02X}:{:02X}.{:X}".format(*parts)


def normalize_pci_bus_id(value):
    """The NVML spelling ``DDDDDDDD:BB:DD.F`` (upper-case hex), or None when ``value`` is no bus id.

    Accepts 8- or 4-digit domains (sysfs writes ``0000:17:00.0``), no domain (``17:00.0``), bytes,
    any case and surrounding blanks.
    """
    parts = _pci_parts(value)
    if parts is None:
        return None
    return _canonical_pci(parts)


def require_pci_bus_id(value):
    """:func:`normalize_pci_bus_id`, refusing (GpusplitError) anything that is not a PCI address."""
    canonical = normalize_pci_bus_id(value)
    if canonical is None:
        raise GpusplitError(f"not a PCI bus id: {value!r}")
    return canonical


def sysfs_pci_address_or_none(bus_id):
    """'00000000:17:00.0' -> '0000:17:00.0', or None when ``bus_id`` is no bus id.

    The name of the device under /sys/bus/pci/devices, and the extended BDF form that the DRA
    driver publishes as resource.kubernetes.io/pciBusID.
    """
    parts = _pci_parts(bus_id)
    if parts is None:
        return None
    return "{:04x}:{:02x}:{:02x}.{:x}".format(*parts)


def sysfs_pci_address(bus_id):
    """:func:`sysfs_pci_address_or_none`, refusing (GpusplitError) anything that is not a PCI address."""
    address = sysfs_pci_address_or_none(bus_id)
    if address is None:
        raise GpusplitError(f"not a PCI bus id: {bus_id!r}")
    return address


def pci_sort_key(canonical):
    """Numeric order of a normalised bus id."""
    return _pci_parts(canonical)


def normalize_uuid(value):
    """A GPU/MIG UUID as ``GPU-<lower hex>`` / ``MIG-<lower>``; None if not a string."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    lower = text.lower()
    if lower.startswith("gpu-"):
        return "GPU-" + lower[4:]
    if lower.startswith("mig-"):
        rest = lower[4:]
        if rest.startswith("gpu-"):  # legacy MIG-GPU-<uuid>/<gi>/<ci>
            rest = "GPU-" + rest[4:]
        return "MIG-" + rest
    return text
