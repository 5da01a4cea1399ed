"""fleet_verify refuses a bad plan through fail_on_refusal, before it reads the cluster."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ansible_collections.gpusplit.k8s.plugins.modules import fleet_verify
from ansible_collections.gpusplit.k8s.tests.unit.module_run import run_module_file

ROOT = Path(__file__).resolve().parents[4]


def run_module(args, tmp_path):
    """The module's result, run the way Ansible runs it (its own process, arguments from a file)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.environ["ANSIBLE_COLLECTIONS_PATH"],
        "KUBECONFIG": str(tmp_path / "none"),
    }
    return run_module_file(fleet_verify.__file__, args, tmp_path, env, timeout=60)[1]


def node_plan(host, mode, **fields):
    """The fields verify reads from a node plan of the gpu_plan role."""
    return {"host": host, "node": host, "mode": mode, "host_uuids": [], "kubernetes_uuids": [], **fields}


@pytest.mark.parametrize(
    ("plan", "facts", "errors"),
    [
        ({"n1": {}}, {}, ["plan: expected a fleet plan with a 'nodes' mapping (from the gpu_plan role)"]),
        (
            {"nodes": {"n1": node_plan("n1", "gone"), "n2": node_plan("n2", "dra")}},
            {},
            ["n1: node plan: mode 'gone' is not one of device_plugin, gpu_operator, dra, none"],
        ),
        (
            {"nodes": {"n1": {"mode": "dra", "host": "n1", "kubernetes_uuids": []}}},
            {},
            [
                "plan.nodes.n1.node: missing; expected the Kubernetes node name (a string) "
                "(is this a node plan of the gpu_plan role?)",
                "plan.nodes.n1.host_uuids: missing; expected a list of GPU UUIDs "
                "(is this a node plan of the gpu_plan role?)",
            ],
        ),
        (
            {
                "nodes": {
                    "n1": node_plan(
                        "n1",
                        "device_plugin",
                        node=5,
                        resources={"nvidia.com/gpu": "two"},
                        gpus=["GPU-1"],
                        excluded=None,
                    )
                }
            },
            {"n1": "GPU-1"},
            [
                "plan.nodes.n1.node: expected the Kubernetes node name (a string), got integer",
                "plan.nodes.n1.resources: expected a mapping of resource name to count, "
                "nvidia.com/gpu is 'two', not a count",
                "plan.nodes.n1.gpus: expected a list of GPUs, each with uuid and share, item 0 is string",
                "plan.nodes.n1.excluded: expected a list of GPUs, each with uuid, got null",
                "facts.n1: expected a list of GPUs (nvidia_gpus), each a mapping, got string",
            ],
        ),
    ],
)
def test_a_bad_plan_is_refused_before_the_cluster_is_read(plan, facts, errors, tmp_path):
    result = run_module({"plan": plan, "facts": facts}, tmp_path)
    assert result["failed"] is True and result["changed"] is False
    assert result["msg"] == "\n".join(errors) and result["errors"] == errors


def test_an_unreachable_cluster_is_a_failed_read(tmp_path):
    result = run_module({"plan": {"nodes": {}}}, tmp_path)
    assert result["failed"] is True
    assert result["msg"].startswith("reading the cluster failed: ")
