# Copyright: gpusplit contributors
# Apache-2.0
"""The roles' steps on the controller, run by the action plugin gpusplit.k8s.role_step.

Private to the collection: the steps, their inputs and their results change with the roles that use them.

A step is one task of a role that works out, in one call, what the role's next tasks need: from the
plan, the inventory's variables and what the role read of the cluster. Each step is a plain function
``step(inputs, context)`` that returns a mapping, the task's result; the logic it calls lives in
plugin_utils and module_utils, where unit tests call it directly. The steps live in ``_steps/`` by
where they work (``cluster_steps.py``, ``host_steps.py``, ``playbook_steps.py``); how one is registered,
run and refused in ``_steps/registry.py``.

The libraries are imported at a step's first use (plugin_utils/lazy.py): a worker that runs one step
imports what that step needs, nothing more.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.plugin_utils._steps import (
    cluster_steps,
    host_steps,
    playbook_steps,
    unsplit_steps,
)
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._steps.registry import STEPS, StepContext, run_step

# the files whose steps are registered (each registers its own when imported)
STEP_FILES = (cluster_steps, host_steps, playbook_steps, unsplit_steps)

__all__ = ["STEPS", "STEP_FILES", "StepContext", "run_step"]
