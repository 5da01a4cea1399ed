"""Filter exposing the host-share renderer (plugins/plugin_utils/host_files_render.py) to playbooks.

    {{ gpusplit_node_plan | gpusplit.k8s.host_files(gpusplit_host_services, gpusplit_host_root) }}

Every refusal becomes one AnsibleFilterError listing all messages. The role gpu_host works out the whole
host side on the controller in its own step (plugins/plugin_utils/role_steps.py, plugin_utils/host_play.py).
Documented in plugins/filter/host_files.yml (ansible-doc -t filter gpusplit.k8s.host_files).
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.plugin_utils.filter_errors import filters as wrap_filters
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.lazy import lazy

render_lib = lazy("plugin_utils.host_files_render")


def refusals():
    """The exception types this file's filters refuse with, and their titles."""
    return {render_lib.HostShareError: "gpusplit host share"}


def host_files(plan, services=None, root="/"):
    """The host share of one node plan: UUID lists, env file and drop-in texts, paths under ``root``."""
    return render_lib.host_files(plan, services, root)


class FilterModule:
    def filters(self):
        return wrap_filters((host_files,), refusals)
