# Copyright: gpusplit contributors
# Apache-2.0
"""The split modes: one declaration each. Private to the collection.

A node's ``gpusplit_mode`` says how Kubernetes gets the node's Kubernetes share and how the host
share is kept from it. Everything that differs between modes is a field of :class:`Mode`; the
planner, the renderers, verify, the host role and the playbooks read these fields instead of
comparing mode names. Adding a mode = one entry in :data:`MODES` (plus its renderer, when it
renders a kind no other mode does).
"""

from __future__ import annotations

from collections import namedtuple

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError

# how Kubernetes sees the Kubernetes share of a node
SHARE_DEVICE_PLUGIN = "device_plugin"  # the per-node split device plugin advertises nvidia.com/gpu
SHARE_DRA = "dra"  # the NVIDIA DRA driver publishes every GPU; the host share is tainted
SHARE_NONE = "none"  # Kubernetes gets no GPU of the node

# what isolating one faulty GPU does
ISOLATE_DEVICE_TAINT = "device_taint_rule"  # a DeviceTaintRule on the GPU's published device
ISOLATE_REPLAN = "replan"  # re-plan the node without the GPU and re-render its split plugin
ISOLATE_NOTHING = "nothing"  # Kubernetes has none of the node's GPUs

Mode = namedtuple(
    "Mode",
    (
        "name",
        "description",
        "kubernetes_share",  # SHARE_*
        "renders",  # the Kubernetes kinds rendered for such a node, in apply order
        "advertises_resources",  # node allocatable counts the planned nvidia.com/gpu (and MIG) share
        "split_plugin",  # the per-node split device plugin runs when the Kubernetes share is > 0
        "other_plugins_allowed",  # a device plugin that is not the split one may run on the node
        "operator_managed",  # the GPU Operator runs here; its own device plugin is switched off
        "hardens_host",  # the container toolkit is hardened and host services are pinned
        "checks_processes",  # verify: no host process on a Kubernetes GPU, no container on a host GPU
        "device_names_by_minor",  # the plan records gpu-<minor> names (the DRA driver's device names)
        "mig_strategy_applies",  # mig_strategy decides what is advertised
        "isolate",  # ISOLATE_*
    ),
)

MODES = {
    m.name: m
    for m in (
        Mode(
            name="device_plugin",
            description="one NVIDIA device-plugin DaemonSet per node, restricted to the Kubernetes UUIDs",
            kubernetes_share=SHARE_DEVICE_PLUGIN,
            renders=("DaemonSet",),
            advertises_resources=True,
            split_plugin=True,
            other_plugins_allowed=False,
            operator_managed=False,
            hardens_host=True,
            checks_processes=True,
            device_names_by_minor=False,
            mig_strategy_applies=True,
            isolate=ISOLATE_REPLAN,
        ),
        Mode(
            name="gpu_operator",
            description="the GPU Operator for driver, toolkit, GFD and DCGM; its device plugin off on "
            "split nodes, the per-node split plugin instead",
            kubernetes_share=SHARE_DEVICE_PLUGIN,
            renders=("ClusterPolicy", "DaemonSet"),
            advertises_resources=True,
            split_plugin=True,
            other_plugins_allowed=False,
            operator_managed=True,
            hardens_host=True,
            checks_processes=True,
            device_names_by_minor=False,
            mig_strategy_applies=True,
            isolate=ISOLATE_REPLAN,
        ),
        Mode(
            name="dra",
            description="the NVIDIA DRA driver publishes the GPUs; a NoSchedule DeviceTaintRule per "
            "host-share device",
            kubernetes_share=SHARE_DRA,
            renders=("DeviceTaintRule",),
            advertises_resources=False,
            split_plugin=False,
            other_plugins_allowed=False,
            operator_managed=False,
            hardens_host=True,
            checks_processes=True,
            device_names_by_minor=True,
            mig_strategy_applies=False,
            isolate=ISOLATE_DEVICE_TAINT,
        ),
        Mode(
            name="none",
            description="left alone: Kubernetes gets none of the node's GPUs",
            kubernetes_share=SHARE_NONE,
            renders=(),
            advertises_resources=False,
            split_plugin=False,
            other_plugins_allowed=False,
            operator_managed=False,
            hardens_host=False,
            checks_processes=False,
            device_names_by_minor=False,
            mig_strategy_applies=False,
            isolate=ISOLATE_NOTHING,
        ),
    )
}

MODE_NAMES = tuple(MODES)


def find_mode(name):
    """The :class:`Mode` called ``name``, or None when the table has no such mode."""
    return MODES.get(name) if isinstance(name, str) else None


def mode_has(name, field):
    """The (boolean) ``field`` of mode ``name``: ``mode_has(plan["mode"], "split_plugin")``.

    False for a name the table does not have (whoever needs a refusal there uses :func:`get_mode`).
    """
    mode = find_mode(name)
    return mode is not None and bool(getattr(mode, field))


def get_mode(name, where=""):
    """The :class:`Mode` called ``name``; a refusal naming ``where`` and the known modes otherwise."""
    mode = find_mode(name)
    if mode is None:
        prefix = f"{where}: " if where else ""
        raise GpusplitError([f"{prefix}mode {name!r} is not one of {', '.join(MODE_NAMES)}"])
    return mode


def names_where(**fields):
    """The mode names whose fields equal ``fields``, in table order: names_where(split_plugin=True).

    A field the table does not have is refused (GpusplitError naming the fields it has).
    """
    unknown = sorted(k for k in fields if k not in Mode._fields)
    if unknown:
        raise GpusplitError(
            [f"split modes have no field {', '.join(unknown)} (fields: {', '.join(Mode._fields)})"]
        )
    return tuple(m.name for m in MODES.values() if all(getattr(m, k) == v for k, v in fields.items()))


def as_dicts():
    """The table as plain dicts, in table order (for filters and docs; ``renders`` is a list)."""
    return {name: dict(m._asdict(), renders=list(m.renders)) for name, m in MODES.items()}
