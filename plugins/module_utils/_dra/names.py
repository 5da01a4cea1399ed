# Copyright: gpusplit contributors
# Apache-2.0
"""DRA mode's names: the driver's, gpusplit's taint purposes, device and rule names. Private to the collection.

The NVIDIA DRA driver cannot be told to leave GPUs out: it publishes every GPU of the node as
``gpu-<minor>`` in the pool named after the node. A host share in DRA mode is therefore a
``NoSchedule`` DeviceTaintRule on each of its devices (docs/dra.md). ``report.py`` here reads the
controller's report on a rule (the module device_taint_rule uses both); the controller-only files
build on these names in ``plugins/plugin_utils/_dra/``: ``rules.py`` (DeviceTaintRules),
``claims.py`` (claims and tolerations), ``chart.py`` (Helm values), ``preflight.py``,
``published.py`` (the published ResourceSlices), ``isolation.py`` (faulty GPUs), and
``render.py``, which renders the objects from templates/. Pure functions, no I/O, standard
library only.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, ascii_int
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.names import (
    LABEL_MANAGED_BY,
    LABEL_NAME,
    MANAGED_BY,
    dns_label_name,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.modes import SHARE_DRA, names_where
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import node_plans

DRIVER = "gpu.nvidia.com"
DEVICE_CLASS = "gpu.nvidia.com"
API_GROUP_VERSION = "resource.k8s.io/v1"
EFFECTS = ("None", "NoSchedule", "NoExecute")

# gpusplit's labels and annotations on its DeviceTaintRules (the shared ones: _k8s/names.py)
LABEL_PURPOSE = "gpusplit.io/taint-purpose"
ANNOTATION_UUID = "gpusplit.io/gpu-uuid"
ANNOTATION_PCI = "gpusplit.io/pci-bus-id"
ANNOTATION_REASON = "gpusplit.io/reason"

# purpose -> (name prefix, app.kubernetes.io/name, taint key)
PURPOSES = {
    "host": ("gpusplit-host-", "gpusplit-host-share", "gpusplit.io/host-share"),
    "excluded": ("gpusplit-excluded-", "gpusplit-host-share", "gpusplit.io/excluded"),
    "isolate": ("gpusplit-isolate-", "gpusplit-isolate", "gpusplit.io/unhealthy"),
}
HOST_SHARE_TAINT_KEY = PURPOSES["host"][2]
EXCLUDED_TAINT_KEY = PURPOSES["excluded"][2]
ISOLATE_TAINT_KEY = PURPOSES["isolate"][2]
# the rules of the plan (host share and excluded GPUs): what dra_split prunes
PLAN_RULES_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_NAME}=gpusplit-host-share"
ISOLATION_RULES_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_NAME}=gpusplit-isolate"


class DraError(GpusplitError):
    """One or more refusals; ``errors`` holds every message."""


def check_purpose(purpose):
    """Refuse a taint purpose that is not one of PURPOSES."""
    if purpose not in PURPOSES:
        raise DraError(f"taint purpose {purpose!r} is not one of {', '.join(PURPOSES)}")


def device_name(minor):
    """The DRA driver's name of a full GPU: ``gpu-<minor>`` (the /dev/nvidiaN number, not the index)."""
    number = minor if isinstance(minor, int) and not isinstance(minor, bool) else ascii_int(minor)
    if number is None or number < 0:
        raise DraError(f"minor number {minor!r} is not a whole number >= 0")
    return f"gpu-{number}"


def taint_rule_name(purpose, node, device):
    """``gpusplit-<purpose>-<node>-<device>``: a DNS label (hashed when it would not fit).

    Deterministic, and one name per (purpose, node, device): ``device`` is always ``gpu-<n>``,
    so the node part is what remains when that suffix is taken off.
    """
    check_purpose(purpose)
    return dns_label_name(PURPOSES[purpose][0], f"{node}-{device}")


def dra_node_plans(plan):
    """The node plans whose mode lets the DRA driver give Kubernetes its share (mode dra)."""
    dra_modes = names_where(kubernetes_share=SHARE_DRA)
    return [p for p in node_plans(plan) if p.get("mode") in dra_modes]
