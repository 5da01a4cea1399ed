# Copyright: gpusplit contributors
# Apache-2.0
"""The split-mode table (plugins/module_utils/_split/modes.py) for roles and playbooks.

    {{ {} | gpusplit.k8s.split_modes }}                                  # every mode: {name: fields}
    {{ gpu_host_share.mode in ({'hardens_host': true} | gpusplit.k8s.split_modes) }}
    {{ targets | selectattr('mode', 'in', {'isolate': 'replan'} | gpusplit.k8s.split_modes) }}

Roles and playbooks decide with the table's fields instead of comparing mode names. Documented in
plugins/filter/split_modes.yml (ansible-doc -t filter gpusplit.k8s.split_modes).
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, type_name
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.filter_errors import filters as wrap_filters
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.lazy import lazy

modes = lazy("module_utils._split.modes")


def refusals():
    """The exception types this file's filters refuse with, and their titles."""
    return {GpusplitError: "gpusplit split modes"}


def split_modes(where=None):
    """{name: fields} of the modes whose fields equal ``where`` ({field: value}), in table order."""
    if where is None:
        where = {}
    if not isinstance(where, Mapping):
        raise GpusplitError(
            [f"split_modes: expected a mapping of field: value to match, got {type_name(where)}"]
        )
    table = modes.as_dicts()
    return {name: table[name] for name in modes.names_where(**{str(k): v for k, v in where.items()})}


class FilterModule:
    def filters(self):
        return wrap_filters((split_modes,), refusals)
