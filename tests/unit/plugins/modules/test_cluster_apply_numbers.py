"""cluster_apply: parallel goes through the one number check (_errors.check_number): a negative or a 10**30 (Ansible's own
int type lets them through) is refused by name, with the range, before the cluster is reached."""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpusplit.k8s.plugins.modules import cluster_apply
from ansible_collections.gpusplit.k8s.tests.unit.module_run import run_module_file


def run_module(args, tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": os.environ["ANSIBLE_COLLECTIONS_PATH"],
        "KUBECONFIG": str(tmp_path / "none"),
    }
    return run_module_file(cluster_apply.__file__, args, tmp_path, env, timeout=60)[1]


@pytest.mark.parametrize(("value", "given"), [(0, "0"), (-4, "-4"), (10**30, "an integer of 31 digits")])
def test_a_number_out_of_range_is_refused_before_the_cluster(value, given, tmp_path):
    result = run_module({**{"objects": []}, "parallel": value}, tmp_path)
    assert result.get("failed") is True, result
    assert "parallel: expected a whole number from 1 to 64, got " + given in result["msg"], result["msg"]
    assert "failed: " not in result["msg"]


@pytest.mark.parametrize("value", [1, 64])
def test_the_ends_of_the_range_pass_the_check(value, tmp_path):
    result = run_module({**{"objects": []}, "parallel": value}, tmp_path)
    assert "parallel" not in (result.get("msg") or ""), result
