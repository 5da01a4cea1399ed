"""The dra_driver role turns on the DRA driver's TimeSlicingSettings feature gate when a node in mode dra time-slices.

The driver refuses a GpuConfig with strategy TimeSlicing without that gate (dra-driver-nvidia-gpu at the pinned version,
api/nvidia.com/resource/v1beta1/validate.go), so the settings the role gives its chart-values step carry it exactly
when the plan has a node with ``dra_sharing`` (docs/dra.md). The role's own vars are templated here by
ansible-playbook, as the role's tasks read them.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from ansible_collections.gpusplit.k8s.tests.unit.playbook_run import run_play

ROOT = Path(__file__).resolve().parents[3]
ROLE_VARS = ("dra_driver_time_slicing", "dra_driver_settings")
SHARED = {
    "strategy": "time-slicing",
    "interval": "Long",
    "device_class": "gpusplit-time-slicing-long",
    "uuids": ["GPU-1"],
}
USER = {"feature_gates": {"NVMLDeviceHealthCheck": True}, "driver_root": "/run/nvidia/driver"}

CASES = {
    "shared": ({"a": {"mode": "dra", "dra_sharing": SHARED}, "b": {"mode": "dra"}}, USER),
    "shared_no_settings": ({"a": {"mode": "dra", "dra_sharing": SHARED}}, {}),
    "user_said_false": (
        {"a": {"mode": "dra", "dra_sharing": SHARED}},
        {"feature_gates": {"TimeSlicingSettings": False}},
    ),
    "unshared": ({"a": {"mode": "dra"}, "b": {"mode": "device_plugin"}}, USER),
    "only_mig": ({"a": {"mode": "dra", "dra_sharing": None}}, USER),
}


def test_the_time_slicing_gate_is_on_exactly_when_a_dra_node_time_slices(tmp_path):
    role_vars = yaml.safe_load((ROOT / "roles" / "dra_driver" / "vars" / "main.yml").read_text())
    tasks = [
        {
            "name": f"Settings of case {case}",
            "ansible.builtin.debug": {"var": "dra_driver_settings"},
            "vars": {
                **{name: role_vars[name] for name in ROLE_VARS},
                "gpusplit_fleet_plan": {"nodes": nodes},
                "gpusplit_dra_driver_settings": settings,
            },
            "register": case,
        }
        for case, (nodes, settings) in CASES.items()
    ]
    results, _, _ = run_play(tmp_path, tasks, options=())
    got = {case: results[case]["dra_driver_settings"] for case in CASES}
    gate = {"TimeSlicingSettings": True}
    assert got["shared"] == {**USER, "feature_gates": {**USER["feature_gates"], **gate}}
    assert got["shared_no_settings"] == {"feature_gates": gate}
    assert got["user_said_false"] == {"feature_gates": gate}  # the inventory's sharing needs it
    assert got["unshared"] == USER
    assert got["only_mig"] == USER
