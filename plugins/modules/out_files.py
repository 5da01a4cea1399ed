#!/usr/bin/python
# Copyright: gpusplit contributors
# Apache-2.0
"""Ansible module gpusplit.k8s.out_files: a run's output files, in one step."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: out_files
short_description: Write a run's output files (gpus.json, fleet-plan.json, reports, pictures) in one step
version_added: "0.1.0"
description:
  - Creates the output folder O(dir) where it is missing (mode C(0755)) and writes each file of O(files) whose
    text or mode differs from what is there, through a dot-file beside it and an atomic rename, so that a reader
    sees the old file or the new one, never a part. Files that already hold the text are left alone, so an
    unchanged run reports C(changed=false).
  - Its action plugin of the same name runs it on the controller, without a module execution, where the roles
    write their outputs (the folder C(gpusplit_out_dir) is the controller's). One task of it replaces a
    C(ansible.builtin.file) task for the folder and an C(ansible.builtin.copy) task per file.
  - Every file name and mode is checked before anything is written; a refusal changes nothing.
author:
  - gpusplit team (!UNKNOWN)
options:
  dir:
    description: The output folder. Created with its parents where missing.
    type: path
    required: true
  files:
    description:
      - File name (a plain name inside O(dir), no C(/)) to its whole text, or to a mapping with C(content) (the
        text) and C(mode) (an octal string, default C('0644')).
    type: dict
    required: true
notes:
  - Runs on the controller through its action plugin whatever the task's host; C(delegate_to) and C(become) do
    not move it.
seealso:
  - module: ansible.builtin.copy
extends_documentation_fragment:
  - gpusplit.k8s.attributes.check_mode_and_diff
"""

EXAMPLES = r"""
- name: Write the fleet report and its picture
  gpusplit.k8s.out_files:
    dir: "{{ gpusplit_out_dir }}"
    files:
      fleet-report.json: "{{ report | to_nice_json(indent=2) }}\n"
      fleet.svg: "{{ report | gpusplit.k8s.fleet_svg(plan) }}"
  run_once: true

- name: A file with its own mode
  gpusplit.k8s.out_files:
    dir: /var/lib/gpusplit/out
    files:
      plan.json:
        content: "{{ plan | to_json }}"
        mode: "0600"
"""

RETURN = r"""
dir:
  description: The output folder, absolute.
  returned: always
  type: str
  sample: /home/ops/gpusplit/out
created_dir:
  description: Whether the folder was created (or would be, in check mode).
  returned: always
  type: bool
written:
  description: The files written (in check mode, those that would be), by name.
  returned: always
  type: list
  elements: str
  sample: [fleet-report.json]
unchanged:
  description: The files that already held their text and mode, by name.
  returned: always
  type: list
  elements: str
  sample: [fleet.svg]
paths:
  description: The path of every file of O(files).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import fail_on_refusal
from ansible_collections.gpusplit.k8s.plugins.module_utils._out.output_files import ARGUMENT_SPEC, write_files


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    with fail_on_refusal(module, changed=False):
        result = write_files(
            module.params["dir"], module.params["files"], check_mode=module.check_mode, diff=module._diff
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
