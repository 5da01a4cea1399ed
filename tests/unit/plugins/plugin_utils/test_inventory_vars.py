"""What the roles read of the inventory (plugins/plugin_utils/inventory_vars.py): the fleet's GPU reports from the
discovery's registered results (role gpu_discovery keeps them in one step for the fleet, not in a task per host)."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import inventory_vars as fleet
from ansible_collections.gpusplit.k8s.tests.unit.gpufacts import h100


def result(backend="nvml", gpus=1, importable=True, msg=None):
    return {
        "changed": False,
        "msg": msg or f"{gpus} GPU(s) via {backend}",
        "nvml_binding": {"importable": importable, "python": "/usr/bin/python3"},
        "ansible_facts": {
            "nvidia_gpu_backend": backend,
            "nvidia_driver_version": "580.95.05",
            "nvidia_cuda_driver_version": "13.0",
            "nvidia_gpus": [h100(i) for i in range(gpus)],
        },
    }


def test_each_host_gets_its_own_report():
    hostvars = {"a": {"gpu_discovery_result": result(gpus=2)}, "b": {"gpu_discovery_result": result(gpus=1)}}
    reports = fleet.discovery_reports(hostvars, ["a", "b"])
    assert reports["a"] == {
        "backend": "nvml",
        "driver_version": "580.95.05",
        "cuda_version": "13.0",
        "msg": "2 GPU(s) via nvml",
        "nvml_binding": {"importable": True, "python": "/usr/bin/python3"},
        "gpus": [h100(0), h100(1)],
    }
    assert [g["uuid"] for g in reports["b"]["gpus"]] == [h100(0)["uuid"]]


@pytest.mark.parametrize(
    "host_vars",
    [
        {},  # never reached (unreachable, or not in this play)
        {"gpu_discovery_result": {"failed": True, "msg": "nvidia-smi did not finish within 3 s"}},
        {"gpu_discovery_result": {"skipped": True}},
        {"gpu_discovery_result": {"unreachable": True, "msg": "Failed to connect to the host via ssh"}},
    ],
)
def test_a_host_whose_discovery_did_not_finish_says_so(host_vars):
    reports = fleet.discovery_reports({"a": host_vars}, ["a"])
    assert reports["a"] == {
        "backend": None,
        "driver_version": None,
        "cuda_version": None,
        "msg": "GPU discovery did not finish on this host",
        "gpus": [],
    }


def test_a_host_read_again_after_the_binding_s_install_reports_the_last_reading():
    """Where binding.yml installed the binding, its second reading registered the same variable: the report is
    that reading's (any other registered variable is not read)."""
    again = result("nvml", gpus=1)
    first = result("nvidia-smi", gpus=3, importable=False)
    host = {"gpu_discovery_result": again, "gpu_discovery_result_first": first}
    report = fleet.discovery_reports({"a": host}, ["a"])["a"]
    assert report["backend"] == "nvml" and len(report["gpus"]) == 1
    assert report["nvml_binding"]["importable"] is True


def test_given_the_roles_reports_every_other_host_did_not_finish_and_no_variables_are_read():
    """discover.yml hands over the role's reports: a host missing there failed (a failed install, a bad
    value of its own) or was never reached, whatever its registered result says."""

    class NoReads(dict):
        def __getitem__(self, host):
            raise AssertionError(f"hostvars[{host!r}] read")

    hostvars = NoReads(a={}, b={"gpu_discovery_result": result(gpus=2)})
    reports = fleet.discovery_reports(hostvars, ["a", "b"], {"a": {"msg": "kept"}})
    assert reports == {"a": {"msg": "kept"}, "b": fleet.UNFINISHED}
    assert fleet.discovery_reports(hostvars, ["a"], {}) == {"a": fleet.UNFINISHED}


def test_a_host_outside_the_inventory_is_refused_by_name():
    with pytest.raises(GpusplitError, match="'ghost' is not in the inventory"):
        fleet.discovery_reports({}, ["ghost"])
