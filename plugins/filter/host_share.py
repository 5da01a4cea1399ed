"""Filters exposing the host-share renderer (plugins/plugin_utils/host_share.py) to the role gpu_host.

    {{ gpusplit_node_plan | gpusplit.k8s.gpusplit_host_share(gpusplit_host_services, gpusplit_host_root) }}
    {{ found_dropin_paths | gpusplit.k8s.gpusplit_stale_dropins(share) }}

Every refusal becomes one AnsibleFilterError listing all messages.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.plugin_utils import host_share
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.filter_errors import filters as wrap_filters

REFUSALS = {host_share.HostShareError: "gpusplit host share"}


def gpusplit_host_share(plan, services=None, root="/"):
    """The host share of one node plan: UUID lists, env file and drop-in texts, paths under ``root``."""
    return host_share.host_share(plan, services, root)


def gpusplit_stale_dropins(found_paths, share):
    """The managed drop-ins found on the host whose unit is no longer in gpusplit_host_services."""
    return host_share.stale_dropins(list(found_paths or []), share)


class FilterModule:
    def filters(self):
        return wrap_filters((gpusplit_host_share, gpusplit_stale_dropins), REFUSALS)
