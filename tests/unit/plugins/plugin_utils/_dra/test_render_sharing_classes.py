"""dra_split's DeviceClasses of time-sliced Kubernetes shares: rendered from the fleet plan's nodes in mode dra only."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_fleet
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._dra.render import sharing_device_classes


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


def fleet(**sharing_by_mode):
    hosts = {
        f"gpu-{mode.replace('_', '-')}": {
            "facts": [gpu(i) for i in range(4)],
            "mode": mode,
            "split": {"host_count": 2},
            "sharing": sharing,
        }
        for mode, sharing in sharing_by_mode.items()
    }
    return plan_fleet(hosts)


def test_only_the_time_sliced_dra_nodes_get_a_class():
    plan = fleet(dra={"time_slicing": {"interval": "Short"}}, device_plugin={"time_slicing": {"replicas": 2}})
    [dc] = sharing_device_classes(plan)
    assert dc["metadata"]["name"] == "gpusplit-time-slicing-short"
    assert dc["spec"]["selectors"][0]["cel"]["expression"].endswith(
        "uuid in ['GPU-00000002-0000-4000-8000-000000000002', 'GPU-00000003-0000-4000-8000-000000000003']"
    )
    assert sharing_device_classes(fleet(dra=None)) == []


def test_a_selector_too_long_is_refused():
    plan = fleet(dra={"time_slicing": {}})
    plan["nodes"]["gpu-dra"]["dra_sharing"]["uuids"] = [f"GPU-{i:036d}" for i in range(300)]
    with pytest.raises(GpusplitError, match="more than the 10240"):
        sharing_device_classes(plan)
