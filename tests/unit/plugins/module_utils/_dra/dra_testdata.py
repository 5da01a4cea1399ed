"""Test data shared by the DRA tests (tests/unit/plugins/module_utils/_dra/, tests/unit/plugins/plugin_utils/_dra/
and tests/unit/lab/test_dra_driver.py): GPU facts, plans, the planner input,
and the Kubernetes 1.37 schema check of a rendered object."""

from __future__ import annotations

import json
import os
from pathlib import Path

import kubernetes_validate

from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_fleet

K8S = "1.37"
ROOT = Path(__file__).resolve().parents[5]
FIXTURES = ROOT / "tests" / "fixtures" / "gpus"
REFERENCE_DIR = Path(os.environ.get("GPUSPLIT_REFERENCE_DIR") or ROOT.parent / "shared" / "reference")
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
