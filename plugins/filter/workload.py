"""Filters rendering gang jobs (PodGroup, or on 1.35 a Workload, + member Pods) for kubernetes.core.

    {{ {'name': 'train', 'replicas': 4, 'min_count': 4, 'gpus_per_pod': 1}
       | gpusplit.k8s.gang_job(cluster_info) }}     -> [PodGroup, Pod x4] in the version the cluster serves

With a second argument, the components' gates (gpusplit.k8s.control_plane_health's answer), a gang the
release's kube-scheduler would not hold (GangScheduling off on 1.35 or 1.36) is refused, naming the gate.

Every refusal becomes one AnsibleFilterError listing all reasons.
Each filter is documented in plugins/filter/<name>.yml (ansible-doc -t filter gpusplit.k8s.<name>).
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.plugin_utils.filter_errors import filters as wrap_filters
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.lazy import lazy

workload = lazy("plugin_utils.gang_job_render")


def refusals():
    """The exception types this file's filters refuse with, and their titles."""
    return {workload.WorkloadError: "gpusplit gang job"}


def gang_job(spec, version="1.37", gates=None):
    """The PodGroup (or 1.35's Workload) and its member Pods, in creation order; ``version`` is
    kubernetes.core.k8s_cluster_info's answer, a group/version or a release; ``gates`` the components' gates
    (control_plane_health's answer), checked against what the release's kube-scheduler needs for gangs."""
    return workload.render_gang_job(spec, version, gates)


class FilterModule:
    def filters(self):
        return wrap_filters((gang_job,), refusals)
