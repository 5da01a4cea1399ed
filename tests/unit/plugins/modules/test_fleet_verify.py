"""fleet_verify refuses a bad plan through fail_on_refusal, before it reads the cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.gpusplit.k8s.plugins.modules import fleet_verify

ROOT = Path(__file__).resolve().parents[4]


def run_module(args, tmp_path):
    """The module's result, run the way Ansible runs it (its own process, arguments from a file)."""
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = {
        **os.environ,
        "PYTHONPATH": os.environ["ANSIBLE_COLLECTIONS_PATH"],
        "KUBECONFIG": str(tmp_path / "none"),
    }
    proc = subprocess.run(
        [sys.executable, fleet_verify.__file__, str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    return json.loads(proc.stdout)


@pytest.mark.parametrize(
    ("plan", "msg"),
    [
        ({"n1": {}}, "plan: expected a fleet plan with a 'nodes' mapping (from the gpu_plan role)"),
        (
            {"nodes": {"n1": {"mode": "gone"}, "n2": {"mode": "dra"}}},
            "n1: node plan: mode 'gone' is not one of device_plugin, gpu_operator, dra, none",
        ),
    ],
)
def test_a_bad_plan_is_refused_before_the_cluster_is_read(plan, msg, tmp_path):
    result = run_module({"plan": plan}, tmp_path)
    assert result["failed"] is True and result["changed"] is False
    assert result["msg"] == msg and result["errors"] == [msg]


def test_an_unreachable_cluster_is_a_failed_read(tmp_path):
    result = run_module({"plan": {"nodes": {}}}, tmp_path)
    assert result["failed"] is True
    assert result["msg"].startswith("reading the cluster failed: ")
