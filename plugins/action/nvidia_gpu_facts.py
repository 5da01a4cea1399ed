# Copyright: gpusplit contributors
# Apache-2.0
"""Action plugin gpusplit.k8s.nvidia_gpu_facts: the discovery run on the host without an AnsiballZ execution.

Every GPU host runs the discovery on every run; the module's work (module_utils/_gpu/facts.py,
``execute``) goes to the host's Python through plugin_utils/lean_module.py, which checks the options here
against the module's argument spec first. An asynchronous task runs the module itself. The module and its
documentation: plugins/modules/nvidia_gpu_facts.py.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.facts import ARGUMENT_SPEC
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.lean_module import LeanModuleAction


class ActionModule(LeanModuleAction):
    ENTRY = "ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.facts"
    ARGUMENT_SPEC = ARGUMENT_SPEC
