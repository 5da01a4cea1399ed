"""The fleet_verify action reads the planned hosts' GPU facts from their variables where the task gives none (the
role gpu_verify has no task of its own to gather them); facts the task gives are sent as given."""

from __future__ import annotations

import pytest
from ansible.plugins.action import ActionBase

from ansible_collections.gpusplit.k8s.plugins.action.fleet_verify import ActionModule, planned_host_facts
from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError
from ansible_collections.gpusplit.k8s.tests.unit.plugins.action.test_fleet_verify_digest import PLAN, Task

GPU = {"uuid": "GPU-1", "name": "NVIDIA H100", "processes": [{"pid": 7}], "memory_total_mib": 81559}
HOSTVARS = {
    "gpu1": {"ansible_facts": {"nvidia_gpus": [GPU]}},
    "gpu2": {"ansible_facts": {}},  # discovered nothing in this run: no facts
    "cp1": {"ansible_facts": {"nvidia_gpus": [{"uuid": "GPU-9"}]}},  # not planned
}


def two_host_plan():
    nodes = {"gpu1": PLAN["nodes"]["gpu1"], "gpu2": {**PLAN["nodes"]["gpu1"], "host": "gpu2", "node": "gpu2"}}
    return {**PLAN, "nodes": nodes}


def run_action(monkeypatch, args, hostvars):
    sent = []

    def execute_module(self, module_args=None, task_vars=None):
        sent.append(module_args)
        return {"report": {"nodes": []}}

    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    monkeypatch.setattr(ActionModule, "_execute_module", execute_module)
    action = ActionModule.__new__(ActionModule)
    action._task = Task(args)
    return action.run(task_vars={"hostvars": hostvars}), sent


def test_planned_host_facts_are_those_of_the_planned_hosts_that_have_them():
    assert planned_host_facts(two_host_plan(), HOSTVARS) == {"gpu1": [GPU]}
    assert planned_host_facts({"nodes": {}}, HOSTVARS) == {}
    # a plan of another shape: the module's own refusal names what is wrong
    assert planned_host_facts({"n1": {}}, HOSTVARS) is None and planned_host_facts(None, HOSTVARS) is None
    with pytest.raises(GpusplitError, match="host 'gone' is not in the inventory"):
        planned_host_facts({"nodes": {"gone": {}}}, HOSTVARS)


def test_facts_left_out_are_read_from_the_planned_hosts_and_cut(monkeypatch):
    result, (sent,) = run_action(monkeypatch, {"plan": two_host_plan()}, HOSTVARS)
    assert not result.get("failed"), result
    # only what the comparison reads of each GPU, and only the planned hosts that have facts
    assert sent["facts"] == {"gpu1": [{"uuid": "GPU-1", "processes": [{"pid": 7}]}]}


def test_facts_the_task_gives_are_sent_as_given(monkeypatch):
    _result, (sent,) = run_action(monkeypatch, {"plan": two_host_plan(), "facts": {}}, HOSTVARS)
    assert sent["facts"] == {}
    _result, (sent,) = run_action(monkeypatch, {"plan": two_host_plan(), "facts": {"gpu2": [GPU]}}, HOSTVARS)
    assert sent["facts"] == {"gpu2": [{"uuid": "GPU-1", "processes": [{"pid": 7}]}]}


def test_a_planned_host_the_inventory_lacks_is_refused_before_the_module_runs(monkeypatch):
    plan = {**PLAN, "nodes": {**PLAN["nodes"], "gone": PLAN["nodes"]["gpu1"]}}
    result, sent = run_action(monkeypatch, {"plan": plan}, HOSTVARS)
    assert sent == [] and result["failed"] and not result["changed"]
    assert result["msg"] == "host 'gone' is not in the inventory (hostvars has no such host)"
    assert result["errors"] == [result["msg"]]


def test_a_plan_of_another_shape_goes_to_the_module_without_facts(monkeypatch):
    _result, (sent,) = run_action(monkeypatch, {"plan": {"n1": {}}}, HOSTVARS)
    assert sent == {"plan": {"n1": {}}}
