"""The cluster modules' options that take a number go through the one number check (_errors.check_number):
a negative, a 10**30 or a count out of range is refused by name, with the range, before the cluster is
reached (Ansible's own int type lets them through)."""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpusplit.k8s.plugins.modules import cluster_apply, device_taint_rule, fleet_verify
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


def run_module(module, args, tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": os.environ["ANSIBLE_COLLECTIONS_PATH"],
        "KUBECONFIG": str(tmp_path / "none"),
    }
    return run_module_file(module.__file__, args, tmp_path, env, timeout=60)[1]


CASES = [
    (cluster_apply, {"objects": []}, "parallel", 0, "parallel: expected a whole number from 1 to 64, got 0"),
    (
        cluster_apply,
        {"objects": []},
        "parallel",
        -4,
        "parallel: expected a whole number from 1 to 64, got -4",
    ),
    (
        cluster_apply,
        {"objects": []},
        "parallel",
        10**30,
        "parallel: expected a whole number from 1 to 64, got an integer of 31 digits",
    ),
    (
        device_taint_rule,
        {"definition": RULE},
        "wait_timeout",
        -1,
        "wait_timeout: expected a whole number of seconds from 0 to 86400, got -1",
    ),
    (
        device_taint_rule,
        {"definition": RULE},
        "wait_timeout",
        10**12,
        "wait_timeout: expected a whole number of seconds from 0 to 86400, got 1000000000000",
    ),
    (
        fleet_verify,
        {"plan": {"nodes": {}}},
        "wait_seconds",
        -30,
        "wait_seconds: expected a whole number of seconds from 0 to 86400, got -30",
    ),
    (
        fleet_verify,
        {"plan": {"nodes": {}}},
        "wait_seconds",
        10**30,
        "wait_seconds: expected a whole number of seconds from 0 to 86400, got an integer of 31 digits",
    ),
]


@pytest.mark.parametrize(
    ("module", "args", "option", "value", "msg"),
    CASES,
    ids=[f"{c[0].__name__.rsplit('.', 1)[-1]}-{c[2]}-{i}" for i, c in enumerate(CASES)],
)
def test_a_number_out_of_range_is_refused_before_the_cluster(module, args, option, value, msg, tmp_path):
    result = run_module(module, {**args, option: value}, tmp_path)
    assert result.get("failed") is True, result
    assert msg in result["msg"], result["msg"]
    assert "reading the cluster failed" not in result["msg"]
    assert "failed: " not in result["msg"].split(msg)[0]


@pytest.mark.parametrize(
    ("module", "args", "option", "value"),
    [
        (cluster_apply, {"objects": []}, "parallel", 1),
        (cluster_apply, {"objects": []}, "parallel", 64),
        (fleet_verify, {"plan": {"nodes": {}}}, "wait_seconds", 0),
        (device_taint_rule, {"definitions": []}, "wait_timeout", 86400),
    ],
)
def test_the_ends_of_the_range_pass_the_check(module, args, option, value, tmp_path):
    result = run_module(module, {**args, option: value}, tmp_path)
    assert option not in (result.get("msg") or ""), result
