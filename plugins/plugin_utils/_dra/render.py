# Copyright: gpusplit contributors
# Apache-2.0
"""DRA mode's Kubernetes objects, rendered from templates/ with Jinja2 (controller only). Private to the collection.

DeviceTaintRules (the host share, excluded and isolated GPUs), claims and the DeviceClasses of time-sliced
Kubernetes shares. What each object says is
decided and checked in the other files of this package (the ``*_context`` functions); this file
only renders it. The lab harness's DeviceClass and ResourceSlice are rendered by lab/dra_driver.py.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._dra.names import dra_node_plans
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.sharing import dra_device_class_contexts
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._dra.claims import (
    claim_context,
    diagnostic_claim_context,
)
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._dra.rule_plan import (
    host_share_rule_contexts,
    isolation_rule_context,
    isolation_rule_contexts,
    taint_rule_context,
)
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.split_render import render_template

TAINT_RULE_TEMPLATE = "devicetaintrule.yaml.j2"
CLAIM_TEMPLATE = "resourceclaimtemplate.yaml.j2"
DEVICE_CLASS_TEMPLATE = "deviceclass.yaml.j2"


def render_taint_rule(*args, **kwargs):
    """One DeviceTaintRule naming ``driver``/``pool=node``/``device``, with gpusplit's labels.

    The arguments of ``rules.py`` taint_rule_context (purpose, node, device, effect, value,
    host, uuid, pci_bus_id, reason, driver).
    """
    return render_template(TAINT_RULE_TEMPLATE, **taint_rule_context(*args, **kwargs))


def host_share_rules(plan, effect="NoSchedule", slices=None):
    """One DeviceTaintRule per reserved (host-share or excluded) device of every node in mode dra, sorted by name.

    ``slices``: the live ResourceSlices, so that the MIG devices of a reserved MIG-enabled GPU get
    rules too (see ``rules.py`` host_share_rule_contexts).
    """
    return [render_template(TAINT_RULE_TEMPLATE, **c) for c in host_share_rule_contexts(plan, effect, slices)]


def isolation_rule(located, effect="None", reason=None, device=None):
    """The DeviceTaintRule isolating one GPU (see ``locate_gpu``); effect None reports only.

    ``device`` names another published device of that GPU (one of its MIG devices).
    """
    return render_template(TAINT_RULE_TEMPLATE, **isolation_rule_context(located, effect, reason, device))


def isolation_rules(located, effect="None", reason=None, slices=None):
    """Every DeviceTaintRule that isolates one GPU: its ``gpu-<minor>`` device and, for a MIG-enabled GPU,
    each MIG device the driver publishes for it (``slices``); none for a lost GPU."""
    return [
        render_template(TAINT_RULE_TEMPLATE, **c)
        for c in isolation_rule_contexts(located, effect, reason, slices)
    ]


def render_claim(*args, **kwargs):
    """A ResourceClaimTemplate (default) or ResourceClaim for ``count`` GPUs of ``device_class``.

    The arguments of ``claims.py`` claim_context (name, namespace, count, tolerations,
    device_class, kind, request_name, selectors, labels): ``tolerations`` are DeviceTolerations
    (see toleration there), ``selectors`` extra CEL expressions
    (e.g. ``device.attributes['gpu.nvidia.com'].productName == '...'``).
    """
    return render_template(CLAIM_TEMPLATE, **claim_context(*args, **kwargs))


def diagnostic_claim(name, namespace, located, kind="ResourceClaim"):
    """A claim for exactly the isolated GPU ``located`` (see locate_gpu), tolerating its isolation taint."""
    return render_template(CLAIM_TEMPLATE, **diagnostic_claim_context(name, namespace, located, kind))


def sharing_device_classes(plan):
    """gpusplit's DeviceClasses of the time-sliced Kubernetes shares of the nodes in mode dra, sorted by name
    (``sharing.py`` dra_device_class_contexts: one per interval, with the driver's GpuConfig)."""
    return [
        render_template(DEVICE_CLASS_TEMPLATE, **c) for c in dra_device_class_contexts(dra_node_plans(plan))
    ]
