# Copyright: gpusplit contributors
# Apache-2.0
"""ResourceClaims and ResourceClaimTemplates for NVIDIA GPUs, with device tolerations. Private to the collection.

``toleration`` checks one DeviceToleration (gpusplit's taints: ``host_share_toleration``,
``isolation_toleration``); ``claim_context`` checks a claim; ``diagnostic_claim_context`` is a
claim that can only get one isolated GPU. Rendered from templates/resourceclaimtemplate.yaml.j2
by ``render.py`` in this package.
"""

from __future__ import annotations

import re

from ansible_collections.gpusplit.k8s.plugins.module_utils._dra.names import (
    DEVICE_CLASS,
    DRIVER,
    EFFECTS,
    EXCLUDED_TAINT_KEY,
    HOST_SHARE_TAINT_KEY,
    ISOLATE_TAINT_KEY,
    LABEL_PURPOSE,
    DraError,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.names import LABEL_MANAGED_BY, MANAGED_BY

TOLERATION_OPERATORS = ("Exists", "Equal")
_QUALIFIED_NAME_RE = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


def toleration(key=None, operator=None, value=None, effect=None, toleration_seconds=None):
    """One DeviceToleration (resource.k8s.io/v1). No key + Exists tolerates every taint."""
    operator = operator or ("Equal" if value else "Exists")
    errors = []
    if operator not in TOLERATION_OPERATORS:
        errors.append(f"toleration operator {operator!r} is not one of {', '.join(TOLERATION_OPERATORS)}")
    if operator == "Exists" and value:
        errors.append("a toleration with operator Exists takes no value")
    if key is not None and not _QUALIFIED_NAME_RE.match(str(key)):
        errors.append(f"toleration key {key!r} is not a label name")
    if not key and operator != "Exists":
        errors.append("a toleration without key needs operator Exists")
    if effect is not None and effect not in EFFECTS:
        errors.append(f"toleration effect {effect!r} is not one of {', '.join(EFFECTS)}")
    if toleration_seconds is not None and (effect != "NoExecute" or not isinstance(toleration_seconds, int)):
        errors.append("toleration_seconds needs effect NoExecute and a whole number")
    if errors:
        raise DraError(errors)
    out = {"operator": operator}
    if key:
        out["key"] = str(key)
    if value:
        out["value"] = str(value)
    if effect:
        out["effect"] = effect
    if toleration_seconds is not None:
        out["tolerationSeconds"] = toleration_seconds
    return out


def host_share_toleration(effect="NoSchedule"):
    """Tolerate gpusplit's host-share taint (a diagnostic job that must reach a host GPU)."""
    return toleration(HOST_SHARE_TAINT_KEY, "Exists", effect=effect)


def isolation_toleration(effect=None):
    """Tolerate gpusplit's isolation taint (gpusplit.io/unhealthy), whatever its value.

    ``effect`` None tolerates every effect, NoExecute included, so that the diagnostic pod is
    neither kept off the device nor evicted from it. Operator Exists: the taint's value is the
    isolation reason turned into a label value, which a toleration should not have to repeat.
    """
    return toleration(ISOLATE_TAINT_KEY, "Exists", effect=effect)


def _checked_toleration(t):
    """A toleration given in API spelling (tolerationSeconds) -> validated copy."""
    if not isinstance(t, dict):
        raise DraError(f"toleration {t!r} is not a mapping")
    unknown = sorted(set(t) - {"key", "operator", "value", "effect", "tolerationSeconds"})
    if unknown:
        raise DraError(f"toleration {t!r}: unknown key(s) {', '.join(unknown)}")
    return toleration(
        t.get("key"), t.get("operator"), t.get("value"), t.get("effect"), t.get("tolerationSeconds")
    )


def claim_context(
    name,
    namespace,
    count=1,
    tolerations=(),
    device_class=DEVICE_CLASS,
    kind="ResourceClaimTemplate",
    request_name="gpu",
    selectors=(),
    labels=None,
):
    """A ResourceClaimTemplate (default) or ResourceClaim for ``count`` GPUs of ``device_class``: its context.

    ``tolerations``: DeviceTolerations (see ``toleration``) for the request; ``selectors``:
    extra CEL expressions (e.g. ``device.attributes['gpu.nvidia.com'].productName == '...'``).
    """
    if kind not in ("ResourceClaimTemplate", "ResourceClaim"):
        raise DraError(f"kind {kind!r} is not ResourceClaimTemplate or ResourceClaim")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise DraError(f"count {count!r} is not a whole number >= 1")
    checked = [_checked_toleration(t) for t in tolerations or ()]
    return {
        "kind": kind,
        "name": name,
        "namespace": namespace,
        "labels": dict(labels or {}),
        "request_name": request_name,
        "device_class": device_class,
        "count": count,
        "selectors": list(selectors or ()),
        "tolerations": checked,
    }


def diagnostic_claim_context(name, namespace, located, kind="ResourceClaim"):
    """A claim (its context) for exactly the isolated GPU ``located`` (see locate_gpu), tolerating its isolation taint.

    It tolerates the planner's gpusplit.io/excluded taint too (dra.yml puts it on a GPU whose
    facts say it is unhealthy). The device is selected by its ``uuid`` attribute (CEL), so the claim can only get that GPU,
    and only on its node; the rest of the fleet's devices stay out of reach. For a burn-in or
    ``nvidia-smi -q`` job while the GPU is isolated.
    """
    uuid = str(located.get("uuid") or "")
    if not re.fullmatch(r"GPU-[0-9a-fA-F-]{36}", uuid):
        raise DraError(f"diagnostic claim: {uuid!r} is not a GPU UUID (GPU-...)")
    if located.get("mig_enabled"):
        raise DraError(
            f"diagnostic claim: GPU {uuid} has MIG enabled; the driver publishes its MIG devices, not the GPU "
            "(claim one of its MIG devices with DeviceClass mig.nvidia.com and a parentUUID selector)"
        )
    return claim_context(
        name,
        namespace,
        count=1,
        tolerations=[isolation_toleration(), toleration(EXCLUDED_TAINT_KEY, "Exists")],
        kind=kind,
        selectors=[f"device.attributes['{DRIVER}'].uuid == '{uuid}'"],
        labels={LABEL_MANAGED_BY: MANAGED_BY, LABEL_PURPOSE: "diagnose"},
    )
