"""The fleet_verify action puts the digest of the whole plan it verified into the report (plan_digest), the
same digest diagnose.yml computes from out/fleet-plan.json read back."""

from __future__ import annotations

import json

from ansible.plugins.action import ActionBase

from ansible_collections.gpusplit.k8s.plugins.action.fleet_verify import ActionModule
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.output_digest import json_digest

PLAN = {
    "nodes": {
        "gpu1": {
            "host": "gpu1",
            "node": "gpu1",
            "mode": "device_plugin",
            "host_uuids": ["GPU-1"],
            "kubernetes_uuids": ["GPU-2"],
            "gpus": [{"uuid": "GPU-1", "share": "host", "name": "NVIDIA H100", "health": "ok"}],
            "warnings": ["a warning the module is not sent"],
        }
    },
    "summary": {"nodes": 1},
    "warnings": [],
}


class Task:
    def __init__(self, args):
        self.args = args


def run_action(monkeypatch, args, answer):
    sent = {}

    def execute_module(self, module_args=None, task_vars=None):
        sent.update(module_args)
        return answer

    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    monkeypatch.setattr(ActionModule, "_execute_module", execute_module)
    action = ActionModule.__new__(ActionModule)
    action._task = Task(args)
    return action.run(task_vars={}), sent


def test_the_report_names_the_digest_of_the_whole_plan(monkeypatch, tmp_path):
    result, sent = run_action(monkeypatch, {"plan": PLAN, "facts": {}}, {"report": {"nodes": [], "ok": True}})
    assert "warnings" not in sent["plan"]["nodes"]["gpu1"]  # the module gets the cut plan
    assert result["report"]["plan_digest"] == json_digest(PLAN)
    # the plan as gpu_plan writes it (indented, keys in any order) gives the same digest read back
    (tmp_path / "fleet-plan.json").write_text(json.dumps(dict(reversed(list(PLAN.items()))), indent=2))
    assert (
        json_digest(json.loads((tmp_path / "fleet-plan.json").read_text())) == result["report"]["plan_digest"]
    )


def test_a_failed_module_gets_no_digest(monkeypatch):
    result, _sent = run_action(
        monkeypatch, {"plan": PLAN}, {"failed": True, "msg": "reading the cluster failed"}
    )
    assert "report" not in result and result["failed"] is True
