# Copyright: gpusplit contributors
# Apache-2.0
"""Action plugin gpusplit.k8s.gpu_host_files: the host side of the split written without an AnsiballZ execution.

Every GPU host whose files differ from the plan runs this task (a first run, a changed host); the module's
work (module_utils/_host/host_files.py, ``execute``) goes to the host's Python through
plugin_utils/lean_module.py, which checks the options here against the module's argument spec first. A host
where SELinux is enabled, and an asynchronous task, get the module itself (its AnsibleModule labels the files
it writes). The module and its documentation: plugins/modules/gpu_host_files.py.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._host.host_files import ARGUMENT_SPEC, SPEC_RULES
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.lean_module import LeanModuleAction


class ActionModule(LeanModuleAction):
    ENTRY = "ansible_collections.gpusplit.k8s.plugins.module_utils._host.host_files"
    ARGUMENT_SPEC = ARGUMENT_SPEC
    SPEC_RULES = SPEC_RULES
