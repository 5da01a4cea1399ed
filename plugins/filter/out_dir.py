# Copyright: gpusplit contributors
# Apache-2.0
"""Filter gpusplit.k8s.out_dir: where a run writes its outputs (plugins/plugin_utils/output_dir.py).

    gpusplit_out_dir: "{{ none | gpusplit.k8s.out_dir }}"        # a role's default: ./out, absolute

Documented in plugins/filter/out_dir.yml (ansible-doc -t filter gpusplit.k8s.out_dir).
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.plugin_utils.filter_errors import filters as wrap_filters
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.lazy import lazy

_out_dir = lazy("plugin_utils.output_dir")


def out_dir(setting=None):
    """The absolute output directory: the setting, else ``out`` in ansible-playbook's working directory."""
    return _out_dir.out_dir(setting)


class FilterModule:
    def filters(self):
        return wrap_filters((out_dir,))
