# Copyright: gpusplit contributors
# Apache-2.0
"""The admission guard's policies beyond NVIDIA_VISIBLE_DEVICES: DRA claims and privileged pods.

Both are ValidatingAdmissionPolicies rendered from templates/validatingadmissionpolicy.yaml.j2
(``guard`` = "claims" or "privileged"), each with its binding from
templates/validatingadmissionpolicybinding.yaml.j2, beside the env policy that
``workload_lint.guard_objects`` renders:

* ``<name>-dra-claims`` rejects, outside the allowed namespaces, a ResourceClaim or a
  ResourceClaimTemplate (resource.k8s.io/v1) with a device request (``exactly`` or a
  ``firstAvailable`` subrequest) that tolerates a taint key gpusplit owns (OWNED_TAINT_KEYS:
  the host share, excluded and isolated GPUs), with any operator or effect; a toleration
  without a key tolerates every taint and is rejected too. A Pod has no inline claim in
  resource.k8s.io/v1 (``spec.resourceClaims`` names a claim or a template), so these two kinds
  are every way in.
* ``<name>-privileged`` (only with ``privileged: enforce``) rejects, outside the allowed
  namespaces, a Pod with a privileged container or one adding SYS_ADMIN (or ALL) when the pod
  tolerates the GPU taint (or every taint) or names a split-node label (SPLIT_LABEL_KEYS) in its
  nodeSelector or node affinity (In, Exists, Gt, Lt). Where the scheduler will place a pod is not
  known at admission: a privileged pod that reaches a split node some other way (``nodeName``, a
  hostname label, an untainted fleet) is not rejected; guard_report.py lists what could.

Every policy object carries the label gpusplit.io/guard=<name>, so the role's prune removes it
with the env policy.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._dra.names import PURPOSES
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.names import (
    LABEL_MANAGED_BY,
    LABEL_MODE,
    LABEL_NAME,
    MANAGED_BY,
)
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.settings import with_defaults
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.workload_checks import (
    _LABEL_KEY,
    GUARD_APP,
    GUARD_DEFAULTS,
    GUARD_LABEL,
    LintError,
    guard_settings,
)

# gpusplit's device taint keys, from the one place that declares them (_dra/names.py PURPOSES)
OWNED_TAINT_KEYS = tuple(dict.fromkeys(purpose[2] for purpose in PURPOSES.values()))
# the labels gpusplit (render.py) and the GPU stack put on split nodes
SPLIT_LABEL_KEYS = (
    render.LABEL_SPLIT,
    LABEL_MODE,
    render.LABEL_KUBERNETES_GPUS,
    render.LABEL_HOST_GPUS,
    render.LABEL_GPU_PRESENT,
)
GPU_TAINT_KEY = render.GPU_TAINT["key"]
PRIVILEGED_MODES = ("off", "report", "enforce")
CLAIMS_SUFFIX = "-dra-claims"
PRIVILEGED_SUFFIX = "-privileged"

_COMMON = ("name", "allowed_namespaces", "allow_label", "match_labels", "validation_actions")
DEFAULTS = {
    **{k: GUARD_DEFAULTS[k] for k in _COMMON},
    "dra_claims": True,
    "extra_taint_keys": [],  # more device taint keys to reserve (a site's own)
    "privileged": "report",
    "gpu_taint_key": GPU_TAINT_KEY,
}


def settings(values=None):
    """Defaults + ``values``, every value checked (they end up in CEL and selectors)."""
    s = with_defaults(values or {}, DEFAULTS, "guard settings", LintError)
    s.update(guard_settings({k: s[k] for k in _COMMON}))  # the env guard's checks and normalising
    problems = []
    if not isinstance(s["dra_claims"], bool):
        problems.append(f"dra_claims {s['dra_claims']!r} must be true or false")
    extra = s["extra_taint_keys"]
    if not isinstance(extra, (list, tuple)) or not all(
        isinstance(k, str) and _LABEL_KEY.match(k) for k in extra
    ):
        problems.append(f"extra_taint_keys {extra!r} must be a list of taint keys (label names)")
    if s["privileged"] not in PRIVILEGED_MODES:
        problems.append(f"privileged {s['privileged']!r} is not one of {', '.join(PRIVILEGED_MODES)}")
    key = s["gpu_taint_key"]
    if not isinstance(key, str) or not _LABEL_KEY.match(key):
        problems.append(f"gpu_taint_key {key!r} is not a taint key")
    if problems:
        raise LintError("guard settings: " + "; ".join(problems))
    s["owned_keys"] = list(dict.fromkeys([*OWNED_TAINT_KEYS, *extra]))
    return s


def who(s):
    """Who may do what the guard rejects, in words (for the policies' messages)."""
    parts = []
    if s["allowed_namespaces"]:
        parts.append("the namespaces " + ", ".join(s["allowed_namespaces"]))
    if s["allow_label"]:
        parts.append(f"namespaces labelled {s['allow_label']}=true")
    if not parts:
        return "no namespace"
    how = "gpusplit_guard_allowed_namespaces of the admission_guard role"
    return " and ".join(parts) + f" (an administrator adds one through {how})"


def _objects(s, guard, name, **extra):
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_NAME: GUARD_APP, GUARD_LABEL: s["name"]}
    context = {
        "guard": guard,
        "name": name,
        "labels": labels,
        "who": who(s),
        "allowed_namespaces": s["allowed_namespaces"],
        "allow_label": s["allow_label"] or "",
        "match_labels": s["match_labels"],
        "validation_actions": list(s["validation_actions"]),
        **extra,
    }
    return [
        render.render_template("validatingadmissionpolicy.yaml.j2", **context),
        render.render_template("validatingadmissionpolicybinding.yaml.j2", **context),
    ]


def claim_objects(values=None):
    """[ValidatingAdmissionPolicy, binding] against claims tolerating gpusplit's device taints."""
    s = settings(values)
    return _objects(s, "claims", s["name"] + CLAIMS_SUFFIX, owned_keys=s["owned_keys"])


def privileged_objects(values=None):
    """[ValidatingAdmissionPolicy, binding] against privileged pods aimed at split nodes."""
    s = settings(values)
    return _objects(
        s,
        "privileged",
        s["name"] + PRIVILEGED_SUFFIX,
        gpu_taint_key=s["gpu_taint_key"],
        split_label_keys=list(SPLIT_LABEL_KEYS),
    )


def guard_objects(values=None):
    """Every policy and binding these settings ask for (besides the env guard), for cluster_apply."""
    s = settings(values)
    out = claim_objects(values) if s["dra_claims"] else []
    if s["privileged"] == "enforce":
        out += privileged_objects(values)
    return out
