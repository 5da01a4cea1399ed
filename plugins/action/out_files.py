# Copyright: gpusplit contributors
# Apache-2.0
"""Action plugin gpusplit.k8s.out_files: the module's work done on the controller, with no module execution.

The output folder of a run is the controller's; writing there through a module costs a Python start and
the module framework's imports per task. This runs the same function (module_utils/_out/output_files.py) in
the controller's worker. Documented in plugins/modules/out_files.py.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, refusal_text
from ansible_collections.gpusplit.k8s.plugins.module_utils._out.output_files import ARGUMENT_SPEC, write_files


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        # a missing option or one of the wrong type fails the task here, as the module's own spec would
        args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]
        try:
            result.update(
                write_files(
                    args["dir"],
                    args["files"],
                    # the play context has the task's own check_mode (a task with check_mode: false writes)
                    check_mode=bool(self._play_context.check_mode),
                    diff=bool(self._play_context.diff),
                )
            )
        except GpusplitError as exc:
            result.update(failed=True, changed=False, msg=refusal_text("", exc), errors=exc.errors)
        return result
