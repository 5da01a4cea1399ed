"""Filter discovery_reports: the fleet's GPU reports from the discovery's registered results (role
gpu_discovery keeps them in one step for the fleet, not in a task per host)."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.filter import fleet
from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError
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


def installed_vars(asked, first_importable=False, installed=None):
    return {
        "gpusplit_install_nvml_binding": asked,
        "gpu_discovery_result": result("nvidia-smi", gpus=1, importable=first_importable),
        "gpu_discovery_result_installed": installed if installed is not None else result("nvml", gpus=1),
    }


@pytest.mark.parametrize(
    ("host_vars", "backend"),
    [
        # this run installed the binding: the second reading counts
        (installed_vars(True), "nvml"),
        (installed_vars("yes"), "nvml"),
        # the install was not asked for: an earlier run's second reading is not this run's
        (installed_vars(False), "nvidia-smi"),
        # the first reading found the binding: no install in this run
        (installed_vars(True, first_importable=True), "nvidia-smi"),
        # the install ran but pip installed nothing, so the second reading was skipped
        (installed_vars(True, installed={"skipped": True}), "nvidia-smi"),
    ],
)
def test_the_reading_after_an_install_counts_only_when_this_run_installed(host_vars, backend):
    assert fleet.discovery_reports({"a": host_vars}, ["a"])["a"]["backend"] == backend


def test_known_reports_are_taken_as_they_are_and_the_rest_read():
    class Counting(dict):
        reads = []

        def __getitem__(self, host):
            self.reads.append(host)
            return super().__getitem__(host)

    hostvars = Counting(a={"gpu_discovery_result": result(gpus=2)}, b={})
    known = {"a": {"msg": "kept"}}
    reports = fleet.discovery_reports(hostvars, ["a", "b"], known)
    assert reports["a"] == {"msg": "kept"}
    assert reports["b"]["msg"] == "GPU discovery did not finish on this host"
    assert Counting.reads == ["b"]


def test_a_host_outside_the_inventory_is_refused_by_name():
    with pytest.raises(GpusplitError, match="'ghost' is not in the inventory"):
        fleet.discovery_reports({}, ["ghost"])
