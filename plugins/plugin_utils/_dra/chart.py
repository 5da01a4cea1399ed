# Copyright: gpusplit contributors
# Apache-2.0
"""The values for the dra-driver-nvidia-gpu Helm chart on a gpusplit fleet. Private to the collection.

``chart_values`` from gpusplit's driver settings (``resolve_driver_settings`` checks them);
``chart_refusals`` says what the chart's own ``templates/validation.yaml`` would refuse;
``unknown_value_paths`` finds keys the chart does not have; ``deep_merge`` merges values the
way Helm does.
"""

from __future__ import annotations

import copy

from ansible_collections.gpusplit.k8s.plugins.module_utils._dra.names import DraError
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.names import LABEL_MODE
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.settings import with_defaults

DEFAULT_DRIVER_SETTINGS = {
    "driver_root": "/",  # nvidiaDriverRoot: / for a host-installed driver, /run/nvidia/driver under the operator
    "compute_domains": False,  # resources.computeDomains.enabled (needs webhook + cert-manager in 0.4.x)
    "feature_gates": {},  # featureGates
    "node_label": LABEL_MODE,  # the kubelet plugin runs only on nodes with <node_label>=<node_label_value>
    "node_label_value": "dra",
    "image_repository": None,  # image.repository
    "image_tag": None,  # image.tag
    "extra_values": {},  # merged last, as they are
}


# The defaults of the chart's values.yaml (0.4.x) that its templates/validation.yaml looks at.
CHART_VALIDATION_DEFAULTS = {
    "gpuResourcesEnabledOverride": False,
    "resources": {"gpus": {"enabled": True}},
    "webhook": {
        "enabled": False,
        "tls": {"mode": "cert-manager", "certManager": {"issuerType": "selfsigned", "issuerName": ""}},
    },
}
_WEBHOOK_TLS_MODES = ("cert-manager", "secret")
_CERT_MANAGER_ISSUERS = ("selfsigned", "clusterissuer", "issuer")


def _at(values, *path):
    for key in path:
        if not isinstance(values, dict):
            return None
        values = values.get(key)
    return values


def chart_refusals(values):
    """What the chart's ``templates/validation.yaml`` (0.4.x) would refuse in ``values``, in its own terms.

    The chart fails its rendering on these; gpusplit says so before any change (the preflight
    renders the values before the DeviceTaintRules are applied).
    """
    v = deep_merge(CHART_VALIDATION_DEFAULTS, values or {})
    out = []
    if v.get("namespace"):
        out.append(
            f"namespace {v['namespace']!r}: the chart no longer takes an explicit 'namespace' value; "
            "the release's namespace is gpusplit_dra_namespace (helm --namespace)"
        )
    if _at(v, "resources", "gpus", "enabled") and not v.get("gpuResourcesEnabledOverride"):
        out.append(
            "resources.gpus.enabled is true without gpuResourcesEnabledOverride: true: the chart refuses it, "
            "because with GPUs enabled the DRA driver must not share a node with the standard GPU device "
            "plugin (until KEP 5004, DRA extended resources, is GA); set the override only where no device "
            "plugin runs on the DRA nodes (gpusplit's preflight checks that), or disable resources.gpus"
        )
    if v.get("nvidiaCtkPath"):
        out.append(
            "nvidiaCtkPath: the chart no longer supports it (the driver ships its own CDI hook); remove it"
        )
    if _at(v, "webhook", "enabled"):
        mode = _at(v, "webhook", "tls", "mode")
        issuer = _at(v, "webhook", "tls", "certManager", "issuerType")
        if mode not in _WEBHOOK_TLS_MODES:
            out.append(
                f"webhook.tls.mode {mode!r}: with the webhook enabled it must be cert-manager or secret"
            )
        elif mode == "cert-manager" and issuer not in _CERT_MANAGER_ISSUERS:
            out.append(
                f"webhook.tls.certManager.issuerType {issuer!r}: must be selfsigned, clusterissuer or issuer"
            )
        elif (
            mode == "cert-manager"
            and issuer != "selfsigned"
            and not _at(v, "webhook", "tls", "certManager", "issuerName")
        ):
            out.append(
                f"webhook.tls.certManager.issuerName is empty: an issuer of type {issuer} needs a name"
            )
        elif mode == "secret" and not _at(v, "webhook", "tls", "secret", "name"):
            out.append(
                "webhook.tls.secret.name is empty: webhook TLS mode secret needs the TLS secret's name"
            )
    return out


