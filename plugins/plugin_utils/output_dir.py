# Copyright: gpusplit contributors
# Apache-2.0
"""Where a run writes its outputs (gpus.json, fleet-plan.json, fleet-report.json, ...). Private to
the collection; the filter gpusplit.k8s.out_dir gives it to roles and playbooks.

The default is the folder ``out`` in the directory ansible-playbook was started from. Not next to
the playbook: run as ``ansible-playbook gpusplit.k8s.site`` the playbook is inside the installed
collection, which an execution environment mounts read-only. Not inside the inventory directory
either: Ansible reads every file of an inventory directory as inventory, the JSON outputs included.
"""

from __future__ import annotations

import os

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, type_name

DEFAULT_NAME = "out"


def out_dir(setting=None, cwd=None):
    """The absolute output directory: ``setting`` (gpusplit_out_dir), relative to ``cwd`` when relative;
    ``cwd``/out when it is None or empty. ``cwd`` defaults to the controller's working directory."""
    if setting is not None and not isinstance(setting, str):
        raise GpusplitError(
            f"gpusplit_out_dir: expected a directory path (a string), got {type_name(setting)} {setting!r}"
        )
    base = os.getcwd() if cwd is None else str(cwd)
    path = os.path.expanduser(setting.strip()) if setting and setting.strip() else DEFAULT_NAME
    return os.path.normpath(os.path.join(base, path))
