"""Filters for the control_plane_gates role: thin wrappers of the pure control-plane helpers.

    {{ hints | gpusplit.k8s.gpusplit_cp_detect }}                 -> {kind, managed, message, ...}
    {{ manifest_text | gpusplit.k8s.gpusplit_cp_manifest_version }}  -> "1.37.2" (image tag) or None
    {{ 'k3s version v1.37.2+k3s1 (...)' | gpusplit.k8s.gpusplit_cp_version_output }} -> "1.37.2"
    {{ gates | gpusplit.k8s.gpusplit_rancher_dropin(runtime_config, header) }}  -> drop-in YAML text
    {{ runtime_config | gpusplit.k8s.gpusplit_cp_enabled_api_versions }}  -> ["scheduling.k8s.io/v1beta1"]
    {{ log_text | gpusplit.k8s.gpusplit_cp_component_error }}     -> the lines that say why it stopped

The logic lives in plugins/module_utils/_control_plane/flags.py (detection, versions, k3s/rke2
drop-in) and plugins/module_utils/_control_plane/health.py (log reading).
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane import flags
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane import health as cp_health
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.filter_errors import filters as wrap_filters

REFUSALS = {flags.FlagEditError: None, cp_health.HealthError: None}  # titled by the filter name


def gpusplit_cp_detect(hints):
    """detect_control_plane(hints): kubeadm | k3s | rke2 | managed | unknown, with the reason."""
    return flags.detect_control_plane(dict(hints or {}))


def gpusplit_cp_manifest_version(text):
    """Kubernetes version from a static-pod manifest's image tag (None when the tag is no version)."""
    return flags.version_from_manifest(str(text))


def gpusplit_cp_version_output(text):
    """Kubernetes version from ``<binary> --version`` output (kube-apiserver, k3s, rke2)."""
    return flags.version_from_version_output(str(text or ""))


def gpusplit_rancher_dropin(feature_gates, runtime_config=None, header=None):
    """The k3s/rke2 ``config.yaml.d`` drop-in setting the gates (all three) and runtime-config (apiserver)."""
    return flags.render_rancher_dropin(feature_gates, runtime_config, header=header)


def gpusplit_cp_enabled_api_versions(runtime_config):
    """Group/versions that a ``--runtime-config`` map switches on (``group/version: "true"``)."""
    enabled = []
    for key, value in (runtime_config or {}).items():
        on = value is True or str(value).strip().lower() in ("true", "1", "t", "")
        if on and key.count("/") == 1 and not key.startswith("api/"):
            enabled.append(key)
    return sorted(enabled)


def gpusplit_cp_component_error(text, max_lines=6):
    """The lines of a component's log tail that say why it stopped (newest last).

    ``text`` may be a list of texts (a command's stdout and stderr), read one after the other.
    """
    if isinstance(text, (list, tuple)):
        text = "\n".join(str(t or "") for t in text)
    return cp_health.component_error(str(text or ""), int(max_lines))


class FilterModule:
    def filters(self):
        return wrap_filters(
            (
                gpusplit_cp_detect,
                gpusplit_cp_manifest_version,
                gpusplit_cp_version_output,
                gpusplit_rancher_dropin,
                gpusplit_cp_enabled_api_versions,
                gpusplit_cp_component_error,
            ),
            REFUSALS,
        )
