"""Filters exposing the host-share renderer (plugins/plugin_utils/host_share.py) to the role gpu_host.

    {{ gpusplit_node_plan | gpusplit.k8s.host_share(gpusplit_host_services, gpusplit_host_root) }}
    {{ found_dropin_paths | gpusplit.k8s.stale_dropins(share) }}
    {{ gpusplit_node_plan | gpusplit.k8s.host_run(gpusplit_host_services, gpusplit_host_root, ...) }}
    {{ gpusplit_fleet_plan | gpusplit.k8s.host_side_fleet(hostvars, defaults, toolkit_settings) }}

Every refusal becomes one AnsibleFilterError listing all messages.
Each filter is documented in plugins/filter/<name>.yml (ansible-doc -t filter gpusplit.k8s.<name>).
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.plugin_utils.filter_errors import filters as wrap_filters
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.lazy import lazy

host_share_lib = lazy("plugin_utils.host_share")
host_side_lib = lazy("plugin_utils.host_side")


def refusals():
    """The exception types this file's filters refuse with, and their titles."""
    return {host_share_lib.HostShareError: "gpusplit host share"}


def host_share(plan, services=None, root="/"):
    """The host share of one node plan: UUID lists, env file and drop-in texts, paths under ``root``."""
    return host_share_lib.host_share(plan, services, root)


def stale_dropins(found_paths, share):
    """The managed drop-ins found on the host whose unit is no longer in gpusplit_host_services."""
    return host_share_lib.stale_dropins(list(found_paths or []), share)


def host_run(
    plan,
    services=None,
    root="/",
    toolkit_hardening=True,
    plugin_settings=None,
    toolkit_config_path="/etc/nvidia-container-runtime/config.toml",
    toolkit_backup=True,
    systemd_reload=True,
    toolkit_settings=None,
    discovery=None,
):
    """What gpu_host does on the host of one node plan, with the digest of it (plugin_utils/host_side.py)."""
    return host_side_lib.host_run(
        plan,
        services,
        root,
        toolkit_hardening,
        plugin_settings,
        toolkit_config_path,
        toolkit_backup,
        systemd_reload,
        toolkit_settings,
        discovery,
    )


def host_side_fleet(plan, hostvars, defaults=None, toolkit_settings=None):
    """host_run for every planned host with its own variables, and the hosts whose host side changes."""
    return host_side_lib.host_side_fleet(plan, hostvars, defaults, toolkit_settings)


class FilterModule:
    def filters(self):
        return wrap_filters((host_share, stale_dropins, host_run, host_side_fleet), refusals)
