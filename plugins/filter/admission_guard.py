"""Filters for the admission guard's DRA-claim and privileged-pod policies, and its report.

    {{ {'name': 'gpusplit-visible-devices', 'privileged': 'enforce'} | gpusplit.k8s.admission_guard_policies }}
    {{ namespaces | gpusplit.k8s.guard_privileged_report(workloads, nodes, default_level='baseline') }}
    {{ report | gpusplit.k8s.guard_report_table }}

See plugins/plugin_utils/admission_guard.py (the policies) and plugins/plugin_utils/guard_report.py
(the report). Each filter is documented in plugins/filter/<name>.yml.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.plugin_utils.filter_errors import filters as wrap_filters
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.lazy import lazy

guard_lib = lazy("plugin_utils.admission_guard")
report_lib = lazy("plugin_utils.guard_report")


def admission_guard_policies(settings):
    """The claim policy (and with privileged=enforce the privileged-pod policy), with their bindings."""
    return guard_lib.guard_objects(settings)


def guard_privileged_report(
    namespaces, workloads, nodes, default_level=None, admission_config=None, allowed_namespaces=()
):
    """Namespaces whose Pod Security level allows privileged pods, and their workloads that can reach split nodes."""
    return report_lib.privileged_report(
        namespaces,
        workloads,
        nodes,
        default_level=default_level,
        admission_config=admission_config,
        allowed_namespaces=allowed_namespaces or (),
    )


def guard_report_table(report):
    return report_lib.report_table(report)


def refusals():
    """The exception types this file's filters refuse with, and their titles."""
    return {
        guard_lib.LintError: "gpusplit admission guard",
        report_lib.GuardReportError: "gpusplit guard report",
    }


class FilterModule:
    def filters(self):
        return wrap_filters((admission_guard_policies, guard_privileged_report, guard_report_table), refusals)
