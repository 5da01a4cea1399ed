"""role_step as Ansible runs it: its action plugin in a real ansible-playbook run (on the controller, whatever the
task's host: no connection; a refusal with every message under its title), and the module's main(), which only
refuses (the steps are controller code)."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpusplit.k8s.plugins.modules import role_step
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import role_steps
from ansible_collections.gpusplit.k8s.tests.unit.plugins.modules.test_out_files import playbook
from ansible_collections.gpusplit.k8s.tests.unit.plugins.plugin_utils.test_split_render import fleet


def test_the_documented_steps_are_the_steps():
    assert list(role_step.STEPS) == sorted(role_steps.STEPS)
    doc = role_step.DOCUMENTATION
    assert all(f"      - {name}\n" in doc for name in role_steps.STEPS)


def test_the_module_refuses_to_run_on_a_host():
    out = io.StringIO()
    with patch_module_args({"step": "split_cluster"}), contextlib.redirect_stdout(out):
        with pytest.raises(SystemExit):
            role_step.main()
    result = json.loads(out.getvalue())
    assert result["failed"] and "runs on the controller through its action plugin" in result["msg"]


def test_the_action_computes_on_the_controller_and_refuses_by_title(tmp_path):
    step = {"step": "split_cluster", "inputs": {"plan": fleet(), "live": {}}}
    tasks = [
        {"gpusplit.k8s.role_step": step, "ignore_errors": True},
        {
            "gpusplit.k8s.role_step": {**step, "inputs": {**step["inputs"], "prune_scope": "slices"}},
            "ignore_errors": True,
        },
        {"gpusplit.k8s.role_step": {"step": "no_such_step"}, "ignore_errors": True},
    ]
    (done, refused, unknown), _proc = playbook(tmp_path, tasks)
    assert not done.get("failed") and not done["changed"], done
    assert done["split_nodes"] == [p["node"] for p in fleet()["nodes"].values() if p["split"]]
    assert done["inventory_nodes"] == ["far"]
    assert refused["failed"] and refused["msg"].startswith("gpusplit render refused:\n- gpusplit_prune_scope")
    assert unknown["failed"] and "no_such_step" in unknown["msg"]
