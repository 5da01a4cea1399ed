# Copyright: gpusplit contributors
# Apache-2.0
"""Action plugin gpusplit.k8s.role_step: one step of the collection's roles, computed on the controller.

What the roles work out from the plan, the inventory and what they read of the cluster is plain Python in
plugins/plugin_utils/role_steps.py (private to the collection); this runs one of its steps in the
controller's worker, with no module execution, and returns what it computed as the task's result (the
role registers it). A step that waits on the cluster runs ``kubernetes.core.k8s_info`` through
ansible-core's module execution. Documented in plugins/modules/role_step.py.
"""

from __future__ import annotations

import time

from ansible.plugins.action import ActionBase

from ansible_collections.gpusplit.k8s.plugins.plugin_utils import role_steps

ARGUMENT_SPEC = {
    "step": {"type": "str", "required": True, "choices": sorted(role_steps.STEPS)},
    "inputs": {"type": "dict", "default": {}},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        # a missing option or one of the wrong type fails the task here, as a module's own spec would
        args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]

        def run_module(name, module_args):
            return self._execute_module(module_name=name, module_args=module_args, task_vars=task_vars)

        context = role_steps.StepContext(
            hostvars=task_vars.get("hostvars"),
            groups=task_vars.get("groups"),
            run_module=run_module,
            sleep=time.sleep,
            check_mode=bool(self._play_context.check_mode),
        )
        result.update(role_steps.run_step(args["step"], args["inputs"] or {}, context))
        result.setdefault("changed", False)
        return result
