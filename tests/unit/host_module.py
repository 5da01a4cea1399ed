"""A real AnsibleModule for the host modules' work in unit tests (the methods that work calls: get_bin_path,
run_command, atomic_move, warn), recording the commands it runs and the warnings it gives."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args


def ansible_module(args=None):
    """An AnsibleModule with no options (``args``: its arguments), as a module's main() makes one."""
    with patch_module_args(args or {}):
        return AnsibleModule(argument_spec={})


class Host:
    """The AnsibleModule a module's main() would pass to its work, recording ``commands`` and ``warnings``."""

    def __init__(self):
        self.module = ansible_module()
        self.commands = []
        self.warnings = []

    def get_bin_path(self, name, required=False, opt_dirs=None):
        return self.module.get_bin_path(name, required, opt_dirs)

    def run_command(self, args, **options):
        self.commands.append(list(args))
        return self.module.run_command(args, **options)

    def atomic_move(self, src, dest, **options):
        return self.module.atomic_move(src, dest, **options)

    def warn(self, text):
        self.warnings.append(text)
        self.module.warn(text)
