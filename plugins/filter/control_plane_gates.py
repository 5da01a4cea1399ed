"""Filters for the control_plane_gates role: thin wrappers of the pure control-plane helpers.

    {{ hints | gpusplit.k8s.cp_detect }}                 -> {kind, managed, message, ...}
    {{ manifest_text | gpusplit.k8s.cp_manifest_version }}  -> "1.37.2" (image tag) or None
    {{ 'k3s version v1.37.2+k3s1 (...)' | gpusplit.k8s.cp_version_output }} -> "1.37.2"
    {{ runtime_config | gpusplit.k8s.cp_enabled_api_versions }}  -> ["scheduling.k8s.io/v1beta1"]
    {{ log_text | gpusplit.k8s.cp_component_error }}     -> the lines that say why it stopped

The logic lives in plugins/plugin_utils/control_plane_detect.py (detection),
plugins/module_utils/_control_plane/static_pod.py and plugins/module_utils/_k8s/versions.py (versions) and
plugins/module_utils/_control_plane/health.py (log reading). Each filter is documented in
plugins/filter/<name>.yml (ansible-doc -t filter gpusplit.k8s.<name>).
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.plugin_utils.filter_errors import filters as wrap_filters
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.lazy import lazy

health = lazy("module_utils._control_plane.health")
_flag_values = lazy("module_utils._control_plane.flag_values")
_gate_preflight = lazy("module_utils._control_plane.gate_preflight")
_static_pod = lazy("module_utils._control_plane.static_pod")
_versions = lazy("module_utils._k8s.versions")
_control_plane_detect = lazy("plugin_utils.control_plane_detect")


def refusals():
    """The exception types this file's filters refuse with, and their titles (None: titled by the filter name)."""
    return {_flag_values.FlagEditError: None, health.HealthError: None}


def cp_detect(hints):
    """detect_control_plane(hints): kubeadm | k3s | rke2 | managed | unknown, with the reason."""
    return _control_plane_detect.detect_control_plane(dict(hints or {}))


def cp_manifest_version(text):
    """Kubernetes version from a static-pod manifest's image tag (None when the tag is no version)."""
    return _static_pod.version_from_manifest(str(text))


def cp_version_output(text):
    """Kubernetes version from ``<binary> --version`` output (kube-apiserver, k3s, rke2)."""
    return _versions.version_from_version_output(str(text or ""))


def cp_enabled_api_versions(runtime_config):
    """Group/versions that a ``--runtime-config`` map switches on (``group/version: "true"``)."""
    return sorted(
        key
        for key, value in (runtime_config or {}).items()
        if key.count("/") == 1 and not key.startswith("api/") and _gate_preflight.runtime_config_on(value)
    )


def cp_component_error(text, max_lines=6):
    """The lines of a component's log tail that say why it stopped (newest last).

    ``text`` may be a list of texts (a command's stdout and stderr), read one after the other.
    """
    if isinstance(text, (list, tuple)):
        text = "\n".join(str(t or "") for t in text)
    return health.component_error(str(text or ""), _max_lines(max_lines))


def _max_lines(value):
    """``max_lines`` as a positive int; anything else is refused, naming the argument."""
    try:
        number = None if isinstance(value, (bool, float)) else int(value)
    except (TypeError, ValueError):
        number = None
    if number is None or number < 1:
        raise health.HealthError(f"max_lines: expected a whole number of lines (1 or more), got {value!r}")
    return number


class FilterModule:
    def filters(self):
        return wrap_filters(
            (
                cp_detect,
                cp_manifest_version,
                cp_version_output,
                cp_enabled_api_versions,
                cp_component_error,
            ),
            refusals,
        )
