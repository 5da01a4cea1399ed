"""Filters that lint GPU workloads.

    {{ 'deploy/*.yaml' | gpusplit.k8s.workload_manifests }}
    {{ manifests | gpusplit.k8s.workload_lint }}
    {{ manifests | gpusplit.k8s.workload_lint(allowed_namespaces=['kube-system'], gpu_taint=true) }}
    {{ findings | gpusplit.k8s.lint_table }}

See plugins/plugin_utils/workload_checks.py for the rules, and
plugins/plugin_utils/manifest_files.py for reading the files.
Each filter is documented in plugins/filter/<name>.yml (ansible-doc -t filter gpusplit.k8s.<name>).
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.plugin_utils.filter_errors import filters as wrap_filters
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.lazy import lazy

workload_lint_lib = lazy("plugin_utils.workload_checks")
_manifest_files = lazy("plugin_utils.manifest_files")

# stands for the library's DEFAULT_ALLOWED_NAMESPACES, which is not imported before the filter runs
_DEFAULT_NAMESPACES = object()


def workload_manifests(paths, field="paths"):
    """[object] of the YAML files that ``paths`` (a path or glob, or a list of them) names."""
    return _manifest_files.read_manifests(paths, field=field)


def workload_lint(
    manifests,
    allowed_namespaces=_DEFAULT_NAMESPACES,
    gpu_taint=None,
    default_namespace="default",
    check_env_from=True,
):
    """[finding] (object, container, rule, severity, message, fix) for the manifests."""
    if allowed_namespaces is _DEFAULT_NAMESPACES:
        allowed_namespaces = workload_lint_lib.DEFAULT_ALLOWED_NAMESPACES
    return workload_lint_lib.lint(
        manifests,
        allowed_namespaces=allowed_namespaces,
        gpu_taint=gpu_taint,
        default_namespace=default_namespace,
        check_env_from=check_env_from,
    )


def lint_table(findings):
    return workload_lint_lib.lint_table(findings)


def refusals():
    """The exception types this file's filters refuse with, and their titles."""
    return {
        _manifest_files.ManifestError: "gpusplit workload manifests",
        workload_lint_lib.LintError: "gpusplit workload lint",
    }


class FilterModule:
    def filters(self):
        return wrap_filters((workload_manifests, workload_lint, lint_table), refusals)
