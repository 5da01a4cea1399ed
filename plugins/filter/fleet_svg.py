"""Filter drawing the fleet picture (out/fleet.svg) from the fleet report and the fleet plan.

    {{ report | gpusplit.k8s.fleet_svg(plan) }}
    {{ report | gpusplit.k8s.fleet_svg(plan, title='gpusplit fleet (lab)') }}

One row per node, one cell per GPU coloured by share (Kubernetes, host, excluded/unhealthy),
tooltips with UUID, PCI bus id, name and health. See plugins/plugin_utils/fleet_drawing.py.
Each filter is documented in plugins/filter/<name>.yml (ansible-doc -t filter gpusplit.k8s.<name>).
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpusplit.k8s.plugins.plugin_utils.filter_errors import filters as wrap_filters
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.lazy import lazy

fleet_svg_lib = lazy("plugin_utils.fleet_drawing")


def fleet_svg(report, plan, title="gpusplit fleet"):
    """The SVG document for ``report`` (verify) and ``plan`` (split plan)."""
    if not isinstance(report, dict) or not isinstance(plan, dict):
        raise AnsibleFilterError(
            "gpusplit.k8s.fleet_svg: expected the fleet report and the fleet plan (mappings)"
        )
    return fleet_svg_lib.render_fleet_svg(report, plan, title=title)


class FilterModule:
    def filters(self):
        return wrap_filters((fleet_svg,))
