# Copyright: gpusplit contributors
# Apache-2.0
"""Action plugin gpusplit.k8s.fleet_verify: the module, sent only what it reads of the plan and the facts.

The module compares every node with its plan and every host's GPU processes with their share. Its
arguments were the whole fleet plan and every host's whole GPU facts: at fleet size most of the module's
cost was carrying them (templated, serialized into the module's payload, parsed and checked again by the
module). Here, on the controller, they are cut to what the comparison reads (module_utils/_split/verify.py,
``verify_inputs``) before the module runs where the task says. Where the task gives no ``facts``, they are
read here from the planned hosts' variables (:func:`planned_host_facts`), so that a role needs no task of
its own to gather them. The report gets ``plan_digest``, the digest of the whole plan it verified
(plugin_utils/output_digest.py), which ties out/fleet-report.json to out/fleet-plan.json by content. The
module and its documentation: plugins/modules/fleet_verify.py.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, refusal_text
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.verify import verify_inputs
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.inventory_vars import fleet_facts
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.output_digest import json_digest


def planned_host_facts(plan, hostvars):
    """The GPU facts (nvidia_gpus) of every host the plan has a node plan of, from the hosts' variables; a host
    without them has none in the result, a host the inventory does not have is refused by name. None where
    ``plan`` is no fleet plan: the module refuses it then, naming what is wrong."""
    if not isinstance(plan, dict) or not isinstance(plan.get("nodes"), dict):
        return None
    return fleet_facts(hostvars if hostvars is not None else {}, list(plan["nodes"]))


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        if "facts" not in args:
            try:
                facts = planned_host_facts(args.get("plan"), (task_vars or {}).get("hostvars"))
            except GpusplitError as exc:
                result.update(failed=True, changed=False, msg=refusal_text("", exc), errors=list(exc.errors))
                return result
            if facts is not None:
                args["facts"] = facts
        plan, facts = verify_inputs(args.get("plan"), args.get("facts"))
        # only what was given: a missing plan is still the module's own refusal
        args.update({key: value for key, value in (("plan", plan), ("facts", facts)) if key in args})
        result.update(self._execute_module(module_args=args, task_vars=task_vars))
        if isinstance(result.get("report"), dict) and isinstance(self._task.args.get("plan"), dict):
            result["report"]["plan_digest"] = json_digest(self._task.args["plan"])
        return result