def resolve_driver_settings(settings=None):
    out = with_defaults(settings, DEFAULT_DRIVER_SETTINGS, "DRA driver settings", DraError)
    errors = []
    if not isinstance(out["driver_root"], str) or not out["driver_root"].startswith("/"):
        errors.append(f"driver_root {out['driver_root']!r} is not an absolute path")
    if not isinstance(out["compute_domains"], bool):
        errors.append(f"compute_domains {out['compute_domains']!r} is not a boolean")
    gates = out["feature_gates"]
    if not isinstance(gates, dict) or not all(isinstance(v, bool) for v in gates.values()):
        errors.append(f"feature_gates {gates!r} is not a mapping of name -> true/false")
    if not isinstance(out["extra_values"], dict):
        errors.append(f"extra_values {out['extra_values']!r} is not a mapping")
    for key in ("node_label", "node_label_value"):
        if not isinstance(out[key], str) or not out[key]:
            errors.append(f"{key} {out[key]!r} is not a non-empty string")
    if errors:
        raise DraError(errors)
    return out


def deep_merge(base, override):
    """A copy of ``base`` with ``override`` merged in: mappings recursively, anything else replaced."""
    out = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def chart_values(settings=None):
    """The values for the dra-driver-nvidia-gpu chart (0.4.x) on a gpusplit fleet.

    - ``resources.gpus.enabled: true`` with ``gpuResourcesEnabledOverride: true`` on purpose:
      the chart refuses GPUs without the override because the driver must not share a node with
      a device plugin; gpusplit guarantees that (preflight, and the DRA nodes get no split plugin).
    - ``resources.computeDomains.enabled: false`` by default: in chart 0.4.x compute domains need
      the webhook (and cert-manager); the chart refuses them otherwise.
    - the kubelet plugin runs only on nodes labelled ``gpusplit.io/mode=dra``: a nodeSelector,
      and a required nodeAffinity that replaces the chart's default terms (NFD / operator labels,
      which a fleet without NFD does not have).
    """
    s = resolve_driver_settings(settings)
    term = {
        "matchExpressions": [{"key": s["node_label"], "operator": "In", "values": [s["node_label_value"]]}]
    }
    values = {
        "nvidiaDriverRoot": s["driver_root"],
        "gpuResourcesEnabledOverride": True,
        "resources": {"gpus": {"enabled": True}, "computeDomains": {"enabled": s["compute_domains"]}},
        "kubeletPlugin": {
            "nodeSelector": {s["node_label"]: s["node_label_value"]},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
                }
            },
        },
    }
    if s["feature_gates"]:
        values["featureGates"] = dict(sorted(s["feature_gates"].items()))
    image = {}
    if s["image_repository"]:
        image["repository"] = str(s["image_repository"])
    if s["image_tag"]:
        image["tag"] = str(s["image_tag"])
    if image:
        values["image"] = image
    values = deep_merge(values, s["extra_values"])
    refusals = chart_refusals(values)
    if refusals:
        raise DraError([f"the dra-driver-nvidia-gpu chart would refuse these values: {r}" for r in refusals])
    return values


def unknown_value_paths(values, reference, prefix=""):
    """Dotted paths in ``values`` that the chart's ``reference`` values do not have.

    A mapping that is empty in the reference (nodeSelector, featureGates, podAnnotations) is
    free-form: any key below it is accepted, as is anything below a list or scalar.
    """
    out = []
    for key, value in (values or {}).items():
        path = f"{prefix}{key}"
        if not isinstance(reference, dict) or key not in reference:
            out.append(path)
            continue
        ref = reference[key]
        if isinstance(value, dict) and isinstance(ref, dict) and ref:
            out.extend(unknown_value_paths(value, ref, path + "."))
    return out
