# Copyright: gpusplit contributors
# Apache-2.0
"""The split device plugin's config file for a node whose Kubernetes share is shared. Controller only.

The file is in the NVIDIA device plugin's own config schema (``api/config/v1`` of
NVIDIA/k8s-device-plugin v0.20.0): ``version: v1`` and ``sharing.timeSlicing`` with
``renameByDefault``, ``failRequestsGreaterThanOne`` and one ``resources`` entry (``name``,
``replicas``) per resource the node's plan advertises. ``devices`` is left out (the plugin's default
``all``): the plugin resets any other value at start, and it only sees the node's Kubernetes share
anyway (``NVIDIA_VISIBLE_DEVICES`` of the split DaemonSet), so no UUID, of either share, is in the
file. The flags (MIG strategy, device list strategy, ...) stay in the DaemonSet's environment,
which the plugin reads over its config file.

One ConfigMap per node (templates/configmap.yaml.j2, rendered by ``split_render.render_fleet``),
named like the node's DaemonSet, which mounts it. Pure functions.
"""

from __future__ import annotations

import hashlib

import yaml

from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.scheduling import (
    LABEL_TIME_SLICING_ONE_PER_POD,
    LABEL_TIME_SLICING_REPLICAS,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.sharing import TIME_SLICING, sharing_text

CONFIG_VERSION = "v1"
CONFIG_DIR = "/config"  # where the plugin's chart mounts its config
CONFIG_FILE_NAME = "config.yaml"
CONFIG_FILE = f"{CONFIG_DIR}/{CONFIG_FILE_NAME}"
_SCHEMA_KEYS = {TIME_SLICING: "timeSlicing"}


def plugin_config(node_plan):
    """The device plugin's config for ``node_plan`` as a mapping, or None when the node shares nothing."""
    sharing = node_plan.get("sharing")
    if not sharing:
        return None
    return {
        "version": CONFIG_VERSION,
        "sharing": {
            _SCHEMA_KEYS[sharing["strategy"]]: {
                "renameByDefault": bool(sharing["rename"]),
                "failRequestsGreaterThanOne": bool(sharing["fail_requests_greater_than_one"]),
                "resources": [
                    {"name": r["name"], "replicas": sharing["replicas"]} for r in sharing["resources"]
                ],
            }
        },
    }


def config_text(node_plan):
    """The config file's text (YAML), or None when the node shares nothing."""
    config = plugin_config(node_plan)
    if config is None:
        return None
    return yaml.safe_dump(config, sort_keys=False, default_flow_style=False)


def sharing_labels(node_plan):
    """The node labels that tell diagnose a node's Kubernetes share is time-sliced ({} when it is not): the
    replicas per device, and whether the plugin fails a request of more than one replica."""
    sharing = node_plan.get("sharing")
    if not sharing:
        return {}
    labels = {LABEL_TIME_SLICING_REPLICAS: str(sharing["replicas"])}
    if sharing.get("fail_requests_greater_than_one"):
        labels[LABEL_TIME_SLICING_ONE_PER_POD] = "true"
    return labels


def daemonset_values(node_plan, config_map):
    """(whether the DaemonSet mounts a config, its per-node string values) for templates/daemonset.yaml.j2:
    ``sharing`` (what the live DaemonSet tells a later re-split), ``config_map`` and ``config_digest``."""
    text = config_text(node_plan)
    return text is not None, {
        "sharing": sharing_text(node_plan.get("sharing")),
        "config_map": config_map if text is not None else "",
        "config_digest": hashlib.sha256(text.encode()).hexdigest() if text is not None else "",
    }
