"""device_taint_rule: wait_timeout goes through the one number check (_errors.check_number): a negative or a 10**30 (Ansible's own
int type lets them through) is refused by name, with the range, before the cluster is reached."""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpusplit.k8s.plugins.modules import device_taint_rule
from ansible_collections.gpusplit.k8s.tests.unit.module_run import run_module_file

RULE = {
    "apiVersion": "resource.k8s.io/v1alpha3",
    "kind": "DeviceTaintRule",
    "metadata": {"name": "gpusplit-host-share"},
    "spec": {
        "deviceSelector": {"driver": "gpu.nvidia.com"},
        "taint": {"key": "gpusplit.io/host-share", "effect": "NoSchedule"},
    },
}


def run_module(args, tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": os.environ["ANSIBLE_COLLECTIONS_PATH"],
        "KUBECONFIG": str(tmp_path / "none"),
    }
    return run_module_file(device_taint_rule.__file__, args, tmp_path, env, timeout=60)[1]


@pytest.mark.parametrize(("value", "given"), [(-1, "-1"), (10**12, "1000000000000")])
def test_a_number_out_of_range_is_refused_before_the_cluster(value, given, tmp_path):
    result = run_module({**{"definitions": [RULE]}, "wait_timeout": value}, tmp_path)
    assert result.get("failed") is True, result
    assert (
        "wait_timeout: expected a whole number of seconds from 0 to 86400, got " + given in result["msg"]
    ), result["msg"]
    assert "failed: " not in result["msg"]


@pytest.mark.parametrize("value", [0, 86400])
def test_the_ends_of_the_range_pass_the_check(value, tmp_path):
    result = run_module({**{"definitions": [RULE]}, "wait_timeout": value}, tmp_path)
    assert "wait_timeout" not in (result.get("msg") or ""), result
